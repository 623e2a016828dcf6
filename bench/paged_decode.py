"""Decode attention on the H200: our paged decode kernel (through a block table, and through
`minimodel.attention` on the contiguous cache) against SDPA's cuDNN and FlashAttention-2 backends
and Lab 02's `flash_attention`; our paged prefill kernel against `flash_attention`; the copy rate.
Lab 03 part 2 ("The benchmark") says how it is measured and reads the files.

    python -m bench.paged_decode --out data/bench-paged-decode-h200.json   # ~4 min
    python -m bench.paged_decode --out /tmp/x.json --quick                 # smoke run
    python -m bench.paged_decode --sweep --out data/paged-tile-sweep-h200.json  # tiles
"""

import dataclasses
import functools
import time
import warnings
from unittest import mock

import torch
import torch.nn.functional as F
import triton

from bench import core
from bench.core import arguments, environment, save
from minimodel import paged_attention
from minimodel.attention import attention
from minimodel.attention_flash import flash_attention
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.roofline import attention_flops, kv_cache_bytes

DECODE_IMPLS = ["paged_bs16", "paged_bs64", "contiguous", "sdpa_cudnn", "sdpa_flash"]
DECODE_IMPLS += ["flash_attention"]


@dataclasses.dataclass(frozen=True)
class Decode:
    group: str  # "b1", "b64" (context sweeps), "heads", "b256", "mixed", "window", "dtype"
    b: int
    ctx: int  # the longest context; "mixed" draws lengths from 1..ctx
    hq: int = 32
    hkv: int = 8
    d: int = 128
    window: int | None = None
    dtype: str = "float16"


def decode_cases(quick: bool) -> list[Decode]:
    if quick:
        quick = [Decode("b64", 64, 4096), Decode("b1", 1, 32768), Decode("mixed", 64, 8192)]
        return [*quick, Decode("window", 1, 32768, window=4096)]
    cases = [Decode("b1", 1, n) for n in (2048, 8192, 32768, 65536, 131072)]
    cases += [Decode("b64", 64, n) for n in (512, 1024, 2048, 4096, 8192)]
    cases += [Decode("heads", 64, 4096, hkv=h) for h in (32, 1)]
    cases += [Decode("b256", 256, 512), Decode("mixed", 64, 8192)]
    cases += [Decode("window", b, 32768, window=4096) for b in (1, 16)]
    cases += [Decode("window", 16, 32768), Decode("window", 16, 4096)]
    return cases + [
        Decode("dtype", 64, 4096, dtype="bfloat16"),
        Decode("dtype", 64, 4096, d=64, hq=64),
    ]


def inputs(case: Decode) -> tuple:
    """q (B, Hq, d), k and v (B, Hkv, ctx, d) in the case's dtype, and the context lengths."""
    dt = getattr(torch, case.dtype)
    q, k, v = core.qkv(case.b, case.hq, case.hkv, case.ctx, case.d, dtype=dt)
    if case.group != "mixed":
        return q, k, v, [case.ctx] * case.b
    lens = torch.randint(1, case.ctx + 1, (case.b,), generator=torch.Generator().manual_seed(0))
    return q, k, v, lens.tolist()


def kv_bytes(case: Decode, lens: list[int]) -> int:
    w, elem = case.window or max(lens), torch.finfo(getattr(torch, case.dtype)).bits // 8
    return sum(kv_cache_bytes(1, case.hkv, case.d, min(n, w), elem_bytes=elem) for n in lens)


def paged(kernel, q, k, v, lens: list[int], block_size: int, *args, **kwargs):
    """`kernel` (paged_decode or paged_prefill) on q and the cache k, v copied into blocks of
    `block_size` in a random order (the same one for k and v)."""
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, lens, block_size)
    return functools.partial(kernel, q, k_pool, v_pool, table, lens_t, *args, **kwargs)


def decode_fn(impl: str, case: Decode, q, k, v, lens: list[int]):
    """(fn, form): one decode step of `impl` on these inputs."""
    if impl.startswith("paged_bs"):
        bs = int(impl.removeprefix("paged_bs"))
        fn = paged(paged_decode, q, k, v, lens, bs, max_context_len=max(lens), window=case.window)
        return fn, f"block table, block size {bs}, random permutation"
    if len(set(lens)) > 1:
        raise NotImplementedError("takes one context length per batch only")
    q4, mask = q[:, :, None], {"causal": True, "window": case.window}
    if impl == "contiguous":
        fn = functools.partial(attention, q4, k, v, **mask)
        return fn, "minimodel.attention, contiguous cache read in place"
    if impl == "flash_attention":
        fn = functools.partial(flash_attention, q4, k, v, **mask)
        return fn, "Lab 02's kernel, contiguous cache"
    if case.window is not None:
        raise NotImplementedError("SDPA has no sliding-window argument")
    # SDPA, kv heads shared in place; the caller picks the backend (in_turns, tried), so that no
    # context's cost joins an eager time
    gqa = case.hq != case.hkv
    fn = functools.partial(F.scaled_dot_product_attention, q4, k, v, enable_gqa=gqa)
    return fn, "enable_gqa" if gqa else "native"


def bench_decode(case: Decode, impls: list[str], rounds: int) -> list[dict]:
    q, k, v, lens = inputs(case)
    refs = core.reference(q, k, v, sorted({0, len(lens) - 1}), lens, case.window)
    nbytes, recs, fns = kv_bytes(case, lens), {}, {}
    for impl in impls:
        recs[impl] = {**dataclasses.asdict(case), "impl": impl, "kv_bytes": nbytes, "ms_runs": []}

        def make(impl=impl):
            fn, recs[impl]["form"] = decode_fn(impl, case, q, k, v, lens)
            return fn

        core.tried(recs, fns, impl, make, lambda out: core.max_error(out, refs))
    core.in_turns(recs, fns, rounds, eager=True)
    return [core.rates(rec, nbytes) for rec in recs.values()]


def bench_splits(case: Decode, splits: list[int], block_size: int = 16) -> list[dict]:
    """Our paged kernel at forced split counts (and the default choice) on one shape."""
    q, k, v, lens = inputs(case)
    block_g, chunks = paged_attention.group_rows(case.hq // case.hkv)  # as _launch_decode does
    cfg = paged_attention.decode_config(triton.next_power_of_2(case.d), q.element_size(), block_g)
    keys = max(lens) if case.window is None else min(max(lens), case.window + cfg.block_n - 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = paged_attention.choose_num_splits(case.b, case.hkv, keys, cfg.block_n, sms, chunks)
    nbytes, recs, fns = kv_bytes(case, lens), {}, {}
    for s in sorted(set(splits) | {chosen}):
        kw = {"max_context_len": max(lens), "window": case.window, "num_splits": s}
        fns[s] = paged(paged_decode, q, k, v, lens, block_size, **kw)
        recs[s] = {**dataclasses.asdict(case), "splits": s, "chosen": s == chosen}
        recs[s] |= {"kv_bytes": nbytes, "ms_runs": []}
    core.in_turns(recs, fns, 1, eager=True)
    return [core.rates(rec, nbytes) for rec in recs.values()]


@dataclasses.dataclass(frozen=True)
class Prefill:
    b: int
    ctx: int  # keys per sequence, the new ones included
    nq: int  # new query tokens per sequence (the uncached suffix)
    hq: int = 32
    hkv: int = 8
    d: int = 128
    window: int | None = None


def prefill_cases(quick: bool) -> list[Prefill]:
    cases = [Prefill(4, 8192, 1024), Prefill(1, 16384, 2048), Prefill(4, 4096, 4096)]
    return cases[:1] if quick else [*cases, Prefill(2, 16384, 4096, window=4096)]


def bench_prefill(case: Prefill, rounds: int) -> list[dict]:
    q, k, v = core.qkv(case.b, case.hq, case.hkv, case.ctx, case.d, nq=case.nq)
    mask = {"causal": True, "window": case.window}
    flops = attention_flops(case.b, case.hq, case.nq, case.ctx, case.d, **mask)
    starts = torch.arange(0, (case.b + 1) * case.nq, case.nq, dtype=torch.int32, device="cuda")
    q_packed = q.transpose(1, 2).reshape(case.b * case.nq, case.hq, case.d)
    kw = {"max_query_len": case.nq, "window": case.window}
    lens = [case.ctx] * case.b
    makes = {
        f"paged_bs{bs}": functools.partial(
            paged, paged_prefill, q_packed, k, v, lens, bs, starts, **kw
        )
        for bs in (16, 64)
    }
    makes["flash_attention"] = lambda: functools.partial(flash_attention, q, k, v, **mask)

    def check(out):  # the first sequence's first group; paged_prefill's rows are packed
        out = out[: case.nq].transpose(0, 1)[None] if out.dim() == 3 else out
        return core.group_error(out, q, k, v, **mask)

    recs, fns = {}, {}
    for impl, make in makes.items():
        recs[impl] = {**dataclasses.asdict(case), "impl": impl, "flops": flops, "ms_runs": []}
        core.tried(recs, fns, impl, make, check)
    core.in_turns(recs, fns, rounds, eager=True)
    return [core.rates(rec, flops=flops) for rec in recs.values()]


def sweep(out, quick: bool = False) -> None:
    """Decode tiles (BLOCK_N, warps, stages) and prefill tiles on two shapes each (quick: the
    first shape and two tiles of each)."""
    records, cut = [], 2 if quick else None
    for case in (Decode("b64", 64, 4096), Decode("b1", 1, 131072))[: 1 if quick else None]:
        tiles = [(32, 4, 3), (64, 4, 3), (64, 4, 4), (64, 4, 5), (64, 8, 3), (128, 4, 3)]
        for c in [*tiles, (128, 8, 3), (32, 4, 5)][:cut]:
            print(f"{case.group} {case.ctx} {c}", flush=True)
            tile = lambda *a, c=c: paged_attention.DecodeConfig(*c)
            with mock.patch.object(paged_attention, "decode_config", tile):
                recs = bench_decode(case, ["paged_bs16", "contiguous"], 1)
            records += [{**r, "config": list(c)} for r in recs]
    for c in [(128, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3)][:cut]:
        print(f"prefill {c}", flush=True)
        tile = lambda *a, c=c: paged_attention.PrefillConfig(*c)
        with mock.patch.object(paged_attention, "prefill_config", tile):
            recs = bench_prefill(Prefill(4, 8192, 1024), 1)
        recs = [r for r in recs if r["impl"] != "flash_attention" or c == (128, 64, 4, 3)]
        records += [{**r, "config": list(c)} for r in recs]
    what = (
        "bench/paged_decode.py --sweep: the decode kernel's (BLOCK_N, num_warps, num_stages) "
        "on two shapes, through the block table (b=16) and the contiguous path, and the "
        "prefill kernel's (BLOCK_M, BLOCK_N, num_warps, num_stages); eager do_bench medians, "
        "one round (the first GPU run, before CUDA-graph timing was added)"
    )
    save(out, {"environment": environment(), "records": records, "what": what})


def main() -> None:
    flags = {"quick": "a few shapes (a smoke run)", "sweep": "tile sweep only"}
    args = arguments(__doc__, rounds=2, **flags).parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains every refusal
    t0 = time.time()
    if args.sweep:
        return sweep(args.out, args.quick)
    record = {
        "environment": environment(),
        "timing": "triton.testing.do_bench medians (its 256 MB buffer write between runs evicts "
        "the L2): ms of the eager call (ms_runs, one per round), graph_ms of the same "
        "call captured in a CUDA graph and replayed (graph_ms_runs)",
        "bytes": "K/V bytes read: minimodel.roofline.kv_cache_bytes(1, Hkv, d, min(context, "
        "window)) summed over the batch",
        "flops": "minimodel.roofline.attention_flops (visible pairs, bottom-right causal)",
        "copy_bytes_per_s": [core.copy_rate()],
        "num_sms": torch.cuda.get_device_properties(0).multi_processor_count,
    }
    record |= {"decode": [], "splits": [], "prefill": []}
    splits = [
        (Decode("b64", 64, 4096), [1, 2, 3, 4, 8]),
        (Decode("b1", 1, 131072), [8, 16, 33, 66, 132, 256]),
        (Decode("b1", 1, 32768), [8, 16, 33, 66, 128]),
    ]
    runs = [
        ("decode", c, bench_decode, (DECODE_IMPLS, args.rounds)) for c in decode_cases(args.quick)
    ]
    runs += [("splits", c, bench_splits, (s,)) for c, s in splits[: 1 if args.quick else None]]
    runs += [("prefill", c, bench_prefill, (args.rounds,)) for c in prefill_cases(args.quick)]
    for key, case, bench, bench_args in runs:
        print(f"{key} {case}", flush=True)  # in_turns prints each round's times
        record[key] += bench(case, *bench_args)
        save(args.out, record)  # after every case: a run cut short still leaves its data
    record["copy_bytes_per_s"].append(core.copy_rate())
    save(args.out, record)
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

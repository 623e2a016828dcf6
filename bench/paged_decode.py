"""Decode-attention benchmark: minimodel's paged decode kernel (through a block table, and through
`minimodel.attention` on a contiguous cache) against PyTorch's SDPA backends (cuDNN,
FlashAttention-2) and Lab 02's `flash_attention` on the contiguous cache; and the paged prefill
kernel against `flash_attention`. Everything is measured in one process on the same keys and
values, with the device copy rate measured in the same run.

    python -m bench.paged_decode --out data/bench-paged-decode-h200.json   # ~4 min on the H200
    python -m bench.paged_decode --out /tmp/x.json --quick                 # smoke run
    python -m bench.paged_decode --sweep --out data/paged-tile-sweep-h200.json  # tiles

Decode rates are K/V bytes read per second: `minimodel.roofline.kv_cache_bytes(1, Hkv, d,
tokens, batch)` (2 Hkv d E bytes per token a sequence attends to, the compulsory traffic of a
decode step; the query and output add under 0.1% at these shapes), with tokens = min(context,
window) per sequence. Every implementation gets the same numerator, so a backend that must read
repeated kv heads (noted in `form`) is charged for the cache, not for what it actually read.
Timing: `triton.testing.do_bench` medians, of the eager call and of the same call captured in a
CUDA graph and replayed (the GPU's time without Python's launch overhead), two rounds in turns;
do_bench writes a 256 MB buffer between runs, which evicts the 60 MB L2, so inputs are not
rotated. Each implementation's output is checked against the float32 reference (two sequences)
before it is timed.
"""

import dataclasses
import functools
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
import triton

from bench.core import SDPA, arguments, environment, error, in_blocks, randn, save, sdpa, time_ms
from minimodel import paged_attention
from minimodel.attention import attention
from minimodel.attention_flash import flash_attention
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.reference import attention_ref
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
    dt, g = getattr(torch, case.dtype), torch.Generator(device="cuda").manual_seed(0)
    q = randn(case.b, case.hq, case.d, dtype=dt, generator=g)
    k, v = (randn(case.b, case.hkv, case.ctx, case.d, dtype=dt, generator=g) for _ in "kv")
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
    (kp, table), (vp, _) = in_blocks(k, lens, block_size), in_blocks(v, lens, block_size)
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    return functools.partial(kernel, q, kp, vp, table, lens_t, *args, **kwargs)


def sdpa_fn(impl: str, q4, k, v, case: Decode):
    """SDPA on the contiguous cache, (fn, form): GQA natively (enable_gqa) if the backend takes
    it, else on kv heads repeated beforehand (outside the timing)."""
    g = case.hq // case.hkv
    fn = functools.partial(F.scaled_dot_product_attention, q4, k, v, enable_gqa=g > 1)
    try:
        with sdpa(impl):
            fn()
        return fn, "enable_gqa" if g > 1 else "native"
    except RuntimeError:
        if g == 1:
            raise
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return functools.partial(F.scaled_dot_product_attention, q4, kk, vv), "repeated kv heads"


def decode_fn(impl: str, case: Decode, q, k, v, lens: list[int]):
    """(fn, form): one decode step of `impl` on these inputs."""
    if impl.startswith("paged_bs"):
        bs = int(impl.removeprefix("paged_bs"))
        fn = paged(paged_decode, q, k, v, lens, bs, max_context_len=max(lens), window=case.window)
        return fn, f"block table, block size {bs}, random permutation"
    if len(set(lens)) > 1:
        raise NotImplementedError("takes one context length per batch only")
    q4 = q[:, :, None]
    if impl == "contiguous":
        fn = functools.partial(attention, q4, k, v, causal=True, window=case.window)
        return fn, "minimodel.attention, contiguous cache read in place"
    if impl == "flash_attention":
        fn = functools.partial(flash_attention, q4, k, v, causal=True, window=case.window)
        return fn, "Lab 02's kernel, contiguous cache"
    if impl in SDPA:
        if case.window is not None:
            raise NotImplementedError("SDPA has no sliding-window argument")
        return sdpa_fn(impl, q4, k, v, case)
    raise ValueError(f"unknown implementation {impl!r}")


def timed(recs: dict, fns: dict, rounds: int, nbytes=None, flops=None, impls: dict | None = None):
    """Time every implementation eagerly and from a CUDA graph, in turns, `rounds` times (under
    the SDPA backend `impls` maps it to, else its own name's); medians and rates into recs."""
    for _ in range(rounds):
        for name, fn in fns.items():
            impl = (impls or {}).get(name, name)
            recs[name]["ms_runs"].append(time_ms(fn, impl))
            try:
                recs[name].setdefault("graph_ms_runs", []).append(time_ms(fn, impl, graph=True))
            except Exception as e:  # noqa: BLE001 - a capture failure is data too
                recs[name]["graph_error"] = error(e, 160)
    for rec in recs.values():
        for key in ("ms", "graph_ms"):
            if rec.get(key + "_runs") and not (key == "graph_ms" and "graph_error" in rec):
                rec[key] = statistics.median(rec[key + "_runs"])
                if nbytes is not None:
                    rec[key.replace("ms", "gb_per_s")] = nbytes / rec[key] / 1e6
                if flops is not None:
                    rec[key.replace("ms", "tflops")] = flops / rec[key] / 1e9
    torch.cuda.empty_cache()


def bench_decode(case: Decode, impls: list[str], rounds: int) -> list[dict]:
    q, k, v, lens = inputs(case)
    ref = {}  # the first and the last sequence
    for r in sorted({0, len(lens) - 1}):
        kr, vr = (t[r : r + 1, :, : lens[r]].float() for t in (k, v))
        out = attention_ref(q[r : r + 1, :, None].float(), kr, vr, causal=True, window=case.window)
        ref[r] = out[0, :, 0]
    nbytes, recs, fns = kv_bytes(case, lens), {}, {}
    for impl in impls:
        rec = recs[impl] = {**dataclasses.asdict(case), "impl": impl, "kv_bytes": nbytes}
        rec["ms_runs"] = []
        try:
            fn, rec["form"] = decode_fn(impl, case, q, k, v, lens)
            with sdpa(impl):
                out = fn()
            out = out[:, :, 0] if out.dim() == 4 else out
            rec["max_err"] = max((out[r].float() - ref[r]).abs().max().item() for r in ref)
            fns[impl] = fn
        except Exception as e:  # noqa: BLE001 - an unsupported combination is data too
            rec["error"] = error(e)
    timed(recs, fns, rounds, nbytes=nbytes)
    return list(recs.values())


def bench_splits(case: Decode, splits: list[int], block_size: int = 16) -> list[dict]:
    """Our paged kernel at forced split counts (and the default choice) on one shape."""
    q, k, v, lens = inputs(case)
    cfg = paged_attention.decode_config(triton.next_power_of_2(case.d), q.element_size())
    keys = max(lens) if case.window is None else min(max(lens), case.window + cfg.block_n - 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chunks = paged_attention.group_rows(case.hq // case.hkv)[1]  # as _launch_decode counts them
    chosen = paged_attention.choose_num_splits(case.b, case.hkv, keys, cfg.block_n, sms, chunks)
    nbytes, recs, fns = kv_bytes(case, lens), {}, {}
    for s in sorted(set(splits) | {chosen}):
        kw = {"max_context_len": max(lens), "window": case.window, "num_splits": s}
        fns[s] = paged(paged_decode, q, k, v, lens, block_size, **kw)
        recs[s] = {**dataclasses.asdict(case), "splits": s, "chosen": s == chosen}
        recs[s] |= {"kv_bytes": nbytes, "ms_runs": []}
    timed(recs, fns, 1, nbytes=nbytes)
    return list(recs.values())


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
    g = torch.Generator(device="cuda").manual_seed(0)
    q = randn(case.b, case.hq, case.nq, case.d, generator=g)
    k, v = (randn(case.b, case.hkv, case.ctx, case.d, generator=g) for _ in "kv")
    flops = attention_flops(
        case.b, case.hq, case.nq, case.ctx, case.d, causal=True, window=case.window
    )
    group = case.hq // case.hkv  # the first group: query heads 0..group-1 read kv head 0
    ref = attention_ref(
        q[:1, :group].float(), k[:1, :1].float(), v[:1, :1].float(), causal=True, window=case.window
    )
    starts = torch.arange(0, (case.b + 1) * case.nq, case.nq, dtype=torch.int32, device="cuda")
    q_packed = q.transpose(1, 2).reshape(case.b * case.nq, case.hq, case.d)
    recs, fns = {}, {}
    for impl in ("paged_bs16", "paged_bs64", "flash_attention"):
        rec = recs[impl] = {**dataclasses.asdict(case), "impl": impl, "flops": flops, "ms_runs": []}
        try:
            if impl == "flash_attention":
                fn = functools.partial(flash_attention, q, k, v, causal=True, window=case.window)
                out = fn()[:1, :group]
            else:
                bs = int(impl.removeprefix("paged_bs"))
                kw = {"max_query_len": case.nq, "window": case.window}
                fn = paged(paged_prefill, q_packed, k, v, [case.ctx] * case.b, bs, starts, **kw)
                out = fn()[: case.nq, :group].transpose(0, 1)[None]
            rec["max_err"] = (out.float() - ref).abs().max().item()
            fns[impl] = fn
        except Exception as e:  # noqa: BLE001
            rec["error"] = error(e)
    timed(recs, fns, rounds, flops=flops)
    return list(recs.values())


def copy_rate() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written per second (do_bench median)."""
    src = torch.randn(2**29, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))  # eager: a captured copy runs on the copy engine
    return 2 * src.nbytes / ms / 1e-3


def show(what: str, recs: list[dict], rate: str = "gb_per_s") -> None:
    rates = [
        f"{r.get('impl', r.get('splits'))} {r.get(rate, 0):.0f}/{r.get('graph_' + rate, 0):.0f}"
        for r in recs
    ]
    print(f"{what}: eager/graph {rate}: " + ", ".join(rates), flush=True)


def sweep(out, quick: bool = False) -> None:
    """Decode tiles (BLOCK_N, warps, stages) and prefill tiles on two shapes each (quick: the
    first shape and two tiles of each)."""
    records, orig_d, orig_p = [], paged_attention.decode_config, paged_attention.prefill_config
    cut = 2 if quick else None
    for case in (Decode("b64", 64, 4096), Decode("b1", 1, 131072))[: 1 if quick else None]:
        tiles = [(32, 4, 3), (64, 4, 3), (64, 4, 4), (64, 4, 5), (64, 8, 3), (128, 4, 3)]
        for c in [*tiles, (128, 8, 3), (32, 4, 5)][:cut]:
            paged_attention.decode_config = lambda *a, c=c: paged_attention.DecodeConfig(*c)
            recs = bench_decode(case, ["paged_bs16", "contiguous"], 1)
            records += [{**r, "config": list(c)} for r in recs]
            show(f"{case.group} {case.ctx} {c}", recs)
    paged_attention.decode_config = orig_d
    for c in [(128, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3)][:cut]:
        paged_attention.prefill_config = lambda *a, c=c: paged_attention.PrefillConfig(*c)
        recs = bench_prefill(Prefill(4, 8192, 1024), 1)
        recs = [r for r in recs if r["impl"] != "flash_attention" or c == (128, 64, 4, 3)]
        records += [{**r, "config": list(c)} for r in recs]
        show(f"prefill {c}", recs, "tflops")
    paged_attention.prefill_config = orig_p
    what = (
        "bench/paged_decode.py --sweep: the decode kernel's (BLOCK_N, num_warps, num_stages) "
        "on two shapes, through the block table (b=16) and the contiguous path, and the "
        "prefill kernel's (BLOCK_M, BLOCK_N, num_warps, num_stages); eager do_bench medians, "
        "one round (the first GPU run, before CUDA-graph timing was added)"
    )
    save(out, {"environment": environment(), "records": records, "what": what})


def main() -> None:
    parser = arguments(__doc__, quick="a few shapes (a smoke run)", sweep="tile sweep only")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
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
        "copy_bytes_per_s": [copy_rate()],
        "num_sms": torch.cuda.get_device_properties(0).multi_processor_count,
    }
    record |= {"decode": [], "splits": [], "prefill": []}
    for case in decode_cases(args.quick):
        record["decode"] += (recs := bench_decode(case, DECODE_IMPLS, args.rounds))
        save(args.out, record)  # after every case: a run cut short still leaves its data
        show(str(case), recs)
    splits = [
        (Decode("b64", 64, 4096), [1, 2, 3, 4, 8]),
        (Decode("b1", 1, 131072), [8, 16, 33, 66, 132, 256]),
        (Decode("b1", 1, 32768), [8, 16, 33, 66, 128]),
    ]
    for case, counts in splits[: 1 if args.quick else None]:
        record["splits"] += (recs := bench_splits(case, counts))
        save(args.out, record)
        show(f"splits {case}", recs)
    for case in prefill_cases(args.quick):
        record["prefill"] += (recs := bench_prefill(case, args.rounds))
        save(args.out, record)
        show(str(case), recs, "tflops")
    record["copy_bytes_per_s"].append(copy_rate())
    save(args.out, record)
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""Decode-attention benchmark: minimodel's paged decode kernel (through a block table, and through
`minimodel.attention` on a contiguous cache) against PyTorch's SDPA backends (cuDNN,
FlashAttention-2) and Lab 02's `flash_attention` on the contiguous cache; and the paged prefill
kernel against `flash_attention`. Everything is measured in one process on the same keys and
values, and written to a JSON data file with the environment and the device copy rate measured in
the same run (figures/paged_decode.py makes the tables and the figure from it).

    python -m bench.paged_decode --out data/bench-paged-decode-h200.json   # ~2 min
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
rotated. Each implementation's output is checked against
the float32 reference (two sequences) before it is timed.
"""

import argparse
import dataclasses
import functools
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.core import environment, time_ms
from minimodel import paged_attention
from minimodel.attention import attention
from minimodel.attention_flash import flash_attention
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.reference import attention_ref
from minimodel.roofline import attention_flops, kv_cache_bytes

DEVICE = "cuda"
DECODE_IMPLS = [
    "paged_bs16",
    "paged_bs64",
    "contiguous",
    "sdpa_cudnn",
    "sdpa_flash",
    "flash_attention",
]
SDPA = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


@dataclasses.dataclass(frozen=True)
class Decode:
    group: str  # "b1", "b64" (context sweeps), "heads", "b256", "mixed", "window", "blocks"
    b: int
    ctx: int  # the longest context; "mixed" draws lengths from 1..ctx
    hq: int = 32
    hkv: int = 8
    d: int = 128
    window: int | None = None
    dtype: str = "float16"


def decode_cases(quick: bool) -> list[Decode]:
    if quick:
        return [
            Decode("b64", 64, 4096),
            Decode("b1", 1, 32768),
            Decode("mixed", 64, 8192),
            Decode("window", 1, 32768, window=4096),
        ]
    out = [Decode("b1", 1, n) for n in (2048, 8192, 32768, 65536, 131072)]
    out += [Decode("b64", 64, n) for n in (512, 1024, 2048, 4096, 8192)]
    out += [Decode("heads", 64, 4096, hkv=h) for h in (32, 1)]
    out += [Decode("b256", 256, 512)]
    out += [Decode("mixed", 64, 8192)]
    out += [Decode("window", b, 32768, window=4096) for b in (1, 16)]
    out += [Decode("window", 16, 32768), Decode("window", 16, 4096)]
    out += [Decode("dtype", 64, 4096, dtype="bfloat16"), Decode("dtype", 64, 4096, d=64, hq=64)]
    return out


def lengths(case: Decode) -> list[int]:
    if case.group != "mixed":
        return [case.ctx] * case.b
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, case.ctx + 1, (case.b,), generator=g).tolist()


def kv_bytes(case: Decode, lens: list[int]) -> int:
    w = case.window or max(lens)
    elem = torch.finfo(getattr(torch, case.dtype)).bits // 8
    return sum(kv_cache_bytes(1, case.hkv, case.d, min(n, w), elem_bytes=elem) for n in lens)


def to_pool(k: torch.Tensor, lens: list[int], block_size: int, seed: int = 1):
    """The contiguous cache k: (B, Hkv, N, d) copied into a pool (num_blocks, block_size, Hkv,
    d) at a random permutation of physical blocks; returns (pool, block_table)."""
    b, hkv, n, d = k.shape
    per_seq = [triton.cdiv(x, block_size) for x in lens]
    total = sum(per_seq)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    perm = torch.randperm(total, generator=g, device=DEVICE).to(torch.int32)
    pool = torch.empty((total, block_size, hkv, d), dtype=k.dtype, device=DEVICE)
    table = torch.full((b, triton.cdiv(n, block_size)), -1, dtype=torch.int32, device=DEVICE)
    start = 0
    for i, nb in enumerate(per_seq):
        ids = perm[start : start + nb]
        table[i, :nb] = ids
        padded = torch.zeros((hkv, nb * block_size, d), dtype=k.dtype, device=DEVICE)
        padded[:, : lens[i]] = k[i, :, : lens[i]]
        pool[ids.long()] = padded.view(hkv, nb, block_size, d).permute(1, 2, 0, 3)
        start += nb
    return pool, table


def sdpa_fn(backend: str, q4, k, v, case: Decode):
    """SDPA on the contiguous cache: GQA natively (enable_gqa) if the backend takes it, else on
    kv heads repeated beforehand (outside the timing)."""
    g = case.hq // case.hkv
    fn = functools.partial(F.scaled_dot_product_attention, q4, k, v, enable_gqa=g > 1)
    try:
        with sdpa_kernel(SDPA[backend]):
            out = fn()
        return fn, out, "enable_gqa" if g > 1 else "native"
    except RuntimeError:
        if g == 1:
            raise
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    fn = functools.partial(F.scaled_dot_product_attention, q4, kk, vv)
    with sdpa_kernel(SDPA[backend]):
        out = fn()
    return fn, out, "repeated kv heads"


def reference(q, k, v, lens, case: Decode) -> dict[int, torch.Tensor]:
    """The float32 reference for the first and the last sequence of the batch."""
    out = {}
    for r in sorted({0, len(lens) - 1}):
        n = lens[r]
        out[r] = attention_ref(
            q[r : r + 1, :, None].float(),
            k[r : r + 1, :, :n].float(),
            v[r : r + 1, :, :n].float(),
            causal=True,
            window=case.window,
        )[0, :, 0]
    return out


def timed(
    recs: dict,
    fns: dict,
    rounds: int,
    nbytes: int | None = None,
    flops: int | None = None,
    backends: dict = SDPA,
) -> None:
    """Time every implementation eagerly and from a CUDA graph, in turns, `rounds` times (under
    the SDPA backend `backends` names for it, if any); medians and rates into recs."""
    for _ in range(rounds):
        for impl, fn in fns.items():
            recs[impl]["ms_runs"].append(time_ms(fn, backends.get(impl)))
            try:
                graph_ms = time_ms(fn, backends.get(impl), graph=True)
                recs[impl].setdefault("graph_ms_runs", []).append(graph_ms)
            except Exception as e:  # noqa: BLE001 - a capture failure is data too
                recs[impl]["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    for rec in recs.values():
        for key, runs in (("ms", "ms_runs"), ("graph_ms", "graph_ms_runs")):
            if rec.get(runs) and not (key == "graph_ms" and "graph_error" in rec):
                rec[key] = statistics.median(rec[runs])
                if nbytes is not None:
                    rec[key.replace("ms", "gb_per_s")] = nbytes / rec[key] / 1e6
                if flops is not None:
                    rec[key.replace("ms", "tflops")] = flops / rec[key] / 1e9
    torch.cuda.empty_cache()


def bench_decode(case: Decode, impls: list[str], rounds: int) -> list[dict]:
    dt = getattr(torch, case.dtype)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    lens = lengths(case)
    q = torch.randn(case.b, case.hq, case.d, device=DEVICE, generator=g).to(dt)
    k, v = (
        torch.randn(case.b, case.hkv, case.ctx, case.d, device=DEVICE, generator=g).to(dt)
        for _ in range(2)
    )
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    ref = reference(q, k, v, lens, case)
    nbytes = kv_bytes(case, lens)
    uniform = len(set(lens)) == 1
    recs, fns = {}, {}
    for impl in impls:
        rec = recs[impl] = {
            **dataclasses.asdict(case),
            "impl": impl,
            "kv_bytes": nbytes,
            "ms_runs": [],
        }
        try:
            if impl.startswith("paged_bs"):
                bs = int(impl.removeprefix("paged_bs"))
                kp, table = to_pool(k, lens, bs)
                vp, _ = to_pool(v, lens, bs)  # same permutation (same seed)
                fn = functools.partial(
                    paged_decode,
                    q,
                    kp,
                    vp,
                    table,
                    lens_t,
                    max_context_len=max(lens),
                    window=case.window,
                )
                rec["form"] = f"block table, block size {bs}, random permutation"
                out = fn()
            elif not uniform:
                raise NotImplementedError("takes one context length per batch only")
            elif impl == "contiguous":
                fn = functools.partial(
                    attention, q[:, :, None], k, v, causal=True, window=case.window
                )
                out = fn()[:, :, 0]
                rec["form"] = "minimodel.attention, contiguous cache read in place"
            elif impl == "flash_attention":
                fn = functools.partial(
                    flash_attention, q[:, :, None], k, v, causal=True, window=case.window
                )
                out = fn()[:, :, 0]
                rec["form"] = "Lab 02's kernel, contiguous cache"
            elif impl in SDPA:
                if case.window is not None:
                    raise NotImplementedError("SDPA has no sliding-window argument")
                fn, out, form = sdpa_fn(impl, q[:, :, None], k, v, case)
                out = out[:, :, 0]
                rec["form"] = form
            else:
                raise ValueError(f"unknown implementation {impl!r}")
            rec["max_err"] = max((out[r].float() - ref[r]).abs().max().item() for r in ref)
            fns[impl] = fn
            del out
        except Exception as e:  # noqa: BLE001 - an unsupported combination is data too
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    timed(recs, fns, rounds, nbytes=nbytes)
    return list(recs.values())


def bench_splits(case: Decode, splits: list[int], block_size: int = 16) -> list[dict]:
    """Our paged kernel at forced split counts (and the default choice) on one shape."""
    dt = getattr(torch, case.dtype)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    lens = lengths(case)
    q = torch.randn(case.b, case.hq, case.d, device=DEVICE, generator=g).to(dt)
    k, v = (
        torch.randn(case.b, case.hkv, case.ctx, case.d, device=DEVICE, generator=g).to(dt)
        for _ in range(2)
    )
    kp, table = to_pool(k, lens, block_size)
    vp, _ = to_pool(v, lens, block_size)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    nbytes = kv_bytes(case, lens)
    cfg = paged_attention.decode_config(triton.next_power_of_2(case.d), q.element_size())
    keys = max(lens) if case.window is None else min(max(lens), case.window + cfg.block_n - 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = paged_attention.choose_num_splits(case.b, case.hkv, keys, cfg.block_n, sms)
    recs, fns = {}, {}
    for s in sorted(set(splits) | {chosen}):
        fns[s] = functools.partial(
            paged_decode,
            q,
            kp,
            vp,
            table,
            lens_t,
            max_context_len=max(lens),
            window=case.window,
            num_splits=s,
        )
        recs[s] = {
            **dataclasses.asdict(case),
            "splits": s,
            "chosen": s == chosen,
            "kv_bytes": nbytes,
            "ms_runs": [],
        }
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
    if quick:
        return [Prefill(4, 8192, 1024)]
    return [
        Prefill(4, 8192, 1024),
        Prefill(1, 16384, 2048),
        Prefill(4, 4096, 4096),
        Prefill(2, 16384, 4096, window=4096),
    ]


def bench_prefill(case: Prefill, rounds: int) -> list[dict]:
    g = torch.Generator(device=DEVICE).manual_seed(0)
    dt = torch.float16
    q = torch.randn(case.b, case.hq, case.nq, case.d, device=DEVICE, generator=g).to(dt)
    k, v = (
        torch.randn(case.b, case.hkv, case.ctx, case.d, device=DEVICE, generator=g).to(dt)
        for _ in range(2)
    )
    flops = attention_flops(
        case.b, case.hq, case.nq, case.ctx, case.d, causal=True, window=case.window
    )
    group = case.hq // case.hkv  # the first group: query heads 0..group-1 read kv head 0
    ref = attention_ref(
        q[:1, :group].float(), k[:1, :1].float(), v[:1, :1].float(), causal=True, window=case.window
    )
    lens = [case.ctx] * case.b
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    starts = torch.arange(0, (case.b + 1) * case.nq, case.nq, dtype=torch.int32, device=DEVICE)
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
                kp, table = to_pool(k, lens, bs)
                vp, _ = to_pool(v, lens, bs)
                fn = functools.partial(
                    paged_prefill,
                    q_packed,
                    kp,
                    vp,
                    table,
                    lens_t,
                    starts,
                    max_query_len=case.nq,
                    window=case.window,
                )
                out = fn()[: case.nq, :group].transpose(0, 1)[None]
            rec["max_err"] = (out.float() - ref).abs().max().item()
            fns[impl] = fn
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    timed(recs, fns, rounds, flops=flops)
    return list(recs.values())


def copy_rate() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written per second (do_bench median)."""
    src = torch.randn(2**29, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))  # eager: a captured copy runs on the copy engine
    return 2 * src.nbytes / ms / 1e-3


def sweep(out: Path) -> None:
    """Decode tiles (BLOCK_N, warps, stages) and prefill tiles on two shapes each."""
    records = []
    orig_d, orig_p = paged_attention.decode_config, paged_attention.prefill_config
    for case in (Decode("b64", 64, 4096), Decode("b1", 1, 131072)):
        for bn, w, s in [
            (32, 4, 3),
            (64, 4, 3),
            (64, 4, 4),
            (64, 4, 5),
            (64, 8, 3),
            (128, 4, 3),
            (128, 8, 3),
            (32, 4, 5),
        ]:
            paged_attention.decode_config = lambda *a, c=(bn, w, s): paged_attention.DecodeConfig(
                *c
            )
            try:
                for r in bench_decode(case, ["paged_bs16", "contiguous"], 1):
                    records.append({**r, "config": [bn, w, s]})
                    print(
                        case.group,
                        case.ctx,
                        r["impl"],
                        (bn, w, s),
                        f"{r.get('gb_per_s', 0):.0f} GB/s",
                        r.get("error", ""),
                        flush=True,
                    )
            except Exception as e:  # noqa: BLE001
                print("config", (bn, w, s), "failed:", e, flush=True)
    paged_attention.decode_config = orig_d
    for case in (Prefill(4, 8192, 1024),):
        for cfg in [(128, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3)]:
            paged_attention.prefill_config = lambda *a, c=cfg: paged_attention.PrefillConfig(*c)
            try:
                for r in bench_prefill(case, 1):
                    if r["impl"] != "flash_attention" or cfg == (128, 64, 4, 3):
                        records.append({**r, "config": list(cfg)})
                        print(
                            "prefill",
                            r["impl"],
                            cfg,
                            f"{r.get('tflops', 0):.0f} TFLOP/s",
                            r.get("error", ""),
                            flush=True,
                        )
            except Exception as e:  # noqa: BLE001
                print("prefill config", cfg, "failed:", e, flush=True)
    paged_attention.prefill_config = orig_p
    what = (
        "bench/paged_decode.py --sweep: the decode kernel's (BLOCK_N, num_warps, "
        "num_stages) on two shapes, through the block table (b=16) and the contiguous path, "
        "and the prefill kernel's (BLOCK_M, BLOCK_N, num_warps, num_stages); eager do_bench "
        "medians, one round (the first GPU run, before CUDA-graph timing was added)"
    )
    out.write_text(
        json.dumps({"environment": environment(), "records": records, "what": what}, indent=1)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="tile sweep only, to --out")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains every refusal
    t0 = time.time()
    if args.sweep:
        sweep(args.out)
        print(f"sweep done in {time.time() - t0:.0f} s")
        return
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
        "decode": [],
        "splits": [],
        "prefill": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every case: a run cut short still leaves its data
        args.out.write_text(json.dumps(record, indent=1) + "\n")

    print(f"copy {record['copy_bytes_per_s'][0] / 1e9:.0f} GB/s", flush=True)
    cases = decode_cases(args.quick)
    for i, case in enumerate(cases):
        recs = bench_decode(case, DECODE_IMPLS, args.rounds)
        record["decode"] += recs
        save()
        print(
            f"[{i + 1}/{len(cases)}] {case.group} B={case.b} ctx={case.ctx} Hkv={case.hkv} "
            f"d={case.d} W={case.window} {case.dtype} eager/graph GB/s: "
            + ", ".join(
                f"{r['impl']} {r.get('gb_per_s', 0):.0f}/{r.get('graph_gb_per_s', 0):.0f}"
                for r in recs
            ),
            flush=True,
        )
    for case, counts in (
        (Decode("b64", 64, 4096), [1, 2, 3, 4, 8]),
        (Decode("b1", 1, 131072), [8, 16, 33, 66, 132, 256]),
        (Decode("b1", 1, 32768), [8, 16, 33, 66, 128]),
    ):
        recs = bench_splits(case, counts)
        record["splits"] += recs
        save()
        print(
            "splits",
            case.b,
            case.ctx,
            [(r["splits"], round(r["gb_per_s"]), round(r.get("graph_gb_per_s", 0))) for r in recs],
            flush=True,
        )
    for case in prefill_cases(args.quick):
        recs = bench_prefill(case, args.rounds)
        record["prefill"] += recs
        save()
        print(
            f"prefill {case}: eager/graph TFLOP/s: "
            + ", ".join(
                f"{r['impl']} {r.get('tflops', 0):.0f}/{r.get('graph_tflops', 0):.0f}" for r in recs
            ),
            flush=True,
        )
    record["copy_bytes_per_s"].append(copy_rate())
    save()
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s", flush=True)
    print(f"wrote {args.out} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()

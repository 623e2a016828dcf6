"""Lab 04 on the GPU: one decode step of attention (B = 64 sequences, context 4096, Hq = 32,
d = 128, fp16) with 32, 8 and 1 kv heads, read in place against read after repeating the kv
heads. The points that data/bench-paged-decode-h200.json already holds (SDPA's cuDNN and
FlashAttention-2 backends with `enable_gqa`, our decode kernel) are not measured again; this
adds, on the same shapes and in one process: the same two SDPA backends on K and V whose heads
were repeated to Hq beforehand (what a kernel that cannot share a kv head reads), the repeat
timed inside the step (what an attention that repeats on every call pays), and Lab 04's
`grouped_attention` (PyTorch operations, float32 compute). Writes data/gqa-decode-h200.json.

    PYTHONPATH=src python -m bench.gqa_decode --out data/gqa-decode-h200.json  # ~20 s

Rates are K/V bytes of the cache per second: `roofline.kv_cache_bytes(1, Hkv, d, context,
batch=B)`, the compulsory traffic of the step, for every implementation, so an implementation
that reads repeated heads is charged for the cache, not for what it read (`read_bytes` says
what that is). The shapes are bench.paged_decode's `Decode` cases of the "heads" group, timed by
its `timed` (bench.core.time_ms: eagerly and from a CUDA graph, two rounds in turns); each output
is checked against the float32 reference on two sequences first.
"""

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.core import environment
from bench.paged_decode import Decode, timed
from minimodel.attention_mqa_gqa import grouped_attention
from minimodel.reference import attention_ref
from minimodel.roofline import kv_cache_bytes

CASE = Decode("heads", 64, 4096)  # Lab 03 part 2's shape, at each of KV_HEADS
B, CTX, HQ, D = CASE.b, CASE.ctx, CASE.hq, CASE.d
KV_HEADS = (32, 8, 1)
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
ROUNDS = 2


def implementations(q, k, v, hkv):
    """name -> (function, backend or None, K/V bytes it reads at least, what it is)."""
    g = HQ // hkv
    cache = kv_cache_bytes(1, hkv, D, CTX, batch=B)
    full = kv_cache_bytes(1, HQ, D, CTX, batch=B)
    k_rep, v_rep = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    out = {}
    for name, backend in BACKENDS.items():
        out[f"sdpa_{name}_repeated"] = (
            lambda: F.scaled_dot_product_attention(q, k_rep, v_rep),
            backend,
            full,
            f"SDPA {name}, K/V repeated to Hq heads beforehand",
        )
    out["repeat_then_sdpa_cudnn"] = (
        lambda: F.scaled_dot_product_attention(
            q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        ),
        BACKENDS["cudnn"],
        cache + 2 * full,
        "repeat_interleave to Hq heads inside the step, then SDPA cuDNN",
    )
    out["grouped_attention"] = (
        lambda: grouped_attention(q, k, v),
        None,
        cache,
        "Lab 04's grouped_attention: PyTorch operations, float32 compute, kv heads in place",
    )
    return out


def bench(hkv: int) -> list[dict]:
    case = dataclasses.replace(CASE, hkv=hkv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, HQ, 1, D, device="cuda", generator=gen).half()
    k, v = (torch.randn(B, hkv, CTX, D, device="cuda", generator=gen).half() for _ in range(2))
    ref = attention_ref(q[:2], k[:2], v[:2])
    impls = implementations(q, k, v, hkv)
    nbytes = kv_cache_bytes(1, hkv, D, CTX, batch=B)
    recs = {}
    for name, (fn, backend, read, form) in impls.items():
        with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
            err = (fn()[:2].float() - ref).abs().max().item()
        recs[name] = {
            "b": B,
            "ctx": CTX,
            "hq": HQ,
            "hkv": case.hkv,
            "d": D,
            "dtype": case.dtype,
            "impl": name,
            "form": form,
            "max_err": err,
            "kv_bytes": nbytes,
            "read_bytes": read,
            "ms_runs": [],
            "graph_ms_runs": [],
        }
    timed(
        recs,
        {n: f for n, (f, *_) in impls.items()},
        ROUNDS,
        nbytes=nbytes,
        backends={n: b for n, (_, b, *_) in impls.items()},
    )
    for rec in recs.values():
        print(
            f"Hkv={hkv:2d} {rec['impl']:<24} {rec['ms']:.4f} ms eager, "
            f"{rec.get('graph_ms', float('nan')):.4f} ms graph, err {rec['max_err']:.1e}",
            flush=True,
        )
    return list(recs.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="a small subset (a GPU smoke run)")
    args = parser.parse_args()
    record = {
        "environment": environment(),
        "timing": "triton.testing.do_bench medians: ms of the eager call, graph_ms of the same "
        "call captured in a CUDA graph and replayed; two rounds in turns",
        "bytes": "kv_bytes: minimodel.roofline.kv_cache_bytes(1, Hkv, d, ctx, batch=B), the "
        "cache; read_bytes: the K/V bytes the implementation moves at least",
        "decode": [],
    }
    for hkv in KV_HEADS[:1] if args.smoke else KV_HEADS:
        record["decode"] += bench(hkv)
        torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

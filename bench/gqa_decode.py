"""Lab 04 on the GPU: one decode step of attention (B = 64 sequences, context 4096, Hq = 32,
d = 128, fp16) with 32, 8 and 1 kv heads, read in place against read after repeating the kv
heads. The points that data/bench-paged-decode-h200.json already holds (SDPA's cuDNN and
FlashAttention-2 backends with `enable_gqa`, our decode kernel) are not measured again; this
adds, on the same shapes and in one process: the same two SDPA backends on K and V whose heads
were repeated to Hq beforehand (what a kernel that cannot share a kv head reads), the repeat
timed inside the step (what an attention that repeats on every call pays), and Lab 04's
`grouped_attention` (PyTorch operations, float32 compute).

    PYTHONPATH=src python -m bench.gqa_decode --out data/gqa-decode-h200.json  # ~20 s

Rates are K/V bytes of the cache per second: `roofline.kv_cache_bytes(1, Hkv, d, context,
batch=B)`, the compulsory traffic of the step, for every implementation, so an implementation
that reads repeated heads is charged for the cache, not for what it read (`read_bytes` says
what that is). The shapes are bench.paged_decode's `Decode` cases of the "heads" group, timed by
its `timed` (bench.core.time_ms: eagerly and from a CUDA graph, two rounds in turns); each output
is checked against the float32 reference on two sequences first.
"""

import dataclasses

import torch
import torch.nn.functional as F

from bench.core import arguments, environment, randn, save, sdpa
from bench.paged_decode import Decode, timed
from minimodel.attention_mqa_gqa import grouped_attention
from minimodel.reference import attention_ref
from minimodel.roofline import kv_cache_bytes

CASE = Decode("heads", 64, 4096)  # Lab 03 part 2's shape, at each of KV_HEADS
B, CTX, HQ, D = CASE.b, CASE.ctx, CASE.hq, CASE.d
KV_HEADS = (32, 8, 1)


def implementations(q, k, v, hkv: int) -> dict:
    """name -> (function, SDPA backend or None, K/V bytes it reads at least, what it is)."""
    g = HQ // hkv
    cache, full = (kv_cache_bytes(1, h, D, CTX, batch=B) for h in (hkv, HQ))
    k_rep, v_rep = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    sdpa_call = F.scaled_dot_product_attention
    out = {
        f"{impl}_repeated": (lambda: sdpa_call(q, k_rep, v_rep), impl, full)
        + (f"SDPA {impl[5:]}, K/V repeated to Hq heads beforehand",)
        for impl in ("sdpa_cudnn", "sdpa_flash")
    }
    repeat = lambda: sdpa_call(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))
    what = "repeat_interleave to Hq heads inside the step, then SDPA cuDNN"
    out["repeat_then_sdpa_cudnn"] = (repeat, "sdpa_cudnn", cache + 2 * full, what)
    what = "Lab 04's grouped_attention: PyTorch operations, float32 compute, kv heads in place"
    out["grouped_attention"] = (lambda: grouped_attention(q, k, v), None, cache, what)
    return out


def bench(hkv: int) -> list[dict]:
    case = dataclasses.replace(CASE, hkv=hkv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = randn(B, HQ, 1, D, generator=gen)
    k, v = (randn(B, hkv, CTX, D, generator=gen) for _ in "kv")
    ref = attention_ref(q[:2], k[:2], v[:2])
    impls = implementations(q, k, v, hkv)
    nbytes = kv_cache_bytes(1, hkv, D, CTX, batch=B)
    recs = {}
    for name, (fn, impl, read, form) in impls.items():
        with sdpa(impl):
            err = (fn()[:2].float() - ref).abs().max().item()
        recs[name] = {"b": B, "ctx": CTX, "hq": HQ, "hkv": hkv, "d": D, "dtype": case.dtype}
        recs[name] |= {"impl": name, "form": form, "max_err": err, "kv_bytes": nbytes}
        recs[name] |= {"read_bytes": read, "ms_runs": [], "graph_ms_runs": []}
    fns, backends = (
        {n: f for n, (f, *_) in impls.items()},
        {n: i for n, (_, i, *_) in impls.items()},
    )
    timed(recs, fns, 2, nbytes=nbytes, impls=backends)
    for rec in recs.values():
        graph = rec.get("graph_ms", float("nan"))
        said = f"{rec['ms']:.4f} ms eager, {graph:.4f} ms graph, err {rec['max_err']:.1e}"
        print(f"Hkv={hkv:2d} {rec['impl']:<24} {said}", flush=True)
    return list(recs.values())


def main() -> None:
    args = arguments(__doc__, smoke="a small subset (a GPU smoke run)").parse_args()
    record = {
        "environment": environment(),
        "timing": "triton.testing.do_bench medians: ms of the eager call, graph_ms of the same "
        "call captured in a CUDA graph and replayed; two rounds in turns",
        "bytes": "kv_bytes: minimodel.roofline.kv_cache_bytes(1, Hkv, d, ctx, batch=B), the "
        "cache; read_bytes: the K/V bytes the implementation moves at least",
        "decode": [row for hkv in KV_HEADS[: 1 if args.smoke else None] for row in bench(hkv)],
    }
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

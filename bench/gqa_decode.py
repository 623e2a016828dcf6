"""Lab 04 on the GPU ("Decode on the GPU"): one decode step (B = 64, context 4096, Hq = 32,
d = 128, fp16) with 32, 8 and 1 kv heads, read in place against read after repeating the kv
heads: SDPA on heads repeated beforehand, the repeat inside the step, and Lab 04's
`grouped_attention`; timed eagerly and from a CUDA graph, two rounds in turns.

    PYTHONPATH=src python -m bench.gqa_decode --out data/gqa-decode-h200.json  # ~20 s
"""

import torch.nn.functional as F

from bench import core
from bench.core import arguments, environment, save
from bench.paged_decode import Decode
from minimodel.attention_mqa_gqa import grouped_attention
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
    q, k, v = core.qkv(B, HQ, hkv, CTX, D, nq=1)
    refs = core.reference(q[:, :, 0], k, v, (0, 1))
    nbytes = kv_cache_bytes(1, hkv, D, CTX, batch=B)
    shape = {"b": B, "ctx": CTX, "hq": HQ, "hkv": hkv, "d": D, "dtype": CASE.dtype}
    recs, fns, backends = {}, {}, {}
    for name, (fn, impl, read, form) in implementations(q, k, v, hkv).items():
        with core.sdpa(impl):
            err = core.max_error(fn(), refs)
        recs[name] = shape | {"impl": name, "form": form, "max_err": err, "kv_bytes": nbytes}
        recs[name] |= {"read_bytes": read, "ms_runs": [], "graph_ms_runs": []}
        fns[name], backends[name] = fn, impl
    core.in_turns(recs, fns, 2, eager=True, impls=backends)
    return [core.rates(rec, nbytes) for rec in recs.values()]


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

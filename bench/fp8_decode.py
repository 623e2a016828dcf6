"""The 8-bit KV cache on the GPU (Lab 03 part 2, "An FP8 cache"): one decode step at the issue's
shape (B = 64 sequences of 4,096 keys, 32 query heads on 8 kv heads, d = 128, q in float16),
through a block table of float8_e4m3fn pools with per-(token, kv head) float32 scales, through
the same table of float16 pools, and cuDNN's SDPA on the contiguous float16 cache; in one
process, on the same keys and values (the 8-bit pools are those keys and values quantised by
`quantize_kv`), every call replayed from a CUDA graph by the shared timer. Writes
data/fp8-decode-h200.json; figures/fp8_decode.py makes the page's table from it.

    PYTHONPATH=src python -m bench.fp8_decode --out data/fp8-decode-h200.json   # ~1 min

Bytes: the 8-bit cache is charged `roofline.scaled_kv_cache_bytes(1, Hkv, d, N, batch=B)`
(e4m3 values and float32 scales), the 16-bit ones `roofline.kv_cache_bytes(1, Hkv, d, N,
batch=B)`; the queries and outputs add under 0.1% and are not counted. Timing:
`bench.core.time_ms(graph=True)` (minimodel.timing.gpu_time_ms: do_bench_cudagraph medians),
`--rounds` rounds with the implementations in turns; the device copy rate (a 2 GiB copy, bytes
read + written, bench.paged_decode.copy_rate) at the start and at the end. Before timing, each
output is checked on two sequences: the 8-bit kernel against the float32 reference on the
values its cache stands for (dequantised), within twice PyTorch's float16 error on them, the
others against the float32 reference on the float16 keys and values; the errors of all three
against the float32 reference on the float32 keys and values drawn are recorded too.
"""

import statistics
import time
import warnings

import torch

from bench.core import arguments, environment, in_blocks, save, sdpa, time_ms
from bench.paged_decode import Decode, copy_rate, sdpa_fn
from minimodel import paged_attention
from minimodel.paged_attention import FP8_DTYPE, dequantize_kv, paged_decode, quantize_kv
from minimodel.reference import attention_ref
from minimodel.roofline import attention_flops, kv_cache_bytes, scaled_kv_cache_bytes

B, N, HQ, HKV, D, BLOCK_SIZE = 64, 4096, 32, 8, 128, 16
CHECKED = (0, B - 1)  # the sequences whose outputs are checked against the reference


def pools(x8: torch.Tensor, scale: torch.Tensor, lens: list[int]):
    """8-bit keys or values (B, Hkv, N, d) and their scales (B, Hkv, N) in a pool of blocks of
    BLOCK_SIZE at bench.paged_decode's random permutation: (pool, scales, table), the scales
    head-major inside a block as KernelPagedKVCache stores them."""
    pool, table = in_blocks(x8.view(torch.uint8), lens, BLOCK_SIZE)
    spool, _ = in_blocks(scale[..., None], lens, BLOCK_SIZE)  # the same permutation (same seed)
    head_major = spool[..., 0].transpose(1, 2).contiguous().transpose(1, 2)
    return pool.view(FP8_DTYPE), head_major, table


def errors(out: torch.Tensor, q, k, v) -> float:
    """Largest error of out (B, Hq, d) on the CHECKED sequences against the float32 reference on
    q, k, v (B, Hkv, N, d)."""
    worst = 0.0
    for r in CHECKED:
        ref = attention_ref(
            q[r : r + 1, :, None].float(), k[r : r + 1].float(), v[r : r + 1].float()
        )
        ref = ref[0, :, 0]
        worst = max(worst, (out[r].float() - ref).abs().max().item())
    return worst


def pytorch_error(q, k, v) -> float:
    """PyTorch's own float16 error (SDPA's math in q's dtype) against the float32 reference on
    the same inputs, on the CHECKED sequences: the budget the kernels are held to."""
    worst = 0.0
    for r in CHECKED:
        qq, kk, vv = q[r : r + 1, :, None], k[r : r + 1].half(), v[r : r + 1].half()
        kk, vv = kk.repeat_interleave(HQ // HKV, 1), vv.repeat_interleave(HQ // HKV, 1)
        same = torch.softmax((qq @ kk.transpose(-1, -2)) * D**-0.5, -1) @ vv
        ref = attention_ref(qq.float(), kk.float(), vv.float())
        worst = max(worst, (same.float() - ref).abs().max().item())
    return worst


def with_tile(block_n: int, fn):
    """fn run with the decode kernel's key tile set to block_n (4 warps, 3 stages), as
    bench.paged_decode's sweep sets it: the only departure from the shipped configuration."""

    def call():
        saved = paged_attention.decode_config
        paged_attention.decode_config = lambda *a: paged_attention.DecodeConfig(block_n, 4, 3)
        try:
            return fn()
        finally:
            paged_attention.decode_config = saved

    return call


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains its choices
    t0 = time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, HQ, D, device="cuda", generator=gen).half()
    k32, v32 = (torch.randn(B, HKV, N, D, device="cuda", generator=gen) for _ in range(2))
    k16, v16 = k32.half(), v32.half()
    lens = [N] * B
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    (k8, ks), (v8, vs) = quantize_kv(k32), quantize_kv(v32)
    k_pool8, k_scale, table = pools(k8, ks, lens)
    v_pool8, v_scale, _ = pools(v8, vs, lens)
    (k_pool16, _), (v_pool16, _) = (in_blocks(t, lens, BLOCK_SIZE) for t in (k16, v16))
    fast = {"max_context_len": N}
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    fp8_call = lambda: paged_decode(q, k_pool8, v_pool8, table, lens_t, **fast, **scales)
    fns = {"fp8_paged": fp8_call, "fp8_paged_block_n_64": with_tile(64, fp8_call)}
    fns["fp16_paged"] = lambda: paged_decode(q, k_pool16, v_pool16, table, lens_t, **fast)
    # SDPA on the contiguous cache, GQA through enable_gqa if cuDNN takes it (it did in
    # data/bench-paged-decode-h200.json), else on kv heads repeated beforehand: `form` says
    cudnn, sdpa_form = sdpa_fn("sdpa_cudnn", q[:, :, None], k16, v16, Decode("b64", B, N))
    fns["sdpa_cudnn"] = lambda: cudnn()[:, :, 0]
    fp8_bytes, fp16_bytes = (
        f(1, HKV, D, N, batch=B) for f in (scaled_kv_cache_bytes, kv_cache_bytes)
    )
    k_hat, v_hat = dequantize_kv(k8, ks), dequantize_kv(v8, vs)  # float32
    budget_fp8, budget_fp16 = pytorch_error(q, k_hat, v_hat), pytorch_error(q, k16, v16)
    forms = {  # what each implementation is, as its record says
        "fp8_paged": "block table (blocks of 16, random permutation), e4m3 pools, "
        "float32 scales per token and kv head, shipped tiles (16 KiB of K: 128 keys)",
        "fp8_paged_block_n_64": "the same, key tiles of 64 (4 warps, 3 stages), the tile "
        "that q's element size gave before",
        "fp16_paged": "the same block table, float16 pools",
        "sdpa_cudnn": f"SDPA, cuDNN backend, contiguous float16 cache, {sdpa_form}",
    }
    records = {}
    for name, fn in fns.items():
        with sdpa(name):
            out = fn()
        torch.cuda.synchronize()
        fp8 = name.startswith("fp8")
        own = errors(out, q, k_hat, v_hat) if fp8 else errors(out, q, k16, v16)
        budget = budget_fp8 if fp8 else budget_fp16
        if own > 2 * budget + 1e-6:
            raise SystemExit(
                f"{name}: error {own:.3e} against the reference on its own cache, "
                f"more than twice PyTorch's {budget:.3e}: not timed"
            )
        rec = {"impl": name, "kv_bytes": fp8_bytes if fp8 else fp16_bytes, "form": forms[name]}
        rec |= {"max_err_own_cache": own, "pytorch_err_own_cache": budget}
        rec["max_err_vs_float32_drawn"] = errors(out, q, k32, v32)
        records[name] = rec | {"graph_ms_runs": []}
        del out
    record = {
        "environment": environment(),
        "shape": {"b": B, "ctx": N, "hq": HQ, "hkv": HKV, "d": D}
        | {"block_size": BLOCK_SIZE, "q_dtype": "float16"},
        "flops": attention_flops(B, HQ, 1, N, D, causal=True),
        "timing": "bench.core.time_ms(graph=True): minimodel.timing.gpu_time_ms, the median of "
        "do_bench_cudagraph replays; rounds in turns (graph_ms_runs), graph_ms their "
        "median",
        "bytes": "kv_bytes: fp8 rows roofline.scaled_kv_cache_bytes(1, Hkv, d, ctx, batch=B) "
        "(e4m3 values and float32 scales), the others roofline.kv_cache_bytes(1, Hkv, "
        "d, ctx, batch=B)",
        "copy_bytes_per_s": [copy_rate()],
        "records": [],
    }
    print(f"copy {record['copy_bytes_per_s'][0] / 1e9:.0f} GB/s", flush=True)
    for i in range(args.rounds):
        for name, fn in fns.items():
            records[name]["graph_ms_runs"].append(time_ms(fn, name, graph=True))
        said = ", ".join(f"{n} {r['graph_ms_runs'][-1] * 1e3:.1f} us" for n, r in records.items())
        print(f"round {i + 1}/{args.rounds}: {said}", flush=True)
    record["copy_bytes_per_s"].append(copy_rate())
    for rec in records.values():
        rec["graph_ms"] = statistics.median(rec["graph_ms_runs"])
        rec["graph_gb_per_s"] = rec["kv_bytes"] / rec["graph_ms"] / 1e6
    record["records"] = list(records.values())
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s ({time.time() - t0:.0f} s)")
    save(args.out, record)


if __name__ == "__main__":
    main()

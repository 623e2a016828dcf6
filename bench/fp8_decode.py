"""The 8-bit KV cache on the GPU (Lab 03 part 2, "The measurement"): one decode step at B = 64,
4,096 keys, 32 query heads on 8 kv heads, d = 128, through float8_e4m3fn pools with float32
scales (as shipped: the Hopper kernel on a Hopper GPU; and on the Triton kernel, with
paged_attention.HOPPER_FP8 off), through float16 pools, and cuDNN's SDPA on the contiguous
float16 cache; CUDA-graph replays in turns. figures/fp8_decode.py makes the page's tables from
the file.

    PYTHONPATH=src python -m bench.fp8_decode --out data/fp8-decode-h200.json   # ~1 min

Earlier runs, before the Hopper kernel shipped, of the calls then shipped (the Triton kernel as
`fp8_paged`, and `fp8_paged_before` with the tile it shipped with before the warp rule):
data/fp8-decode-triton-h200.json (e30d5cb), data/fp8-decode-128key-h200.json (3ad442e) and
data/fp8-decode-perkey-h200.json (3b7a0fe, the kernel before it read one table entry per block).
"""

import time
import warnings
from types import SimpleNamespace
from unittest import mock

import torch

from bench import core
from bench.core import arguments, environment, in_blocks, randn, save
from minimodel import paged_attention, paged_attention_hopper
from minimodel.paged_attention import FP8_DTYPE, dequantize_kv, paged_decode, quantize_kv
from minimodel.roofline import attention_flops, kv_cache_bytes, scaled_kv_cache_bytes

B, N, HQ, HKV, D, BLOCK_SIZE = 64, 4096, 32, 8, 128, 16
CHECKED = (0, B - 1)  # the sequences whose outputs are checked against the reference


def pools(x8: torch.Tensor, scale: torch.Tensor, lens: list[int]):
    """8-bit keys or values (B, Hkv, N, d) and their scales (B, Hkv, N) in blocks at in_blocks's
    permutation: (pool, scales head-major in a block as KernelPagedKVCache stores them, table)."""
    pool, table = in_blocks(x8.view(torch.uint8), lens, BLOCK_SIZE)
    spool, _ = in_blocks(scale[..., None], lens, BLOCK_SIZE)  # the same permutation (same seed)
    head_major = spool[..., 0].transpose(1, 2).contiguous().transpose(1, 2)
    return pool.view(FP8_DTYPE), head_major, table


def cache() -> SimpleNamespace:
    """The step's inputs: q (float16), the keys and values drawn in float32, their float16 and
    8-bit pools (the same block table) and the 8-bit ones dequantised."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = randn(B, HQ, D, generator=gen)
    k32, v32 = (torch.randn(B, HKV, N, D, device="cuda", generator=gen) for _ in range(2))
    k16, v16 = k32.half(), v32.half()
    lens = [N] * B
    (k8, ks), (v8, vs) = quantize_kv(k32), quantize_kv(v32)
    k_pool8, k_scale, table = pools(k8, ks, lens)
    v_pool8, v_scale, _ = pools(v8, vs, lens)
    k_pool16, v_pool16, _, lens_t = core.paged_cache(k16, v16, lens, BLOCK_SIZE)
    k_hat, v_hat = dequantize_kv(k8, ks), dequantize_kv(v8, vs)  # float32
    return SimpleNamespace(**locals())


def main() -> None:
    args = arguments(__doc__, rounds=3).parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains its choices
    t0 = time.time()
    c = cache()
    fast = {"max_context_len": N}
    scales = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    fp8_call = lambda: paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, **fast, **scales)
    hopper = paged_attention_hopper.fits(c.q, c.k_pool8, c.v_pool8, c.k_scale, c.v_scale)
    fns = {
        "fp8_paged": fp8_call,
        "fp8_triton": mock.patch.object(paged_attention, "HOPPER_FP8", False)(fp8_call),
        "fp16_paged": lambda: paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t, **fast),
    }
    fns["sdpa_cudnn"] = lambda: core.sdpa_cudnn(c.q[:, :, None], c.k16, c.v16)[:, :, 0]
    fp8_bytes, fp16_bytes = (
        f(1, HKV, D, N, batch=B) for f in (scaled_kv_cache_bytes, kv_cache_bytes)
    )
    own = {  # the reference on the cache each reads, and PyTorch's float16 error on it
        True: (core.reference(c.q, c.k_hat, c.v_hat, CHECKED), c.k_hat, c.v_hat),
        False: (core.reference(c.q, c.k16, c.v16, CHECKED), c.k16, c.v16),
    }
    budgets = {fp8: core.pytorch_error(c.q, k, v, CHECKED) for fp8, (_, k, v) in own.items()}
    drawn = core.reference(c.q, c.k32, c.v32, CHECKED)
    forms = {  # what each implementation is, as its record says
        "fp8_paged": "block table (blocks of 16, random permutation), e4m3 pools, "
        "float32 scales per token and kv head (head-major in a block), as shipped: "
        + ("the Hopper kernel (paged_attention_hopper)" if hopper else "the Triton kernel"),
        "fp8_triton": "the same on the Triton kernel (HOPPER_FP8 off; 4 KiB K tiles: 32 keys, "
        "one warp, 2 stages)",
        "fp16_paged": "the same block table, float16 pools",
        "sdpa_cudnn": "SDPA, cuDNN backend, contiguous float16 cache, enable_gqa",
    }
    records = {}
    for name, fn in fns.items():
        fp8 = name.startswith("fp8")
        err = core.checked(name, fn, own[fp8][0], budgets[fp8], " on its own cache")
        rec = {"impl": name, "kv_bytes": fp8_bytes if fp8 else fp16_bytes, "form": forms[name]}
        rec |= {"max_err_own_cache": err, "pytorch_err_own_cache": budgets[fp8]}
        rec["max_err_vs_float32_drawn"] = core.max_error(fn(), drawn)
        records[name] = rec | {"graph_ms_runs": []}
    record = {
        "environment": environment(),
        "shape": {"b": B, "ctx": N, "hq": HQ, "hkv": HKV, "d": D}
        | {"block_size": BLOCK_SIZE, "q_dtype": "float16"},
        "flops": attention_flops(B, HQ, 1, N, D, causal=True),
        "timing": core.GRAPH_TIMING,
        "bytes": "kv_bytes: fp8 rows roofline.scaled_kv_cache_bytes(1, Hkv, d, ctx, batch=B) "
        "(e4m3 values and float32 scales), the others roofline.kv_cache_bytes(1, Hkv, "
        "d, ctx, batch=B)",
        "copy_bytes_per_s": [core.copy_rate()],
    }
    print(f"copy {record['copy_bytes_per_s'][0] / 1e9:.0f} GB/s", flush=True)
    core.in_turns(records, fns, args.rounds, must_capture=True)
    record["copy_bytes_per_s"].append(core.copy_rate())
    record["records"] = [core.rates(rec, rec["kv_bytes"]) for rec in records.values()]
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s ({time.time() - t0:.0f} s)")
    save(args.out, record)


if __name__ == "__main__":
    main()

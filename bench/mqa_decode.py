"""MQA decode with the group cut into chunks (issue 23; Lab 03 part 2, "The decode kernel"): our
Triton decode kernel at DECODE_MAX_GROUP_ROWS (G_max) = 16, 32 and 64 (64: no chunks), through a
block table (paged_attention.HOPPER_16 off) and (minimodel.attention) on the contiguous cache;
`paged_decode` as shipped, which sends these groups to the 16-bit Hopper kernel on an H100/H200
("Large groups on Hopper": paged_bs16_hopper16); beside SDPA's cuDNN backend, at B = 64, 4,096
keys, 32 query heads and B = 256, 2,048 keys, 64 query heads (one kv head, d = 128, fp16). Each
record of ours says the kernel, tile, chunks and splits its launch used; `vs_cudnn` is cuDNN's
time over its own.

    PYTHONPATH=src:. MINIMODEL_COMMIT=<hash> python -m bench.mqa_decode \
        --out $OUT/mqa-decode-hopper16-h200.json      # about a minute on the H200

data/mqa-decode-perkey-h200.json holds the same calls on the kernel before it read one table
entry per block (tree 2a9cf7e); data/mqa-decode-h200.json (e30d5cb) the Triton forms only, before
the 16-bit Hopper kernel (its paged_bs16_gmax* records are the Triton kernel, as here).
"""

import statistics
import time
import warnings
from unittest import mock

import torch
import triton

from bench import core
from bench.core import arguments, environment, save
from minimodel import kernels, paged_attention, paged_attention_hopper
from minimodel.attention import attention
from minimodel.paged_attention import paged_decode
from minimodel.roofline import kv_cache_bytes

DEVICE = "cuda"
HKV, D, BLOCK_SIZE = 1, 128, 16
SHAPES = [(64, 4096, 32), (256, 2048, 64)]  # (B, keys, Hq)
MAX_GROUP_ROWS = (16, 32, 64)


def max_group_rows(g_max: int):
    """paged_attention.DECODE_MAX_GROUP_ROWS set to g_max (inside a block, or around a
    function's every call: a capture then launches with it and its replays run that launch)."""
    return mock.patch.object(paged_attention, "DECODE_MAX_GROUP_ROWS", g_max)


def triton_kernel(g_max: int):
    """paged_decode on the Triton kernel (HOPPER_16 off) at G_max = g_max, as max_group_rows."""

    def wrap(fn):
        return mock.patch.object(paged_attention, "HOPPER_16", False)(max_group_rows(g_max)(fn))

    return wrap


def hopper16_launch(b: int, n: int, hq: int) -> dict:
    """The tile, chunks, splits and programs the 16-bit Hopper kernel's launch takes."""
    ph = paged_attention_hopper
    chunks = ph.chunks16(hq // HKV)
    splits = ph.splits16(b, HKV, hq // HKV, n, kernels.num_sms(torch.device(DEVICE)))
    return {
        "kernel": "hopper16",
        "block_g": ph.BLOCK_G16,
        "chunks": chunks,
        "splits": splits,
        "block_n": ph.ITERATION16,
        "num_warps": ph.BLOCK_G16 // 16,
        "programs": b * HKV * chunks * splits,
    }


def launch_shape(b: int, n: int, hq: int, g_max: int) -> dict:
    """The tile, chunks, splits and programs `_launch_decode` picks for this shape at g_max."""
    with max_group_rows(g_max):
        block_g, chunks = paged_attention.group_rows(hq // HKV)
    cfg = paged_attention.decode_config(triton.next_power_of_2(D), 2, block_g)
    sms = kernels.num_sms(torch.device(DEVICE))
    splits = paged_attention.choose_num_splits(b, HKV, n, cfg.block_n, sms, chunks)
    launch = {
        "kernel": "triton",
        "g_max": g_max,
        "block_g": block_g,
        "chunks": chunks,
        "splits": splits,
    }
    return launch | {
        "block_n": cfg.block_n,
        "num_warps": cfg.num_warps,
        "programs": b * HKV * chunks * splits,
    }


def bench_shape(b: int, n: int, hq: int, rounds: int) -> list[dict]:
    q, k, v = core.qkv(b, hq, HKV, n, D)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [n] * b, BLOCK_SIZE)
    shape = {"b": b, "ctx": n, "hq": hq, "hkv": HKV, "d": D, "dtype": "float16"}
    nbytes = kv_cache_bytes(1, HKV, D, n, batch=b)
    fns, recs, q4 = {}, {}, q[:, :, None]
    for g_max in MAX_GROUP_ROWS:  # fresh functions each time: each gets its own patch
        forms = {
            "paged_bs16": (
                lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=n),
                f"block table, blocks of {BLOCK_SIZE}, random order",
            ),
            "contiguous": (
                lambda: attention(q4, k, v, causal=True)[:, :, 0],
                "minimodel.attention, contiguous cache",
            ),
        }
        for impl, (fn, form) in forms.items():
            name = f"{impl}_gmax{g_max}"
            fns[name] = triton_kernel(g_max)(fn)
            recs[name] = {**shape, "impl": name, **launch_shape(b, n, hq, g_max)}
            recs[name]["form"] = f"{form}; DECODE_MAX_GROUP_ROWS = {g_max}"
    fns["paged_bs16_hopper16"] = lambda: paged_decode(
        q, k_pool, v_pool, table, lens_t, max_context_len=n
    )
    recs["paged_bs16_hopper16"] = {
        **shape,
        "impl": "paged_bs16_hopper16",
        **hopper16_launch(b, n, hq),
        "form": f"paged_decode as shipped: the 16-bit Hopper kernel, blocks of {BLOCK_SIZE}, "
        "random order",
    }
    fns["sdpa_cudnn"] = lambda: core.sdpa_cudnn(q4, k, v)[:, :, 0]
    form = "SDPA, cuDNN backend, contiguous cache, enable_gqa"
    recs["sdpa_cudnn"] = {**shape, "impl": "sdpa_cudnn", "form": form}
    rows = (0, b - 1)
    refs, budget = core.reference(q, k, v, rows), core.pytorch_error(q, k, v, rows)
    for name, fn in fns.items():
        err = core.checked(name, fn, refs, budget, f" at {shape}")
        recs[name] |= {"kv_bytes": nbytes, "max_err": err, "pytorch_err": budget}
    print(f"B={b} N={n} Hq={hq}", flush=True)
    core.in_turns(recs, fns, rounds, must_capture=True)
    cudnn_ms = recs["sdpa_cudnn"]["graph_ms"]
    for rec in recs.values():
        core.rates(rec, nbytes)["vs_cudnn"] = cudnn_ms / rec["graph_ms"]  # > 1: faster than cuDNN
    return list(recs.values())


def main() -> None:
    args = arguments(__doc__, rounds=3).parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains its choices
    t0 = time.time()
    shapes = [dict(zip(("b", "ctx", "hq"), s, strict=True)) | {"hkv": HKV, "d": D} for s in SHAPES]
    record = {"environment": environment(), "shapes": shapes, "block_size": BLOCK_SIZE}
    record |= {"timing": core.GRAPH_TIMING, "copy_bytes_per_s": [core.copy_rate()]}
    record["bytes"] = "kv_bytes: roofline.kv_cache_bytes(1, Hkv, d, ctx, batch=B), the cache"
    record["records"] = [rec for b, n, hq in SHAPES for rec in bench_shape(b, n, hq, args.rounds)]
    record["copy_bytes_per_s"].append(core.copy_rate())
    copy = statistics.mean(record["copy_bytes_per_s"])
    for rec in record["records"]:
        rec["of_copy"] = rec["graph_gb_per_s"] * 1e9 / copy
    save(args.out, record)
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()

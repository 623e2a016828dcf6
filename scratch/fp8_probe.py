"""Issue 27 study, the GPU half: times the decode kernel's variants that scratch/fp8_sass.py
compiles offline, at the issue's shape (B = 64, 4,096 keys, GQA 32/8, d = 128, blocks of 16,
bench.fp8_decode's inputs), CUDA-graph replays in turns, each output checked against the shipped
8-bit kernel's and the float32 reference first.

    PYTHONPATH=src:. python scratch/fp8_probe.py --out $OUT/fp8-probe-h200.json   # ~1-2 min
    ncu --section LaunchStats --section Occupancy --section SchedulerStats \
        --section WarpStateStats -k regex:_paged_decode_fwd \
        python scratch/fp8_probe.py --once        # one launch per variant, in the printed order

Variants (patched copies of minimodel.paged_attention, see fp8_sass.py for the patches):
  fp8 / fp16                   the shipped kernel on 8-bit / 16-bit pools
  fp8_vT_pool                  the shipped kernel on a slot-major V pool (strides only)
  fp8_blockmask                K/V loads masked per block (exact here: every tile is full)
  fp8_prefetch                 table entries loaded one tile ahead: K/V double-buffered
  fp8_vT_blockmask[_prefetch]  slot-major V + block masks (+ prefetch), 128-key tiles
  fp8_vT_n64_blockmask_prefetch  the same with 64-key tiles
  fp16_prefetch                the 16-bit kernel with the prefetch
  fp8_n{N}_w{W}_s{S}[...]       the tile sweep (BLOCK_N, warps, stages), with or without masks
  fp8_headmajor[_blockmask], fp16_headmajor   pools stored (block, head, slot, d) (strides only)
  fp8_loadsfirst[_blockmask], fp16_loadsfirst  V and the scales loaded at the top of the loop

Measured at 668c07e (data/fp8-probe-h200.json): block masks 268.5 us against the shipped 300.7
(16-bit 277.8); slot-major V 364.5 alone, 274.7 with block masks; no tile, warp or stage count
faster. Instruction counts (scratch/fp8_sass.txt) do not order these times: fp8_vT_blockmask
issues 29% fewer instructions per tile than fp8_blockmask and is not faster. Not yet run: the
head-major pools (a kv head's block one 2 KiB run instead of 128-byte rows 1 KiB apart) and the
loads-first order (the hypothesis: with 2 programs per SM, the per-key scale loads and the V
load, issued after each product, leave their latency exposed, where the 16-bit kernel's 5
programs per SM hide it).
"""

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_sass import BLOCK_MASK, LOADS_FIRST, PREFETCH, patched_module  # noqa: E402

from bench import core  # noqa: E402
from bench.fp8_decode import CHECKED, HKV, B, D, N, cache  # noqa: E402
from minimodel import paged_attention as pa  # noqa: E402
from minimodel.roofline import kv_cache_bytes, scaled_kv_cache_bytes  # noqa: E402

# name: (patches, fp8 pools, V slot-major, DecodeConfig or None)
VARIANTS = {
    "fp8": (None, True, False, None),
    "fp16": (None, False, False, None),
    "fp8_vT_pool": (None, True, True, None),
    "fp8_blockmask": (BLOCK_MASK, True, False, None),
    "fp8_prefetch": (PREFETCH, True, False, None),
    "fp8_vT_blockmask": (BLOCK_MASK, True, True, None),
    "fp8_vT_blockmask_prefetch": (BLOCK_MASK + PREFETCH, True, True, None),
    "fp8_vT_n64_blockmask_prefetch": (BLOCK_MASK + PREFETCH, True, True,
                                      pa.DecodeConfig(64, 4, 3)),
    "fp16_prefetch": (PREFETCH, False, False, None),
}
# pools stored head-major (block, head, slot, d): a kv head's block one contiguous run (2 KiB of
# 8-bit K at d = 128) instead of 128-byte rows 1 KiB apart (the token-major layout's stride)
HEAD_MAJOR = {"fp8_headmajor": (None, True), "fp8_headmajor_blockmask": (BLOCK_MASK, True),
              "fp16_headmajor": (None, False)}
# every load of a tile (K, V, their scales) issued before the first product waits on one
VARIANTS |= {"fp8_loadsfirst": (LOADS_FIRST, True, False, None),
             "fp8_loadsfirst_blockmask": (LOADS_FIRST + BLOCK_MASK, True, False, None),
             "fp16_loadsfirst": (LOADS_FIRST, False, False, None)}
# the tile sweep: (BLOCK_N, num_warps, num_stages) with and without per-block masks
for _n, _w, _s in ((32, 4, 3), (64, 4, 3), (64, 8, 3), (128, 8, 3), (128, 4, 1), (256, 8, 3)):
    VARIANTS[f"fp8_n{_n}_w{_w}_s{_s}"] = (None, True, False, pa.DecodeConfig(_n, _w, _s))
    VARIANTS[f"fp8_blockmask_n{_n}_w{_w}_s{_s}"] = (BLOCK_MASK, True, False,
                                                   pa.DecodeConfig(_n, _w, _s))
for _n, _w in ((64, 8), (128, 8)):
    VARIANTS[f"fp16_n{_n}_w{_w}_s3"] = (None, False, False, pa.DecodeConfig(_n, _w, 3))


def slot_major(pool: torch.Tensor) -> torch.Tensor:
    """The same pool stored (block, head, d, slot), returned as its (block, slot, head, d) view."""
    u8 = pool.view(torch.uint8) if pool.element_size() == 1 else pool
    stored = u8.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    return stored.view(pool.dtype) if pool.element_size() == 1 else stored


def head_major(pool: torch.Tensor) -> torch.Tensor:
    """The same pool stored (block, head, slot, d), returned as its (block, slot, head, d) view."""
    u8 = pool.view(torch.uint8) if pool.element_size() == 1 else pool
    stored = u8.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    return stored.view(pool.dtype) if pool.element_size() == 1 else stored


def make_fn(name, c):
    if name in HEAD_MAJOR:
        patches, fp8 = HEAD_MAJOR[name]
        module = pa if patches is None else patched_module(name, patches)
        pools = (c.k_pool8, c.v_pool8) if fp8 else (c.k_pool16, c.v_pool16)
        args = (c.q, *(head_major(p) for p in pools), c.table, c.lens_t)
        kw = {"k_scale": c.k_scale, "v_scale": c.v_scale} if fp8 else {}
        return lambda: module.paged_decode(*args, max_context_len=N, **kw)
    patches, fp8, vt, cfg = VARIANTS[name]
    module = pa if patches is None else patched_module(name, patches)
    if fp8:
        args = (c.q, c.k_pool8, slot_major(c.v_pool8) if vt else c.v_pool8, c.table, c.lens_t)
        kw = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    else:
        args = (c.q, c.k_pool16, slot_major(c.v_pool16) if vt else c.v_pool16, c.table, c.lens_t)
        kw = {}

    def fn():
        with mock.patch.object(module, "decode_config", (lambda *a: cfg) if cfg else
                               module.decode_config):
            return module.paged_decode(*args, max_context_len=N, **kw)
    return fn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--once", action="store_true", help="one call each (for ncu)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", nargs="*", default=list(VARIANTS) + list(HEAD_MAJOR))
    a = parser.parse_args()
    t0 = time.time()
    c = cache()
    fns = {name: make_fn(name, c) for name in a.variant}
    if a.once:
        for name, fn in fns.items():
            print(name, flush=True)
            fn()
        torch.cuda.synchronize()
        return
    base = {True: fns["fp8"]() if "fp8" in fns else None}
    refs = {True: core.reference(c.q, c.k_hat, c.v_hat, CHECKED),
            False: core.reference(c.q, c.k16, c.v16, CHECKED)}
    budgets = {True: core.pytorch_error(c.q, c.k_hat, c.v_hat, CHECKED),
               False: core.pytorch_error(c.q, c.k16, c.v16, CHECKED)}
    records = {}
    for name, fn in list(fns.items()):
        fp8 = HEAD_MAJOR[name][1] if name in HEAD_MAJOR else VARIANTS[name][1]
        try:
            out = fn()
        except Exception as e:  # a tile that does not compile (shared memory): dropped
            print(name, "failed:", type(e).__name__, str(e)[:200], flush=True)
            del fns[name]
            continue
        rec = {"impl": name, "kv_bytes": (scaled_kv_cache_bytes if fp8 else kv_cache_bytes)(
            1, HKV, D, N, batch=B), "max_err_own_cache": core.max_error(out, refs[fp8])}
        if fp8 and base[True] is not None:
            rec["max_diff_vs_shipped_fp8"] = (out.float() - base[True].float()).abs().max().item()
        if not rec["max_err_own_cache"] <= 2 * budgets[fp8] + 1e-6:  # as core.checked
            rec["warning"] = f"error more than twice PyTorch's {budgets[fp8]:.3e}"
        print(name, rec, flush=True)
        records[name] = rec
    record = {"environment": core.environment(), "timing": core.GRAPH_TIMING,
              "copy_bytes_per_s": [core.copy_rate()]}
    core.in_turns(records, fns, a.rounds, must_capture=True)
    record["copy_bytes_per_s"].append(core.copy_rate())
    copy = sum(record["copy_bytes_per_s"]) / 2
    record["records"] = [core.rates(r, r["kv_bytes"]) for r in records.values()]
    for r in record["records"]:
        r["of_copy_rate"] = r["graph_gb_per_s"] * 1e9 / copy
        print(f"{r['impl']:32s} {r['graph_ms'] * 1e3:7.1f} us  {r['of_copy_rate']:.0%} of copy",
              flush=True)
    print(f"({time.time() - t0:.0f} s)")
    if a.out:
        core.save(a.out, record)


if __name__ == "__main__":
    main()

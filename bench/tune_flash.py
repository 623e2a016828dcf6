"""Sweep the tile configurations of the Flash kernel on this GPU (not the autotuner: every config
is timed on every shape, so the data shows the whole landscape). Used to choose FLASH_CONFIGS in
docs/lab/02-flash-triton.md.

    python -m bench.tune_flash --out data/flash-config-sweep-h200.json

Compilation is done first by parallel worker processes (it dominates otherwise); timing is then
done by one process, alone on the GPU.
"""

import argparse
import functools
import itertools
import json
import multiprocessing as mp
from pathlib import Path

import torch
import triton

from bench.core import environment, time_ms
from minimodel import attention_flash as af
from minimodel.reference import attention_ref
from minimodel.roofline import attention_flops

CANDIDATES = [
    (bm, bn, w, s)
    for bm, bn, w, s in itertools.product([64, 128], [32, 64, 128], [4, 8], [2, 3, 4, 5])
    if not (bm == 64 and w == 8) and not (bn == 32 and w == 8)
]


def shapes(dtype):
    for d, causal, n in itertools.product([64, 128], [False, True], [2048, 8192]):
        yield {"d": d, "causal": causal, "n": n, "b": 16384 // n, "h": 2048 // d, "dtype": dtype}


def inputs(shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, shape["dtype"])
    return [
        torch.randn(
            shape["b"], shape["h"], shape["n"], shape["d"], device="cuda", generator=g, dtype=dt
        )
        for _ in range(3)
    ]


def launch(cfg, shape, q, k, v):
    bm, bn, w, s = cfg
    hd = shape["d"]
    o = torch.empty_like(q)
    lse = torch.empty(shape["b"], shape["h"], shape["n"], device="cuda")
    descs = [af._descriptor(t, hd) for t in (q, k, v, o)]
    for desc, rows in zip(descs, (bm, bn, bn, bm), strict=True):
        desc.block_shape = [1, 1, rows, hd]
    grid = (triton.cdiv(shape["n"], bm), shape["b"] * shape["h"])
    af._attn_fwd[grid](
        *descs,
        lse,
        hd**-0.5 * af.LOG2E,
        shape["n"],
        shape["n"],
        shape["h"],
        1,
        0,
        lse.stride(0),
        lse.stride(1),
        0,
        0,
        BLOCK_M=bm,
        BLOCK_N=bn,
        HEAD_DIM=hd,
        CAUSAL=shape["causal"],
        WINDOWED=False,
        DOT_PRECISION="tf32",
        num_warps=w,
        num_stages=s,
    )
    return o


def fits(cfg, shape):
    bm, bn, w, s = cfg
    return af.smem_bytes(bm, bn, s, shape["d"], 2) <= af.SMEM_BUDGET


def compile_worker(jobs):
    out = []
    for cfg, shape in jobs:
        small = dict(shape, b=1, h=1, n=256)
        try:
            launch(cfg, small, *inputs(small))
            torch.cuda.synchronize()
            out.append(None)
        except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
            out.append(f"{type(e).__name__}: {str(e)[:200]}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--smoke", action="store_true", help="a small subset (a GPU smoke run)")
    args = parser.parse_args()

    grid = shapes(args.dtype)[:1] if args.smoke else shapes(args.dtype)
    combos = {(s["d"], s["causal"]): s for s in grid}
    jobs = [(c, s) for s in combos.values() for c in CANDIDATES if fits(c, s)]
    chunks = [jobs[i :: args.workers] for i in range(args.workers)]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(compile_worker, chunks)
    failed = {}
    for chunk, res in zip(chunks, results, strict=True):
        for (cfg, s), err in zip(chunk, res, strict=True):
            if err:
                failed[(cfg, s["d"], s["causal"])] = err
    print(f"compiled {len(jobs)} kernels, {len(failed)} failed", flush=True)

    records = []
    for shape in grid:
        q, k, v = inputs(shape)
        ref = attention_ref(q, k, v, causal=shape["causal"])
        flops = attention_flops(
            shape["b"], shape["h"], shape["n"], shape["n"], shape["d"], causal=shape["causal"]
        )
        base = {}
        for name, backend in [
            ("sdpa_flash", torch.nn.attention.SDPBackend.FLASH_ATTENTION),
            ("sdpa_cudnn", torch.nn.attention.SDPBackend.CUDNN_ATTENTION),
        ]:
            fn = functools.partial(
                torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=shape["causal"]
            )
            ms = time_ms(fn, backend)
            base[name] = flops / ms / 1e9
            records.append({**shape, "impl": name, "ms": ms, "tflops": flops / ms / 1e9})
        best = None
        for cfg in CANDIDATES:
            if not fits(cfg, shape) or (cfg, shape["d"], shape["causal"]) in failed:
                continue
            out = launch(cfg, shape, q, k, v)
            err = (out.float() - ref).abs().max().item()
            ms = time_ms(functools.partial(launch, cfg, shape, q, k, v))
            tf = flops / ms / 1e9
            records.append(
                {
                    **shape,
                    "impl": "minimodel",
                    "config": list(cfg),
                    "ms": ms,
                    "tflops": tf,
                    "max_err": err,
                }
            )
            if best is None or tf > best[1]:
                best = (cfg, tf, err)
        print(
            f"d={shape['d']} causal={shape['causal']!s:5} N={shape['n']:5}: best {best[0]} "
            f"{best[1]:.0f} TFLOP/s (err {best[2]:.1e}); FA2 {base['sdpa_flash']:.0f}, "
            f"cuDNN {base['sdpa_cudnn']:.0f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "environment": environment(),
                "failed": [
                    {"config": list(k[0]), "d": k[1], "causal": k[2], "error": v}
                    for k, v in failed.items()
                ],
                "records": records,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()

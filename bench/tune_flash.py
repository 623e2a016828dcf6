"""Every tile configuration of Lab 02's Flash kernel timed on every shape of FlashAttention-2's
grid at N = 2048 and 8192, beside SDPA's FlashAttention-2 and cuDNN: the sweep FLASH_CONFIGS was
chosen from (Lab 02, "The forward kernel").

    python -m bench.tune_flash --out data/flash-config-sweep-h200.json
"""

import functools
import itertools
import multiprocessing as mp

import torch
import torch.nn.functional as F
import triton

from bench.core import arguments, environment, rates, save, time_ms
from minimodel import attention_flash as af
from minimodel.reference import attention_ref
from minimodel.roofline import attention_flops

CANDIDATES = [
    (bm, bn, w, s)
    for bm, bn, w, s in itertools.product([64, 128], [32, 64, 128], [4, 8], [2, 3, 4, 5])
    if not (bm == 64 and w == 8) and not (bn == 32 and w == 8)
]
WORKERS = 12  # compiling processes
SHAPES = [  # FlashAttention-2's grid at N = 2048 and 8192: B = 16384 / N, H = 2048 / d
    {"d": d, "causal": causal, "n": n, "b": 16384 // n, "h": 2048 // d, "dtype": "float16"}
    for d, causal, n in itertools.product([64, 128], [False, True], [2048, 8192])
]


def inputs(shape: dict, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    size = (shape["b"], shape["h"], shape["n"], shape["d"])
    return [torch.randn(*size, device="cuda", generator=g, dtype=torch.float16) for _ in "qkv"]


def launch(cfg: tuple, shape: dict, q, k, v):
    """Lab 02's kernel at one tile configuration, its autotuner bypassed."""
    bm, bn, w, s = cfg
    hd, o = shape["d"], torch.empty_like(q)
    lse = torch.empty(shape["b"], shape["h"], shape["n"], device="cuda")
    descs = [af._descriptor(t, hd) for t in (q, k, v, o)]
    for desc, rows in zip(descs, (bm, bn, bn, bm), strict=True):
        desc.block_shape = [1, 1, rows, hd]
    grid = (triton.cdiv(shape["n"], bm), shape["b"] * shape["h"])
    ints = (shape["n"], shape["n"], shape["h"], 1, 0, lse.stride(0), lse.stride(1), 0, 0)
    tiles = {"BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": hd, "num_warps": w, "num_stages": s}
    mask = {"CAUSAL": shape["causal"], "WINDOWED": False, "DOT_PRECISION": "tf32"}
    af._attn_fwd[grid](*descs, lse, hd**-0.5 * af.LOG2E, *ints, **tiles, **mask)
    return o


def fits(cfg: tuple, shape: dict) -> bool:
    bm, bn, _, s = cfg
    return af.smem_bytes(bm, bn, s, shape["d"], 2) <= af.SMEM_BUDGET


def compile_one(cfg: tuple, shape: dict) -> str | None:
    """Compile a configuration on a small problem of a shape's kind; its error, if it fails."""
    small = dict(shape, b=1, h=1, n=256)
    try:
        launch(cfg, small, *inputs(small))
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def main():
    args = arguments(__doc__, smoke="a small subset (a GPU smoke run)").parse_args()
    grid = SHAPES[: 1 if args.smoke else None]
    candidates = CANDIDATES[: 4 if args.smoke else None]
    combos = {(s["d"], s["causal"]): s for s in grid}
    jobs = [(c, s) for s in combos.values() for c in candidates if fits(c, s)]
    with mp.get_context("spawn").Pool(WORKERS) as pool:  # compiled first, in parallel
        errors = pool.starmap(compile_one, jobs)
    failed = {(c, s["d"], s["causal"]): e for (c, s), e in zip(jobs, errors, strict=True) if e}
    print(f"compiled {len(jobs)} kernels, {len(failed)} failed", flush=True)

    records = []
    for shape in grid:
        first = len(records)
        q, k, v = inputs(shape)
        ref = attention_ref(q, k, v, causal=shape["causal"])
        b, h, n, d, causal = (shape[x] for x in ("b", "h", "n", "d", "causal"))
        flops = attention_flops(b, h, n, n, d, causal=causal)
        sdpa_call = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
        for impl in ("sdpa_flash", "sdpa_cudnn"):
            rec = {**shape, "impl": impl, "ms": time_ms(sdpa_call, impl)}
            records.append(rates(rec, flops=flops))
        for cfg in candidates:
            if fits(cfg, shape) and (cfg, d, causal) not in failed:
                err = (launch(cfg, shape, q, k, v).float() - ref).abs().max().item()
                ms = time_ms(functools.partial(launch, cfg, shape, q, k, v))
                rec = {**shape, "impl": "minimodel", "config": list(cfg), "ms": ms}
                records.append(rates(rec, flops=flops) | {"max_err": err})
        best = max(records[first:], key=lambda r: r["tflops"])  # SDPA's too
        print(f"{shape}: best {best.get('config', best['impl'])} {best['tflops']:.0f} TFLOP/s")
    failures = [
        {"config": list(c), "d": d, "causal": causal, "error": e}
        for (c, d, causal), e in failed.items()
    ]
    save(args.out, {"environment": environment(), "failed": failures, "records": records})


if __name__ == "__main__":
    main()

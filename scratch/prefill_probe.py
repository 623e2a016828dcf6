"""Issue 23 study: the prefill grid of the issue's bars under CUDA-graph replay, in one run: the
Hopper kernel (Lab 02 part 2), Lab 02's kernel and SDPA-cuDNN at d = 64 and 128, N = 512 to
16,384 (B = 16,384 / N sequences, 2,048 / d heads: FlashAttention-2's grid), causal or not,
float16 and bfloat16; rounds in turns (bench.core.in_turns), each shape's outputs compared with
cuDNN's first. Prints one line per shape as it goes (ratios to cuDNN), then writes --out.

    PYTHONPATH=src:. python scratch/prefill_probe.py --out $OUT/prefill-probe-h200.json  # ~4 min

What it is for: which bars of the issue hold today (d = 64, N >= 2048: >= 0.95x cuDNN; N = 512
and 1024: >= 0.9x; d = 128, N >= 2048: >= 0.95x), and which kernel is faster per shape class,
the measurement a dispatch rule in minimodel.attention would rest on.
"""

import argparse
import itertools
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench import core
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

LENGTHS = (512, 1024, 2048, 8192, 16384)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def shape_records(d: int, n: int, causal: bool, dtype: str, rounds: int) -> list[dict]:
    b, h = 16384 // n, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(n + d + causal)
    q, k, v = (
        torch.randn(b, h, n, d, generator=gen, device="cuda", dtype=DTYPES[dtype]) for _ in "qkv"
    )
    fns = {
        "hopper": lambda: flash_attention_hopper(q, k, v, causal=causal),
        "lab02": lambda: flash_attention(q, k, v, causal=causal),
        "sdpa_cudnn": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }
    shape = {"d": d, "n": n, "b": b, "h": h, "causal": causal, "dtype": dtype}
    with core.sdpa("sdpa_cudnn"):
        base = fns["sdpa_cudnn"]().float()
    recs = {}
    for name, fn in fns.items():
        with core.sdpa(name):
            diff = (fn().float() - base).abs().max().item()
        recs[name] = {"impl": name, **shape, "max_diff_vs_cudnn": diff, "ms_runs": []}
    core.in_turns(recs, fns, rounds, must_capture=True)
    flops = attention_flops(b, h, n, n, d, causal=causal)
    for rec in recs.values():
        core.rates(rec, flops=flops)["vs_cudnn"] = recs["sdpa_cudnn"]["graph_ms"] / rec["graph_ms"]
    return list(recs.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    a = parser.parse_args()
    t0, records = time.time(), []
    for d, dtype, causal, n in itertools.product((64, 128), DTYPES, (False, True), LENGTHS):
        recs = shape_records(d, n, causal, dtype, a.rounds)
        records += recs
        said = ", ".join(
            f"{r['impl']} {r['graph_ms'] * 1e3:.0f} us {r['vs_cudnn']:.2f}x" for r in recs
        )
        print(f"d={d} {dtype} causal={causal} N={n}: {said} ({time.time() - t0:.0f} s)", flush=True)
        if a.out:  # written after every shape: a run cut short keeps what it measured
            core.save(
                a.out,
                {
                    "environment": core.environment(),
                    "timing": core.GRAPH_TIMING,
                    "records": records,
                },
            )


if __name__ == "__main__":
    main()

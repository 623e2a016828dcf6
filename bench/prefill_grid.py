"""The prefill grid behind minimodel.attention's kernel choice, graph-timed (Lab 03 part 2, "One
entry point"): the Hopper kernel, Lab 02's kernel and SDPA-cuDNN at d = 64 and 128, N = 512 to
16,384 (B = 16,384 / N sequences, 2,048 / d heads: FlashAttention-2's grid), causal or not,
float16 and bfloat16, rounds in turns; each shape's outputs compared with cuDNN's first.

    PYTHONPATH=src:. MINIMODEL_COMMIT=<hash> python -m bench.prefill_grid \
        --out data/prefill-grid-h200.json      # about 5 minutes on the H200

data/prefill-grid-h200.json (and its log) was written by this code at commit 954d0ca, where it
was scratch/prefill_probe.py and drew q, k and v with torch.randn in their dtype; they come from
bench.core.qkv since (float32 draws rounded to the dtype): other inputs of the same shapes.
"""

import itertools
import time

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
    q, k, v = core.qkv(b, h, h, n, d, nq=n, dtype=DTYPES[dtype], seed=n + d + causal)
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
    parser = core.arguments(__doc__, rounds=2, smoke="N = 512 and 2,048 at d = 128, fp16")
    args = parser.parse_args()
    grid = itertools.product((64, 128), DTYPES, (False, True), LENGTHS)
    if args.smoke:
        grid = [(128, "float16", c, n) for c in (False, True) for n in (512, 2048)]
    t0, records = time.time(), []
    for d, dtype, causal, n in grid:
        recs = shape_records(d, n, causal, dtype, args.rounds)
        records += recs
        said = ", ".join(
            f"{r['impl']} {r['graph_ms'] * 1e3:.0f} us {r['vs_cudnn']:.2f}x" for r in recs
        )
        print(f"d={d} {dtype} causal={causal} N={n}: {said} ({time.time() - t0:.0f} s)", flush=True)
        # written after every shape: a run cut short keeps what it measured
        record = {"environment": core.environment(), "timing": core.GRAPH_TIMING}
        core.save(args.out, record | {"records": records})


if __name__ == "__main__":
    main()

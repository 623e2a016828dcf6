"""Issue 23 probe: the Hopper prefill kernel with two Q buffers (scratch/hopper_q2.py's patch:
the next work item's Q loads while this one's last products run) against the kernel as shipped,
Lab 02's kernel and SDPA-cuDNN, graph-timed in turns, bench.prefill_grid's shapes (B = 16,384 / N,
2,048 / d heads). Outputs first: the patched kernel's must equal the shipped kernel's bit for bit
(the same products in the same order), and both stay near cuDNN's.

    PYTHONPATH=src:scripts:scratch:. python scratch/q2_probe.py   # ~2-3 min on the H200
"""

import time

import torch
import torch.nn.functional as F
from hopper_q2 import Q2, patched

from bench import core
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

SHAPES = [(d, c, n, "float16")
          for d in (128, 64) for c in (True, False) for n in (512, 1024, 2048)]
SHAPES += [(128, True, 512, "bfloat16"), (64, True, 512, "bfloat16"), (128, True, 8192, "float16")]


def main() -> None:
    q2 = patched("q2", Q2).flash_attention_hopper
    t0 = time.time()
    for d, causal, n, dt in SHAPES:
        b, h = 16384 // n, 2048 // d
        q, k, v = core.qkv(b, h, h, n, d, nq=n, dtype=getattr(torch, dt), seed=n + d + causal)
        a = (q, k, v)
        fns = {
            "hopper": lambda a=a, c=causal: flash_attention_hopper(*a, causal=c),
            "hopper_q2": lambda a=a, c=causal: q2(*a, causal=c),
            "lab02": lambda a=a, c=causal: flash_attention(*a, causal=c),
            "sdpa_cudnn": lambda a=a, c=causal: F.scaled_dot_product_attention(*a, is_causal=c),
        }
        with core.sdpa("sdpa_cudnn"):
            base = fns["sdpa_cudnn"]().float()
        shipped = fns["hopper"]()
        same = torch.equal(fns["hopper_q2"](), shipped)
        diff = (shipped.float() - base).abs().max().item()
        assert same and diff < 1e-2, (d, causal, n, dt, same, diff)
        recs = {name: {"impl": name, "ms_runs": []} for name in fns}
        core.in_turns(recs, fns, 3, must_capture=True)
        flops = attention_flops(b, h, n, n, d, causal=causal)
        cud = recs["sdpa_cudnn"]["graph_ms"]
        said = ", ".join(f"{k} {r['graph_ms'] * 1e3:.1f} us {cud / r['graph_ms']:.3f}x "
                         f"{flops / r['graph_ms'] / 1e9:.0f} TFLOP/s" for k, r in recs.items())
        print(f"d={d} {dt} causal={causal} N={n}: {said} ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

"""Issue 23 probe, after data/ncu-prefill-*: the Hopper kernel with its epilogue's division made a
reciprocal per row and a multiply (RCP), with two Q buffers (Q2), and with both, against the kernel
as shipped and SDPA-cuDNN, graph-timed in turns at the short prefill shapes (bench.prefill_grid's
B = 16,384 / N, 2,048 / d heads). Q2 alone must equal the shipped output bit for bit; RCP may differ
in the last bit of O (a product by 1/l instead of a quotient), so it is checked against cuDNN.

    PYTHONPATH=src:scripts:scratch:. python scratch/epilogue_probe.py   # ~2 min on the H200
"""

import time

import torch
import torch.nn.functional as F
from hopper_q2 import Q2, RCP, patched

from bench import core
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

SHAPES = [(128, True, 512, "float16"), (128, True, 512, "bfloat16"), (128, True, 1024, "float16"),
          (128, False, 512, "float16"), (64, True, 512, "float16"), (64, False, 2048, "float16")]


def main() -> None:
    variants = {"hopper": flash_attention_hopper}
    for name, patch in (("rcp", RCP), ("q2", Q2), ("rcp_q2", RCP + Q2)):
        variants[name] = patched(name, patch).flash_attention_hopper
    t0 = time.time()
    for d, causal, n, dt in SHAPES:
        b, h = 16384 // n, 2048 // d
        q, k, v = core.qkv(b, h, h, n, d, nq=n, dtype=getattr(torch, dt), seed=n + d + causal)
        a = (q, k, v)
        fns = {name: (lambda f=f, a=a, c=causal: f(*a, causal=c)) for name, f in variants.items()}
        fns["sdpa_cudnn"] = lambda a=a, c=causal: F.scaled_dot_product_attention(*a, is_causal=c)
        with core.sdpa("sdpa_cudnn"):
            base = fns["sdpa_cudnn"]().float()
        shipped = fns["hopper"]()
        assert torch.equal(fns["q2"](), shipped)
        diffs = {name: (fns[name]().float() - base).abs().max().item() for name in variants}
        assert max(diffs.values()) < 1e-2, diffs
        recs = {name: {"impl": name, "ms_runs": []} for name in fns}
        core.in_turns(recs, fns, 3, must_capture=True)
        flops = attention_flops(b, h, n, n, d, causal=causal)
        cud = recs["sdpa_cudnn"]["graph_ms"]
        said = ", ".join(f"{k} {r['graph_ms'] * 1e3:.1f} us {cud / r['graph_ms']:.3f}x "
                         f"{flops / r['graph_ms'] / 1e9:.0f} TFLOP/s" for k, r in recs.items())
        print(f"d={d} {dt} causal={causal} N={n}: {said}; max |O - cuDNN| "
              + ", ".join(f"{k} {x:.1e}" for k, x in diffs.items())
              + f" ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

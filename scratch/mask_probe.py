"""Issue 23 probe, after scratch/epilogue_probe.py: the Hopper kernel with the reciprocal epilogue
(hopper_q2.RCP) and, on top, the boundary tiles' mask as one comparison per element against a
per-row limit (hopper_q2.MASK: 3,960 SASS instructions at d = 128 causal against RCP's 4,880 and
the shipped 5,256, and no spill), against the kernel as shipped and SDPA-cuDNN, graph-timed in
turns at bench.prefill_grid's short shapes. Outputs first: RCP + MASK must equal RCP bit for bit
(the same keys are masked) at these shapes and at a window, at fewer queries than keys, and at a
key count that is not a multiple of the tile; RCP stays near cuDNN.

    PYTHONPATH=src:scripts:scratch:. python scratch/mask_probe.py   # ~2 min on the H200
"""

import time

import torch
import torch.nn.functional as F
from hopper_q2 import MASK, RCP, patched

from bench import core
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

SHAPES = [(128, True, 512, "float16"), (128, True, 512, "bfloat16"), (128, True, 1024, "float16"),
          (128, True, 2048, "float16"), (128, False, 512, "float16"), (64, True, 512, "float16")]


def main() -> None:
    rcp = patched("rcp", RCP).flash_attention_hopper
    rcp_mask = patched("rcp_mask", RCP + MASK).flash_attention_hopper
    # the masks agree where they differ in form: a window, fewer queries than keys, a ragged end
    for d, nq, nk, kw in ((128, 384, 512, {"causal": True}), (64, 500, 500, {"causal": True}),
                          (128, 512, 300, {"causal": True}),  # rows that see no key
                          (128, 512, 500, {"causal": False}),
                          (128, 1024, 1024, {"causal": True, "window": 200}),
                          (64, 300, 700, {"causal": True, "window": 129})):
        q, k, v = core.qkv(2, 4, 4, nk, d, nq=nq, dtype=torch.float16, seed=nq + nk)
        assert torch.equal(rcp_mask(q, k, v, **kw), rcp(q, k, v, **kw)), (d, nq, nk, kw)
    print("RCP + MASK equals RCP at 6 mask forms", flush=True)
    t0 = time.time()
    for d, causal, n, dt in SHAPES:
        b, h = 16384 // n, 2048 // d
        q, k, v = core.qkv(b, h, h, n, d, nq=n, dtype=getattr(torch, dt), seed=n + d + causal)
        a = (q, k, v)
        fns = {name: (lambda f=f, a=a, c=causal: f(*a, causal=c))
               for name, f in (("hopper", flash_attention_hopper), ("rcp", rcp),
                               ("rcp_mask", rcp_mask))}
        fns["sdpa_cudnn"] = lambda a=a, c=causal: F.scaled_dot_product_attention(*a, is_causal=c)
        with core.sdpa("sdpa_cudnn"):
            base = fns["sdpa_cudnn"]().float()
        assert torch.equal(fns["rcp_mask"](), fns["rcp"]())
        diff = (fns["rcp"]().float() - base).abs().max().item()
        assert diff < 1e-2, diff
        recs = {name: {"impl": name, "ms_runs": []} for name in fns}
        core.in_turns(recs, fns, 3, must_capture=True)
        flops = attention_flops(b, h, n, n, d, causal=causal)
        cud = recs["sdpa_cudnn"]["graph_ms"]
        said = ", ".join(f"{k} {r['graph_ms'] * 1e3:.1f} us {cud / r['graph_ms']:.3f}x "
                         f"{flops / r['graph_ms'] / 1e9:.0f} TFLOP/s" for k, r in recs.items())
        print(f"d={d} {dt} causal={causal} N={n}: {said} ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

"""What each step of Lab 02 part 2's schedule buys ("What each step bought"): the Hopper kernel
with its persistent grid or its ping-pong switched off, beside Lab 02's kernel and cuDNN.

    python -m bench.ablate_hopper            # on the GPU: data/flash-hopper-ablation-h200.json
"""

import torch
import torch.nn.functional as F

from bench.core import DATA, arguments, environment, rates, save, sdpa, time_ms
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

VARIANTS = {  # name: the switches of flash_attention_hopper
    "hopper": {},
    "hopper, no ping-pong": {"pingpong": False},
    "hopper, one program per item pair": {"persistent": False},
    "hopper, neither": {"persistent": False, "pingpong": False},
}


def measure(n: int, causal: bool, d: int = 128, h: int = 16) -> dict:
    """Every variant, Lab 02's kernel and cuDNN at one shape, on the same inputs."""
    b = 16384 // n
    g = torch.Generator(device="cuda").manual_seed(n + causal)
    q, k, v = (torch.randn(b, h, n, d, generator=g, device="cuda", dtype=torch.half) for _ in "qkv")
    fns = {
        name: (lambda kw=kw: flash_attention_hopper(q, k, v, causal=causal, **kw))
        for name, kw in VARIANTS.items()
    }
    fns["lab02"] = lambda: flash_attention(q, k, v, causal=causal)
    fns["sdpa_cudnn"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    first, flops = fns["hopper"](), attention_flops(b, h, n, n, d, causal=causal)
    row = {"n": n, "causal": causal, "b": b, "h": h, "d": d, "dtype": "float16"}
    for name, fn in fns.items():
        with sdpa(name):
            diff = (fn().float() - first.float()).abs().max().item()
        if name in VARIANTS and diff != 0.0:
            raise SystemExit(f"{name} differs from the default by {diff} at N={n}")
        row[name] = rates({"ms": time_ms(fn, name, graph=True)}, flops=flops)
    print(n, causal, {name: round(row[name]["tflops"]) for name in fns}, flush=True)
    return row


def main() -> None:
    out = DATA / "flash-hopper-ablation-h200.json"
    args = arguments(__doc__, out, smoke="a small subset").parse_args()
    lengths = (512,) if args.smoke else (512, 2048, 8192)
    records = [measure(n, causal) for n in lengths for causal in (False, True)]
    timing = (
        "GPU time under CUDA-graph replay (minimodel.timing.gpu_time_ms, the median), ms; "
        "TFLOP/s from minimodel.roofline.attention_flops (visible pairs)"
    )
    record = {"environment": environment(), "timing": timing, "variants": VARIANTS}
    save(args.out, record | {"records": records})


if __name__ == "__main__":
    main()

"""What each step of Lab 02 part 2's schedule buys, on the H200: the Hopper kernel with its
persistent grid and its ping-pong each switched off, against Lab 02's kernel and SDPA's cuDNN
backend, in one process on the same inputs. Writes data/flash-hopper-ablation-h200.json;
figures/flash_hopper.py makes the page's table from it.

    python -m bench.ablate_hopper            # on the GPU (about a minute and a half)
    python -m bench.ablate_hopper --out x.json

FlashAttention-2's grid at d = 128, fp16: B = 16384 / N, H = 16, N in {512, 2048, 8192}, causal
and not. Each time is triton.testing.do_bench's median; each variant is checked against the
others' output first (the switches change no result).
"""

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.core import environment, time_ms
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.roofline import attention_flops

ROOT = Path(__file__).resolve().parents[1]
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
    q, k, v = (
        torch.randn(b, h, n, d, generator=g, device="cuda", dtype=torch.float16) for _ in range(3)
    )
    fns = {
        name: (lambda kw=kw: flash_attention_hopper(q, k, v, causal=causal, **kw))
        for name, kw in VARIANTS.items()
    }
    fns["lab02"] = lambda: flash_attention(q, k, v, causal=causal)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    fns["sdpa_cudnn"] = cudnn
    first = fns["hopper"]()
    flops = attention_flops(b, h, n, n, d, causal=causal)
    row = {"n": n, "causal": causal, "b": b, "h": h, "d": d, "dtype": "float16"}
    for name, fn in fns.items():
        diff = (fn().float() - first.float()).abs().max().item()
        if name in VARIANTS and diff != 0.0:
            raise SystemExit(f"{name} differs from the default by {diff} at N={n}")
        ms = time_ms(fn)
        row[name] = {"ms": ms, "tflops": flops / ms / 1e9}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "data" / "flash-hopper-ablation-h200.json"
    )
    parser.add_argument("--smoke", action="store_true", help="a small subset (a GPU smoke run)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ablate_flash_hopper.py measures a Hopper GPU: none is available here")
    records = []
    for n in (512,) if args.smoke else (512, 2048, 8192):
        for causal in (False, True):
            row = measure(n, causal)
            records.append(row)
            print(
                n,
                "causal" if causal else "full",
                {name: round(r["tflops"]) for name, r in row.items() if isinstance(r, dict)},
                flush=True,
            )
    out = {
        "environment": environment(),
        "timing": "triton.testing.do_bench median, ms; TFLOP/s from minimodel.roofline."
        "attention_flops (visible pairs)",
        "variants": dict(VARIANTS),
        "records": records,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Bytes that attention really moves through device memory, measured with Nsight Compute, next to
what minimodel.roofline predicts. Writes data/bytes-h200.json.

    python scripts/measure_bytes.py --out data/bytes-h200.json     # on the GPU machine, as root

Each (implementation, shape) runs in its own process under `ncu`: inputs are made and the kernel
is compiled and autotuned first, then only the one call between cudaProfilerStart/Stop is
profiled. ncu flushes the caches before every kernel (its default), so each kernel starts cold:
the DRAM bytes are what that kernel had to fetch, and a multi-kernel implementation (naive
attention) is charged for every intermediate it writes out and reads back.
"""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "gpu__time_duration.sum"]
IMPLS = ["naive", "minimodel", "sdpa_flash"]
SHAPES = [  # the anchors of Theory 00: B=1, H=16, d=64, fp16, N = 64 (the verb sequence) and 2048
    {"b": 1, "h": 16, "n": 64, "d": 64, "causal": False},
    {"b": 1, "h": 16, "n": 2048, "d": 64, "causal": False},
    {"b": 1, "h": 16, "n": 64, "d": 64, "causal": True},
    {"b": 1, "h": 16, "n": 2048, "d": 64, "causal": True},
]


def child(impl: str, shape: dict) -> None:
    """Runs inside ncu: make inputs, warm up, then profile exactly one call."""
    from minimodel.attention_flash import flash_attention
    from minimodel.reference import visible_mask

    b, h, n, d, causal = shape["b"], shape["h"], shape["n"], shape["d"], shape["causal"]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    mask = visible_mask(n, n, causal=True, device="cuda") if causal else None

    def naive():
        s = (q @ k.transpose(-1, -2)) * d**-0.5
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    fn = {
        "naive": naive,
        "minimodel": lambda: flash_attention(q, k, v, causal=causal),
        "sdpa_flash": lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal),
    }[impl]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def profile(ncu: str, impl: str, shape: dict) -> list[dict]:
    cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none",
           "--profile-from-start", "off", "--metrics", ",".join(METRICS),
           sys.executable, __file__, "--child", impl, json.dumps(shape)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith('"')]
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        kern = kernels.setdefault(row["ID"], {"kernel": row["Kernel Name"][:80]})
        kern[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    return list(kernels.values())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], json.loads(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).parent))
    from measure_ceilings import environment

    records = []
    for shape in SHAPES:
        for impl in IMPLS:
            kernels = profile(args.ncu, impl, shape)
            rec = {**shape, "impl": impl, "kernels": kernels,
                   "dram_read": sum(k.get("dram__bytes_read.sum", 0) for k in kernels),
                   "dram_write": sum(k.get("dram__bytes_write.sum", 0) for k in kernels),
                   "l2_bytes": sum(k.get("lts__t_bytes.sum", 0) for k in kernels),
                   "ns": sum(k.get("gpu__time_duration.sum", 0) for k in kernels)}
            records.append(rec)
            print(f"N={shape['n']} causal={shape['causal']} {impl}: {len(kernels)} kernels, "
                  f"DRAM {(rec['dram_read'] + rec['dram_write']) / 2**20:.3f} MiB, "
                  f"L2 {rec['l2_bytes'] / 2**20:.3f} MiB, {rec['ns'] / 1e3:.1f} us", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"environment": environment(), "metrics": METRICS,
                                    "cache_control": "ncu default: caches flushed before each "
                                                     "kernel", "records": records},
                                   indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Bytes moved, measured with Nsight Compute (data/bytes-h200.json, from
scripts/measure_bytes.py), against minimodel.roofline's model; and the measured roofline points.

    python scripts/fig_bytes.py            # write docs/generated/bytes-*.md and the figure
    python scripts/fig_bytes.py --check    # fail if they are stale
"""

import json

from figlib import ROOT, emit, h200_measured, markdown_table, roofline_svg

from minimodel.roofline import (
    RooflinePoint,
    attention_flops,
    attention_min_bytes,
    flash_attention_bytes,
    naive_attention_bytes,
)

DATA = ROOT / "data" / "bytes-h200.json"
LABEL = {"naive": "naive (eager)", "minimodel": "minimodel Flash", "sdpa_flash": "SDPA FA2"}
MIB = 2**20


def flops(r: dict) -> int:
    return attention_flops(r["b"], r["h"], r["n"], r["n"], r["d"], causal=r["causal"])


def dram(r: dict) -> float:
    """DRAM bytes, with the output counted as written even if its write-back came after the
    kernel ended (a small O stays in L2 and reaches DRAM later, outside ncu's window)."""
    out_bytes = r["b"] * r["h"] * r["n"] * r["d"] * 2
    return r["dram_read"] + max(r["dram_write"], out_bytes)


def table(data: dict) -> str:
    rows = []
    for r in data["records"]:
        b, h, n, d = r["b"], r["h"], r["n"], r["d"]
        if r["impl"] == "naive":
            model = f"{naive_attention_bytes(b, h, h, n, n, d) / MIB:,.2f} (naive)"
        else:
            lo = attention_min_bytes(b, h, h, n, n, d) / MIB
            hi = flash_attention_bytes(b, h, h, n, n, d, block_m=64, block_n=64,
                                       causal=r["causal"]) / MIB
            low, high = f"{lo:,.2f}", f"{hi:,.2f}"  # an en dash: the range never breaks
            model = low if low == high else f"{low}\u2013{high}"
        rows.append([f"{n:,}", "causal" if r["causal"] else "none", LABEL[r["impl"]],
                     len(r["kernels"]), f"{r['dram_read'] / MIB:,.2f}",
                     f"{r['dram_write'] / MIB:,.2f}", f"{r['l2_bytes'] / MIB:,.1f}", model,
                     f"{flops(r) / dram(r):,.0f}", f"{r['ns'] / 1e3:,.1f}",
                     f"{dram(r) / r['ns']:,.0f}"])
    header = ["N", "mask", "implementation", "kernels", "DRAM read (MiB)", "DRAM written (MiB)",
              "L2 traffic (MiB)", "model (MiB)", "I (FLOP/B)", "time under ncu (µs)",
              "DRAM GB/s"]
    return markdown_table(header, rows)


def figure(data: dict) -> bytes:
    points = [RooflinePoint(f"{r['impl']} N={r['n']}", flops(r) / dram(r), flops(r) / r["ns"] * 1e9)
              for r in data["records"] if not r["causal"] and r["impl"] != "sdpa_flash"]
    head_dims = {r["d"] for r in data["records"]}
    assert len(head_dims) == 1, head_dims  # one exponential roof fits one head dim
    return roofline_svg([h200_measured()], points, head_dim=head_dims.pop(),
                        title="Measured: naive vs Flash, d=64, fp16, B=1, H=16 (Nsight Compute)")


def main() -> None:
    data = json.loads(DATA.read_text())
    env = data["environment"]
    emit({
        "generated/bytes-measured.md": table(data),
        "generated/bytes-environment.md": (
            f"Measured on an {env['device']} (torch {env['torch']}, triton {env['triton']}, "
            f"{env['date'][:10]}) with Nsight Compute, caches flushed before each kernel; one "
            "call per process after warm-up (`scripts/measure_bytes.py`, "
            "`data/bytes-h200.json`).\n"),
        "figures/roofline-measured.svg": figure(data),
    })


if __name__ == "__main__":
    main()

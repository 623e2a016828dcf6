"""Theory 00's and the GPU primer's tables and the naive-attention roofline, from
minimodel.roofline and minimodel.ceilings, with the H200's measured roofs."""

import itertools

from figures.core import h200_exp_rate, h200_measured, markdown_table, roofline_svg, share
from minimodel import roofline as r
from minimodel.ceilings import HARDWARE, MUFU_EXP2_PER_CLOCK, exp_roof
from minimodel.roofline_plot import RooflinePoint

B, H, D = 1, 16, 64  # the synthetic shape of the N=64 / N=2048 anchors
GUIDE = "CUDA programming guide"
CC90 = f"{GUIDE}, compute capability 9.0"


def decode_costs_table() -> str:
    rows = []
    for context, batch, hkv in itertools.product((512, 4096, 32768), (1, 64), (32, 8)):
        c = r.decoder_layer_costs(4096, 32, hkv, context, batch=batch)
        heads = "MHA" if hkv == 32 else f"GQA ({hkv} kv heads)"
        cells = [f"{c.attn_flops / c.proj_flops:.2f}", f"{c.weight_bytes / 2**20:.0f} MiB"]
        kv = [f"{c.kv_bytes / 2**20:,.0f} MiB", f"{c.kv_bytes / (c.kv_bytes + c.weight_bytes):.0%}"]
        rows.append([f"{context:,}", batch, heads, *cells, *kv])
    header = "context N | batch | heads | attn / proj FLOPs | weight bytes | KV bytes"
    return markdown_table(f"{header} | KV share of bytes", rows)


def naive_points() -> list[tuple[str, int, float, float]]:
    """(label, N, flops, bytes) for naive and compulsory traffic at N=64 and 2048."""
    counts = {"naive": r.naive_attention_bytes, "compulsory": r.attention_min_bytes}
    return [
        (label, n, r.attention_flops(B, H, n, n, D), count(B, H, H, n, n, D))
        for n in (64, 2048)
        for label, count in counts.items()
    ]


def naive_table() -> str:
    h200, rows = HARDWARE["H200"], []
    for label, n, flops, nbytes in naive_points():
        i = flops / nbytes
        rate, bound = h200.attainable(i), "memory" if i < h200.ridge else "compute"
        cells = [f"{flops / 1e6:,.1f}", f"{nbytes / 2**20:,.3f}", f"{i:.1f}", bound]
        rows.append([label, n, *cells, f"{rate / 1e12:.0f}", f"{flops / rate * 1e6:.2f}"])
    header = f"bytes counted | N | MFLOP | MiB moved | I (FLOP/B) | bound (ridge {h200.ridge:.0f})"
    return markdown_table(f"{header} | attainable TFLOP/s | floor time (µs)", rows)


def exp_roof_table() -> str:
    """Datasheet roofs of every GPU in HARDWARE, plus the H200's measured matmul rate."""
    roofs = [(name, c, "datasheet") for name, c in HARDWARE.items()]
    rows = []
    for name, c, kind in [*roofs, ("H200", h200_measured(), "measured matmul")]:
        rates = [f"{c.peak_flops / 1e12:,.0f}", f"{c.exp_rate / 1e12:.2f}"]
        rates.append(f"{c.peak_flops / c.exp_rate:,.0f}")
        caps = [share(exp_roof(d, c.peak_flops, c.exp_rate), c.peak_flops) for d in (64, 128)]
        rows.append([name, kind, *rates, *caps])
    header = "GPU | π from | π (TFLOP/s) | exp2/s (T) | balance: FLOPs per exp2"
    return markdown_table(f"{header} | cap, d = 64 (of π) | cap, d = 128 (of π)", rows)


def gpu_primer_table() -> str:
    """The H200 in numbers (GPU primer), each with where it comes from."""
    h, measured, hw = HARDWARE["H200"], h200_measured(), "`HARDWARE['H200']"
    per_sm_clock = h.peak_flops / (h.sm_count * h.clock_hz)
    peak, exp, measured_exp = h.peak_flops / 1e12, h.exp_rate / 1e12, h200_exp_rate() / 1e12
    return f"""\
| quantity | H200 | from |
|---|---|---|
| streaming multiprocessors (SMs) | {h.sm_count} | {hw}.sm_count` |
| dense fp16/bf16 tensor-core rate | {peak:,.1f} TFLOP/s | datasheet, {hw}.peak_flops` |
| clock that rate assumes | {h.clock_hz / 1e9:.2f} GHz | {hw}.clock_hz` |
| tensor-core FLOPs per SM per clock | {per_sm_clock:,.0f} | peak / (SMs × clock) |
| exponentials (MUFU) per SM per clock | {MUFU_EXP2_PER_CLOCK} | `MUFU_EXP2_PER_CLOCK` ({GUIDE}) |
| exponentials at that clock | {exp:.2f} T exp2/s | {hw}.exp_rate` |
| matmul FLOPs per exponential, at balance | {h.peak_flops / h.exp_rate:,.0f} | peak / exp2 rate |
| exponentials at the maximum SM clock | {measured_exp:.2f} T exp2/s | `data/mufu-h200.json` |
| HBM bandwidth | {h.bandwidth / 1e12:.1f} TB/s | datasheet |
| ridge point | {h.ridge:,.0f} FLOP/byte | peak / bandwidth |
| L2 cache | {h.l2_bytes / 2**20:.0f} MiB | `torch.cuda.get_device_properties` |
| shared memory per SM | {h.smem_per_sm_bytes // 1024} KiB (227 KiB for one block) | {CC90} |
| registers per SM | 65,536 × 32 bit (at most 255 per thread) | {CC90} |
| threads per SM | at most 2,048 (64 warps of 32) | {CC90} |
| measured fp16 matmul | {measured.peak_flops / 1e12:,.0f} TFLOP/s | `data/ceilings-h200.json` |
| measured copy bandwidth | {measured.bandwidth / 1e12:.2f} TB/s | `data/ceilings-h200.json` |
"""


def outputs() -> dict[str, str | bytes]:
    points = [RooflinePoint(f"{label} N={n}", f / b) for label, n, f, b in naive_points()]
    title = "Naive attention vs compulsory bytes (d=64, fp16)"
    figure = roofline_svg([HARDWARE["H200"], h200_measured()], points, title=title, head_dim=D)
    return {
        "generated/decode-costs.md": decode_costs_table(),
        "generated/naive-roofline.md": naive_table(),
        "generated/exp-roof.md": exp_roof_table(),
        "generated/gpu-h200.md": gpu_primer_table(),
        "figures/roofline-naive.svg": figure,
    }

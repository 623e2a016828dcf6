"""The theory pages' and the GPU primer's tables and figures of the models, from
minimodel.roofline and minimodel.ceilings, with the H200's measured roofs: Theory 00's naive
attention, Theory 03's window and KV-cache layouts, Theory 04's decode layouts, the GPU primer's
H200 in numbers and memory hierarchy."""

import itertools
import math

import matplotlib.pyplot as plt

from figures.core import h200_exp_rate, h200_measured, markdown_table, roofline_svg, share, svg
from minimodel import roofline as r
from minimodel.ceilings import HARDWARE, MUFU_EXP2_PER_CLOCK, exp_roof
from minimodel.roofline_plot import RooflinePoint

B, H, D = 1, 16, 64  # the synthetic shape of the N=64 / N=2048 anchors
DECODE_BATCH, DECODE_CONTEXT = 64, 4096  # Theory 04's decode step
WINDOW, WINDOW_HEADS = 4096, 16  # Theory 03's window, over heads of d = 128
# Theory 03's 16 sequences of a serving batch, of lengths up to the 4096-token limit (an example
# mix), for a 32-layer model with 8 kv heads of d = 128
LENGTHS = [37, 112, 250, 401, 512, 640, 777, 1024, 1200, 1500, 1800, 2048, 2500, 3000, 3500, 4096]
MAX_LEN, LAYERS, KV_HEADS = 4096, 32, 8
KIB, MIB, GIB = 2**10, 2**20, 2**30
REGISTERS_PER_SM_BYTES = 65536 * 4  # 64 K 32-bit registers (CUDA programming guide, cc 9.0)
HBM_BYTES = 141e9  # 141 GB of HBM3e (NVIDIA H200 datasheet)
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
    return markdown_table(f"{header} | attainable TFLOP/s (two roofs) | floor time (µs)", rows)


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


def decode_layouts() -> list[tuple]:
    """(name, heads, layers, cache bytes per token, FLOPs, bytes) of one decode step, fp16."""
    batch, context = DECODE_BATCH, DECODE_CONTEXT
    flops = r.attention_flops(batch, 32, 1, context, 128)
    rows = []
    for name, hkv in (("MHA", 32), ("GQA, 8 kv heads", 8), ("MQA", 1)):
        nbytes = r.attention_min_bytes(batch, 32, hkv, 1, context, 128)
        rows.append((name, f"32 / {hkv}", 32, r.kv_cache_bytes(32, hkv, 128, 1), flops, nbytes))
    # DeepSeek-V2's sizes: 128 heads, d_c = 512, d_R = 64, 60 layers
    mla = [f(batch, 128, context, 512, 64) for f in (r.mla_decode_flops, r.mla_decode_bytes)]
    mla_cache = r.mla_cache_bytes(60, 512, 64, 1)
    return [*rows, ("MLA (DeepSeek-V2 sizes)", "128 / latent", 60, mla_cache, *mla)]


def decode_table() -> str:
    roof, rows = h200_measured(), []
    for name, heads, layers, per_token, flops, nbytes in decode_layouts():
        i = flops / nbytes
        rate, bound = roof.attainable(i), "memory" if i < roof.ridge else "compute"
        cache = [f"{per_token / 1024:,.1f} ({layers})"]
        cache.append(f"{per_token * DECODE_CONTEXT * DECODE_BATCH / 2**30:,.1f}")
        rates = [f"{rate / 1e12:,.0f}", f"{flops / rate * 1e6:,.1f}"]
        rows.append([name, heads, *cache, f"{i:,.1f}", bound, *rates])
    header = "layout | heads (q / kv) | cache KiB per token (layers)"
    header += f" | cache GiB at B={DECODE_BATCH}, N={DECODE_CONTEXT} | decode I (FLOP/B)"
    header += f" | bound (ridge {roof.ridge:.0f}) | attainable TFLOP/s | floor µs per layer"
    return markdown_table(header, rows)


def window_table() -> str:
    rows, h, tiles = [], WINDOW_HEADS, {"causal": True, "block_m": 128, "block_n": 64}
    windows = (None, WINDOW)  # full causal, then the window
    for n in (4096, 16384, 65536):
        flops = [r.attention_flops(1, h, n, n, 128, causal=True, window=w) for w in windows]
        nbytes = [r.flash_attention_bytes(1, h, h, n, n, 128, window=w, **tiles) for w in windows]
        cells = [*(f"{f / 1e9:,.0f}" for f in flops), f"{flops[1] / flops[0]:.2f}"]
        cells += [*(f"{b / 2**20:,.0f}" for b in nbytes), f"{nbytes[1] / nbytes[0]:.2f}"]
        rows.append([f"{n:,}", *cells])
    header = f"N | causal GFLOP | window W={WINDOW:,} GFLOP | FLOP ratio | causal MiB (no reuse)"
    return markdown_table(f"{header} | window MiB (no reuse) | byte ratio", rows)


def reservation_table() -> str:
    used = sum(LENGTHS)
    layouts = [("contiguous, max_seq_len 4,096", len(LENGTHS) * MAX_LEN)]
    layouts += [(f"paged, b = {b}", sum(b * math.ceil(n / b) for n in LENGTHS)) for b in (16, 128)]
    layouts += [("tokens actually cached", used)]
    rows = []
    for name, slots in layouts:
        nbytes = r.kv_cache_bytes(LAYERS, KV_HEADS, 128, slots)
        per_seq = nbytes / len(LENGTHS)
        fit = f"{int(40 * GIB // per_seq):,}"
        rows.append([name, f"{slots:,}", f"{nbytes / GIB:.2f}", f"{used / slots:.1%}", fit])
    header = "layout | token slots reserved | GiB | slots in use | sequences of this mix in 40 GiB"
    return markdown_table(header, rows)


def levels() -> list[tuple[str, float, str, str]]:
    """(level, bytes on the chip, what one SM or the chip has, who uses it), nearest first."""
    h = HARDWARE["H200"]
    sms, smem, regs = h.sm_count, h.smem_per_sm_bytes, REGISTERS_PER_SM_BYTES
    copy = h200_measured().bandwidth
    hbm = f"{HBM_BYTES / 1e9:.0f} GB, {h.bandwidth / 1e12:.1f} TB/s datasheet, "
    shared = f"up to {smem // KIB} KiB per SM × {sms} (its L1 the rest of 256 KiB)"
    sizes = {
        "registers": (sms * regs, f"{regs // KIB} KiB per SM × {sms}"),
        "shared memory": (sms * smem, shared),
        "L2 cache": (h.l2_bytes, f"{h.l2_bytes // MIB} MiB for the chip"),
        "HBM (device memory)": (HBM_BYTES, hbm + f"{copy / 1e12:.2f} TB/s measured copy"),
    }
    who = [
        "one thread's own; every block a kernel computes on (acc, m_i, l_i)",
        "one CTA's threads; tl.dot operands, pipeline stages, TMA tiles",
        "every SM; every load and store of device memory passes through it",
        "every program; each tl.load / tl.store / TMA copy",
    ]
    return [(name, *size, text) for (name, size), text in zip(sizes.items(), who, strict=True)]


def memory_figure() -> bytes:
    rows = levels()
    fig, ax = plt.subplots(figsize=(9.0, 3.6))
    colors = ["#bc4b51", "#f4a259", "#8cb369", "#5b8e7d"]
    for y, ((name, size, amount, who), color) in enumerate(zip(rows, colors, strict=True)):
        ax.barh(y, size, color=color, height=0.62, alpha=0.45)
        ax.text(1.3e5, y - 0.08, f"{name}: {amount}", va="center", fontsize=9, weight="bold")
        ax.text(1.3e5, y + 0.2, who, va="center", fontsize=8)
    ax.set(xscale="log", xlim=(1e5, 1e12), ylim=(len(rows) - 0.5, -0.5), yticks=[])
    ax.set_xlabel("bytes on the whole H200 (log scale); faster and smaller toward the top")
    title = "The H200's memory hierarchy: what each level holds, and who shares it"
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right", "left"]].set_visible(False)
    return svg(fig)


def outputs() -> dict[str, str | bytes]:
    datasheet, measured = HARDWARE["H200"], h200_measured()
    points = [RooflinePoint(f"{label} N={n}", f / b) for label, n, f, b in naive_points()]
    title = "Naive attention vs compulsory bytes (d=64, fp16)"
    naive = roofline_svg([datasheet, measured], points, title=title, head_dim=D)
    points = [RooflinePoint(name, flops / nbytes) for name, *_, flops, nbytes in decode_layouts()]
    title = f"Decode attention, one layer, B={DECODE_BATCH}, N={DECODE_CONTEXT}, fp16"
    return {
        "generated/decode-costs.md": decode_costs_table(),
        "generated/naive-roofline.md": naive_table(),
        "generated/exp-roof.md": exp_roof_table(),
        "generated/gpu-h200.md": gpu_primer_table(),
        "figures/roofline-naive.svg": naive,
        "generated/decode-layouts.md": decode_table(),
        "figures/roofline-decode.svg": roofline_svg([measured, datasheet], points, title=title),
        "generated/window-work.md": window_table(),
        "generated/paged-reservation.md": reservation_table(),
        "figures/memory-hierarchy.svg": memory_figure(),
    }

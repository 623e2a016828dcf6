"""Tables and figure of Theory 00 (the roofline) and the GPU primer, computed by
minimodel.roofline, with the H200's measured roofs from data/ceilings-h200.json.

    python -m figures.roofline            # write docs/generated/*.md and docs/figures/*.svg
    python -m figures.roofline --check    # fail if the committed ones are stale
"""

from figures.core import (
    CEILINGS,
    emit,
    h200_exp_rate,
    h200_measured,
    markdown_table,
    roofline_svg,
)
from minimodel.ceilings import HARDWARE, MUFU_EXP2_PER_CLOCK, Ceilings, exp_roof
from minimodel.roofline import (
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    decoder_layer_costs,
    naive_attention_bytes,
)
from minimodel.roofline_plot import RooflinePoint

B, H, D = 1, 16, 64  # the synthetic shape of the N=64 / N=2048 anchors


def decode_costs_table() -> str:
    rows = []
    for context in (512, 4096, 32768):
        for batch in (1, 64):
            for hkv in (32, 8):
                c = decoder_layer_costs(4096, 32, hkv, context, batch=batch)
                rows.append(
                    [
                        f"{context:,}",
                        batch,
                        "MHA" if hkv == 32 else f"GQA ({hkv} kv heads)",
                        f"{c.attn_flops / c.proj_flops:.2f}",
                        f"{c.weight_bytes / 2**20:.0f} MiB",
                        f"{c.kv_bytes / 2**20:,.0f} MiB",
                        f"{c.kv_bytes / (c.kv_bytes + c.weight_bytes):.0%}",
                    ]
                )
    header = [
        "context N",
        "batch",
        "heads",
        "attn / proj FLOPs",
        "weight bytes",
        "KV bytes",
        "KV share of bytes",
    ]
    return markdown_table(header, rows)


def naive_points() -> list[tuple[str, int, float, float, float]]:
    """(label, N, intensity, flops, bytes) for naive and compulsory traffic at N=64 and 2048."""
    out = []
    for n in (64, 2048):
        flops = attention_flops(B, H, n, n, D)
        for label, nbytes in (
            ("naive", naive_attention_bytes(B, H, H, n, n, D)),
            ("compulsory", attention_min_bytes(B, H, H, n, n, D)),
        ):
            out.append((label, n, arithmetic_intensity(flops, nbytes), flops, nbytes))
    return out


def naive_table(h200: Ceilings) -> str:
    rows = []
    for label, n, intensity, flops, nbytes in naive_points():
        rate = h200.attainable(intensity)
        rows.append(
            [
                label,
                n,
                f"{flops / 1e6:,.1f}",
                f"{nbytes / 2**20:,.3f}",
                f"{intensity:.1f}",
                "memory" if intensity < h200.ridge else "compute",
                f"{rate / 1e12:.0f}",
                f"{flops / rate * 1e6:.2f}",
            ]
        )
    header = [
        "bytes counted",
        "N",
        "MFLOP",
        "MiB moved",
        "I (FLOP/B)",
        f"bound (ridge {h200.ridge:.0f})",
        "attainable TFLOP/s",
        "floor time (µs)",
    ]
    return markdown_table(header, rows)


def ceilings() -> list[Ceilings]:
    roofs = [HARDWARE["H200"]]
    if CEILINGS.exists():
        roofs.append(h200_measured())
    return roofs


# --- The exponential roof, per GPU (Theory 00) ----------------------------------------------------


def exp_roof_table() -> str:
    """Datasheet roofs of every GPU in HARDWARE, plus the H200's measured matmul rate."""
    rows = []
    roofs = [(name, c, "datasheet") for name, c in HARDWARE.items()]
    if CEILINGS.exists():
        roofs.append(("H200", h200_measured(), "measured matmul"))
    for name, c, kind in roofs:
        caps = [exp_roof(d, c.peak_flops, c.exp_rate) for d in (64, 128)]
        rows.append(
            [
                name,
                kind,
                f"{c.peak_flops / 1e12:,.0f}",
                f"{c.exp_rate / 1e12:.2f}",
                f"{c.peak_flops / c.exp_rate:,.0f}",
                *(f"{cap / 1e12:,.0f} ({cap / c.peak_flops:.0%})" for cap in caps),
            ]
        )
    header = [
        "GPU",
        "π from",
        "π (TFLOP/s)",
        "exp2/s (T)",
        "balance: FLOPs per exp2",
        "cap, d = 64 (of π)",
        "cap, d = 128 (of π)",
    ]
    return markdown_table(header, rows)


# --- The H200 in numbers (GPU primer) -------------------------------------------------------------


def gpu_primer_table() -> str:
    h = HARDWARE["H200"]
    per_sm_clock = h.peak_flops / (h.sm_count * h.clock_hz)
    rate = h200_exp_rate()
    rows = [
        ["streaming multiprocessors (SMs)", f"{h.sm_count}", "`HARDWARE['H200'].sm_count`"],
        [
            "dense fp16/bf16 tensor-core rate",
            f"{h.peak_flops / 1e12:,.1f} TFLOP/s",
            "datasheet, `HARDWARE['H200'].peak_flops`",
        ],
        ["clock that rate assumes", f"{h.clock_hz / 1e9:.2f} GHz", "`HARDWARE['H200'].clock_hz`"],
        ["tensor-core FLOPs per SM per clock", f"{per_sm_clock:,.0f}", "peak / (SMs × clock)"],
        [
            "exponentials (MUFU) per SM per clock",
            f"{MUFU_EXP2_PER_CLOCK}",
            "`MUFU_EXP2_PER_CLOCK` (CUDA programming guide)",
        ],
        [
            "exponentials at that clock",
            f"{h.exp_rate / 1e12:.2f} T exp2/s",
            "`HARDWARE['H200'].exp_rate`",
        ],
        [
            "matmul FLOPs per exponential, at balance",
            f"{h.peak_flops / h.exp_rate:,.0f}",
            "peak / exp2 rate",
        ],
        [
            "exponentials at the maximum SM clock",
            f"{rate / 1e12:.2f} T exp2/s",
            "`data/mufu-h200.json`",
        ],
        ["HBM bandwidth", f"{h.bandwidth / 1e12:.1f} TB/s", "datasheet"],
        ["ridge point", f"{h.ridge:,.0f} FLOP/byte", "peak / bandwidth"],
        ["L2 cache", f"{h.l2_bytes / 2**20:.0f} MiB", "`torch.cuda.get_device_properties`"],
        [
            "shared memory per SM",
            f"{h.smem_per_sm_bytes // 1024} KiB (227 KiB for one block)",
            "CUDA programming guide, compute capability 9.0",
        ],
        [
            "registers per SM",
            "65,536 × 32 bit (at most 255 per thread)",
            "CUDA programming guide, compute capability 9.0",
        ],
        [
            "threads per SM",
            "at most 2,048 (64 warps of 32)",
            "CUDA programming guide, compute capability 9.0",
        ],
    ]
    if CEILINGS.exists():
        measured = h200_measured()
        rows += [
            [
                "measured fp16 matmul",
                f"{measured.peak_flops / 1e12:,.0f} TFLOP/s",
                "`data/ceilings-h200.json`",
            ],
            [
                "measured copy bandwidth",
                f"{measured.bandwidth / 1e12:.2f} TB/s",
                "`data/ceilings-h200.json`",
            ],
        ]
    return markdown_table(["quantity", "H200", "from"], rows)


def outputs() -> dict[str, str | bytes]:
    roofs = ceilings()
    points = [RooflinePoint(f"{label} N={n}", i) for label, n, i, _, _ in naive_points()]
    return {
        "generated/decode-costs.md": decode_costs_table(),
        "generated/naive-roofline.md": naive_table(HARDWARE["H200"]),
        "generated/exp-roof.md": exp_roof_table(),
        "generated/gpu-h200.md": gpu_primer_table(),
        "figures/roofline-naive.svg": roofline_svg(
            roofs, points, title="Naive attention vs compulsory bytes (d=64, fp16)", head_dim=D
        ),
    }


if __name__ == "__main__":
    emit(outputs())

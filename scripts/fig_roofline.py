"""Tables and figure of Theory 00 (the roofline), computed by minimodel.roofline.

    python scripts/fig_roofline.py            # write docs/generated/*.md and docs/figures/*.svg
    python scripts/fig_roofline.py --check    # fail if the committed ones are stale
"""

import json

from figlib import ROOT, emit, markdown_table, render_svg

from minimodel.roofline import (
    HARDWARE,
    Ceilings,
    RooflinePoint,
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    decoder_layer_costs,
    naive_attention_bytes,
    plot_roofline,
)

MEASURED = ROOT / "data" / "ceilings-h200.json"
B, H, D = 1, 16, 64  # the synthetic shape of the N=64 / N=2048 anchors


def decode_costs_table() -> str:
    rows = []
    for context in (512, 4096, 32768):
        for batch in (1, 64):
            for hkv in (32, 8):
                c = decoder_layer_costs(4096, 32, hkv, context, batch=batch)
                rows.append([
                    f"{context:,}", batch, "MHA" if hkv == 32 else f"GQA ({hkv} kv heads)",
                    f"{c.attn_flops / c.proj_flops:.2f}",
                    f"{c.weight_bytes / 2**20:.0f} MiB", f"{c.kv_bytes / 2**20:,.0f} MiB",
                    f"{c.kv_bytes / (c.kv_bytes + c.weight_bytes):.0%}",
                ])
    header = ["context N", "batch", "heads", "attn / proj FLOPs", "weight bytes", "KV bytes",
              "KV share of bytes"]
    return markdown_table(header, rows)


def naive_points() -> list[tuple[str, int, float, float, float]]:
    """(label, N, intensity, flops, bytes) for naive and compulsory traffic at N=64 and 2048."""
    out = []
    for n in (64, 2048):
        flops = attention_flops(B, H, n, n, D)
        for label, nbytes in (("naive", naive_attention_bytes(B, H, H, n, n, D)),
                              ("compulsory", attention_min_bytes(B, H, H, n, n, D))):
            out.append((label, n, arithmetic_intensity(flops, nbytes), flops, nbytes))
    return out


def naive_table(h200: Ceilings) -> str:
    rows = []
    for label, n, intensity, flops, nbytes in naive_points():
        rate = h200.attainable(intensity)
        rows.append([label, n, f"{flops / 1e6:,.1f}", f"{nbytes / 2**20:,.3f}", f"{intensity:.1f}",
                     "memory" if intensity < h200.ridge else "compute", f"{rate / 1e12:.0f}",
                     f"{flops / rate * 1e6:.2f}"])
    header = ["bytes counted", "N", "MFLOP", "MiB moved", "I (FLOP/B)",
              f"bound (ridge {h200.ridge:.0f})", "attainable TFLOP/s", "floor time (us)"]
    return markdown_table(header, rows)


def ceilings() -> list[Ceilings]:
    roofs = [HARDWARE["H200"]]
    if MEASURED.exists():
        data = json.loads(MEASURED.read_text())["ceilings"]
        roofs.append(Ceilings(data["name"], data["peak_flops"], data["bandwidth"]))
    return roofs


def main() -> None:
    roofs = ceilings()
    points = [RooflinePoint(f"{label} N={n}", i) for label, n, i, _, _ in naive_points()]
    emit({
        "generated/decode-costs.md": decode_costs_table(),
        "generated/naive-roofline.md": naive_table(HARDWARE["H200"]),
        "figures/roofline-naive.svg": render_svg(lambda p: plot_roofline(
            roofs, points, p, title="Naive attention vs compulsory bytes (d=64, fp16)")),
    })


if __name__ == "__main__":
    main()

"""The exam's tables and figure (docs/lab/05-exam.md), from the course's predictions,
data/exam-predictions.json (`python -m bench.exam --predict`): the roofs they stand on, the
predictions of the thirteen cases, and the cases on one roofline (predictions hollow).

    python -m figures.exam            # docs/generated/exam-*.md, docs/figures/exam-roofline.svg
    python -m figures.exam --check    # fail if the committed ones are stale
"""

import json
from pathlib import Path

from bench.exam import PREDICTIONS
from figures.core import emit, markdown_table

VARIANT = {"fp8_kv_decode": 1, "verification": 2, "mixed_batch": 3, "sliding_window_prefill": 4,
           "cross_attention": 5, "mqa_decode": 6}


def load() -> dict:
    return json.loads(PREDICTIONS.read_text())


def label(case: dict) -> str:
    return f"{VARIANT[case['function']]} {case['case']}"


# --- tables --------------------------------------------------------------------------------------

def roofs_table(data: dict) -> str:
    r = data["roofs"]
    pi, beta = r["peak_flops"], r["bandwidth"]
    rows = [
        ["\\(\\pi\\), fp16 matmul", f"{pi / 1e12:.0f} TFLOP/s", "`data/ceilings-h200.json`"],
        ["\\(\\beta\\), copy", f"{beta / 1e12:.2f} TB/s", "`data/ceilings-h200.json`"],
        ["\\(R_\\text{exp}\\), exp2", f"{r['exp_rate'] / 1e12:.2f} T/s", "`data/mufu-h200.json`"],
        ["ridge \\(\\pi / \\beta\\)", f"{pi / beta:.0f} FLOP/byte", ""],
    ]
    for d, roof in r["attention_roof"].items():
        rows.append([f"\\(\\pi_d\\), attention's compute roof at \\(d = {d}\\)",
                     f"{roof / 1e12:.0f} TFLOP/s", "exp2 not overlapped"])
        rows.append([f"its ridge \\(\\pi_d / \\beta\\), \\(d = {d}\\)",
                     f"{roof / beta:.0f} FLOP/byte", ""])
    return markdown_table(["roof", "value", "from"], rows)


def prediction_rows(data: dict) -> list[list[str]]:
    """One row per case, and variant 3's 'apart' (prefill, then decode) after its cases."""
    rows, by_key = [], {(c["function"], c["case"]): c for c in data["cases"]}
    for c in data["cases"]:
        rows.append([str(VARIANT[c["function"]]), f"`{c['case']}`", f"{c['flops'] / 1e9:,.2f}",
                     f"{c['bytes'] / 1e6:,.1f}", f"{c['intensity']:,.1f}", c["roof"],
                     f"{c['time_us']:,.1f}"])
        if (c["function"], c["case"]) == ("mixed_batch", "decode"):
            parts = [by_key["mixed_batch", "prefill"], c]
            flops, nbytes = sum(p["flops"] for p in parts), sum(p["bytes"] for p in parts)
            rows.append(["3", "apart: `prefill`, then `decode`", f"{flops / 1e9:,.2f}",
                         f"{nbytes / 1e6:,.1f}", "", "each its own",
                         f"{sum(p['time_us'] for p in parts):,.1f}"])
    return rows


def predictions_table(data: dict) -> str:
    header = ["variant", "case", "F (GFLOP)", "bytes (MB)", "I (FLOP/byte)", "roof",
              "predicted µs"]
    env = data["environment"]
    return (markdown_table(header, prediction_rows(data))
            + f"\n`data/exam-predictions.json`, written by `python -m bench.exam --predict` "
              f"(commit {env['commit']}, {env['date']}) from `minimodel.roofline` and the roofs "
              "above. MB are \\(10^6\\) bytes.\n")


def errors_table(data: dict) -> str:
    """Until data/exam-h200.json exists: the predictions, the measured columns pending."""
    header = ["variant", "case", "predicted µs", "measured µs", "error", "cuDNN µs"]
    rows = [[r[0], r[1], r[-1], "pending", "pending", "pending"] for r in prediction_rows(data)]
    return ("**Measurement pending.** No case has run on the H200 yet; the predictions stand "
            "alone until `python -m bench.exam --measure` writes `data/exam-h200.json`.\n\n"
            + markdown_table(header, rows))


# --- the figure ----------------------------------------------------------------------------------

def merged_labels(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points within 5% of each other on both log axes share one label ("1 fp16; 6 gqa8")."""
    groups: list[list[tuple[float, float, str]]] = []
    for x, y, text in sorted(points):
        for g in groups:
            if abs(x / g[0][0] - 1) < 0.05 and abs(y / g[0][1] - 1) < 0.05:
                g.append((x, y, text))
                break
        else:
            groups.append([(x, y, text)])
    return [(g[0][0], g[0][1], "; ".join(sorted(t for _, _, t in g))) for g in groups]


def figure(data: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from figures.core import check_labels, render_svg
    from minimodel.roofline_plot import POINT_COLOR, ROOF_COLORS, _place_labels

    r = data["roofs"]
    pi, beta = r["peak_flops"], r["bandwidth"]
    predicted = [(c["intensity"], c["flops"] / (c["time_us"] * 1e-6) / 1e12, label(c))
                 for c in data["cases"]]
    boxes = []

    def draw(path: Path) -> None:
        plt.rcParams["svg.hashsalt"] = "minimodel"
        xs_all = [x for x, _, _ in predicted] + [pi / beta]
        lo, hi = min(xs_all) / 3, max(xs_all) * 3
        xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
        fig, ax = plt.subplots(figsize=(9, 6.5))
        color = ROOF_COLORS[True][0]
        ax.plot(xs, [min(pi, x * beta) / 1e12 for x in xs], color=color)
        styles = {"64": ":", "128": "--"}
        for d, roof in r["attention_roof"].items():
            flat = [x for x in xs if x * beta >= roof]
            ax.plot(flat, [roof / 1e12] * len(flat), styles[d], color=color, lw=1.2)
        for x, y, _ in predicted:
            ax.plot(x, y, "o", markerfacecolor="white", markeredgecolor=POINT_COLOR)
        merged = merged_labels(predicted)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi),
               ylim=(min(y for _, y, _ in predicted) / 4, pi / 1e12 * 2.5),
               xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s",
               title="The exam's cases on the H200's measured roofline: predicted (hollow)")
        ax.grid(True, which="both", alpha=0.3)
        handles = [
            Line2D([], [], color=color, label=f"{r['name']}: {pi / 1e12:.0f} TFLOP/s, "
                   f"{beta / 1e12:.2f} TB/s"),
            *(Line2D([], [], color=color, ls=styles[d], label=f"attention's compute roof, "
                     f"d = {d}: {roof / 1e12:.0f} TFLOP/s")
              for d, roof in r["attention_roof"].items()),
            Line2D([], [], ls="", marker="o", markerfacecolor="white",
                   markeredgecolor=POINT_COLOR, label="predicted: data/exam-predictions.json"),
        ]
        ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1),
                  ncol=2, frameon=False)
        fig.tight_layout()
        boxes.extend(_place_labels(ax, [(x, y) for x, y, _ in merged], [t for _, _, t in merged]))
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)

    svg = render_svg(draw)
    check_labels(boxes, "exam roofline")
    return svg


def outputs() -> dict[str, str | bytes]:
    data = load()
    return {
        "generated/exam-roofs.md": roofs_table(data),
        "generated/exam-predictions.md": predictions_table(data),
        "generated/exam-errors.md": errors_table(data),
        "figures/exam-roofline.svg": figure(data),
    }


if __name__ == "__main__":
    emit(outputs())

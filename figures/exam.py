"""The exam's tables and figure (Lab 05): the predictions (data/exam-predictions.json) and, once
it exists, the H200 measurement (data/exam-h200.json)."""

import functools
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from bench.exam import MEASURED, PREDICTIONS
from figures import core
from figures.core import legend_entry, markdown_table, measured_roofline, run_caption, spots
from minimodel.roofline_plot import POINT_COLOR

ANCHOR_COLOR = "0.45"  # the peer anchor's points: grey, beside ours in POINT_COLOR
VARIANTS = ["fp8_kv_decode", "verification", "mixed_batch", "sliding_window_prefill"]
VARIANT = {f: i for i, f in enumerate([*VARIANTS, "cross_attention", "mqa_decode"], 1)}
ERROR_BAR = 0.25  # an error past a quarter is marked, and the page explains it


load = functools.partial(core.load, PREDICTIONS.name)  # the committed predictions


def load_measured(predicted: dict, path: Path = MEASURED) -> dict | None:
    """The H200 measurement, or None while there is none; exits on a smoke run or a measurement
    of other predictions than the committed ones (or dated before them)."""
    if not path.exists():
        return None
    measured = json.loads(path.read_text())
    made, key = measured["predictions"], predicted["environment"]
    if measured.get("smoke"):
        sys.exit(f"{path.name} is a smoke run (tiny shapes): measure on the H200")
    if made["commit"] != key["commit"] or made["date"] != key["date"]:
        sys.exit(
            f"{path.name} measured the predictions of {made['commit']} ({made['date']}), "
            f"not the committed ones of {key['commit']} ({key['date']}): measure again"
        )
    if measured["environment"]["date"] < key["date"]:
        sys.exit(f"{path.name} is dated before the predictions it measures")
    return measured


def measured_us(measured: dict | None) -> dict[tuple[str, str, str], dict]:
    """(function, case, impl) -> the measured record; empty while nothing is measured."""
    return core.index(measured["cases"] if measured else [], ("function", "case", "impl"))


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
        roof_d = f"\\(\\pi_d\\), attention's compute roof at \\(d = {d}\\)"
        rows.append([roof_d, f"{roof / 1e12:.0f} TFLOP/s", "exp2 not overlapped"])
        ridge = f"its ridge \\(\\pi_d / \\beta\\), \\(d = {d}\\)"
        rows.append([ridge, f"{roof / beta:.0f} FLOP/byte", ""])
    return markdown_table("roof | value | from", rows)


def prediction_rows(data: dict) -> list[list]:
    """A row per case and variant 3's 'apart', ending with the predicted µs and (function, case)."""
    rows, by_key = [], {(c["function"], c["case"]): c for c in data["cases"]}
    for c in data["cases"]:
        sizes = [f"{c['flops'] / 1e9:,.2f}", f"{c['bytes'] / 1e6:,.1f}", f"{c['intensity']:,.1f}"]
        us, key = c["time_us"], (c["function"], c["case"])
        variant = str(VARIANT[c["function"]])
        rows.append([variant, f"`{c['case']}`", *sizes, c["roof"], f"{us:,.1f}", us, key])
        if key == ("mixed_batch", "decode"):
            parts = [by_key["mixed_batch", "prefill"], c]
            flops, nbytes, us = (sum(p[f] for p in parts) for f in ("flops", "bytes", "time_us"))
            sizes = [f"{flops / 1e9:,.2f}", f"{nbytes / 1e6:,.1f}", ""]
            sizes = [*sizes, "each its own", f"{us:,.1f}", us]
            rows.append(["3", "apart: `prefill`, then `decode`", *sizes, ("mixed_batch", "apart")])
    return rows


def predictions_table(data: dict) -> str:
    header = "variant | case | F (GFLOP) | bytes (MB) | I (FLOP/byte) | roof | predicted µs"
    env = data["environment"]
    caption = f"Commit {env['commit']}, {env['date']}; MB: \\(10^6\\) bytes."
    return markdown_table(header, [r[:-2] for r in prediction_rows(data)], caption)


def cell(rec: dict | None, predicted_us: float) -> tuple[str, str]:
    """(measured µs, error) of one implementation, or why there is none."""
    if rec is None:
        return "pending", "pending"
    if "graph_ms" not in rec:
        failed = "failed" if rec.get("check") == "FAILED" else "error"
        return ("skipped" if "skipped" in rec else failed), "n/a"
    us = rec["graph_ms"] * 1e3
    error = us / predicted_us - 1
    shown = f"{error:+.0%}"
    return f"{us:,.1f}", f"**{shown}**" if abs(error) > ERROR_BAR else shown


def errors_table(data: dict, measured: dict | None) -> str:
    header = "variant | case | predicted µs | measured µs | error | cuDNN µs | cuDNN error"
    by, rows = measured_us(measured), []
    for r in prediction_rows(data):
        predicted, (function, case) = r[-2:]
        ours, cudnn = by.get((function, case, "ours")), by.get((function, case, "sdpa_cudnn"))
        rows.append([*r[:2], f"{predicted:,.1f}", *cell(ours, predicted), *cell(cudnn, predicted)])
    if measured is None:
        return markdown_table(header, rows)  # every measured cell reads "pending"
    copy = ", ".join(f"{c / 1e12:.2f}" for c in measured["copy_bytes_per_s"])
    caption = f"{run_caption(measured['environment'])}; copy rate {copy} TB/s."
    return markdown_table(header, rows, caption)


def figure(data: dict, measured: dict | None = None) -> bytes:
    r, by = data["roofs"], measured_us(measured)
    tflops = lambda case, us: case["flops"] / (us * 1e-6) / 1e12  # its rate if it takes `us`
    label = lambda case: f"{VARIANT[case['function']]} {case['case']}"
    predicted = [(c["intensity"], tflops(c, c["time_us"]), label(c)) for c in data["cases"]]
    # a measured point: the predicted intensity (the bytes were not measured), the measured rate
    marks: dict[str, list] = {"ours": [], "sdpa_cudnn": []}  # (x, y, the predicted y)
    for c, (_, y, _) in zip(data["cases"], predicted, strict=True):
        for impl, points in marks.items():
            if "graph_ms" in (rec := by.get((c["function"], c["case"], impl), {})):
                points.append((c["intensity"], tflops(c, rec["graph_ms"] * 1e3), y))

    def draw(ax):
        for x, y, _ in predicted:
            ax.plot(x, y, "o", markerfacecolor="white", markeredgecolor=POINT_COLOR)
        for x, y, y_pred in marks["ours"]:
            ax.plot([x, x], [y_pred, y], "-", color=POINT_COLOR, lw=0.8, alpha=0.6)
            ax.plot(x, y, "o", color=POINT_COLOR)
        for x, y, _ in marks["sdpa_cudnn"]:
            ax.plot(x, y, "D", color=ANCHOR_COLOR, markersize=4)
        rates = [y for _, y, _ in predicted] + [y for m in marks.values() for _, y, _ in m]
        # predicted points within 5% of each other share one label ("1 fp16; 6 gqa8")
        groups = spots(sorted(predicted), 0.05)
        return rates, [(*g[0][:2], "; ".join(sorted(t for _, _, t in g))) for g in groups]

    styles, compute_roofs = {"64": ":", "128": "--"}, r["attention_roof"]
    text = "attention's compute roof, d = {}: {:.0f} TFLOP/s"
    flat = [(styles[d], roof, text.format(d, roof / 1e12)) for d, roof in compute_roofs.items()]
    hollow = dict(ls="", marker="o", markerfacecolor="white", markeredgecolor=POINT_COLOR)
    handles = [legend_entry(**hollow, label="predicted: data/exam-predictions.json")]
    title = "The exam's cases on the H200's measured roofline: predicted (hollow)"
    if measured is not None:
        title += ", measured (filled)"
        ours = "measured, ours: data/exam-h200.json (graph replay)"
        handles.append(legend_entry(ls="", marker="o", color=POINT_COLOR, label=ours))
        cudnn = "measured, SDPA cuDNN on contiguous tensors"
        handles.append(legend_entry(ls="", marker="D", color=ANCHOR_COLOR, ms=4, label=cudnn))
    roofs = SimpleNamespace(**r)
    style = {"figsize": (9, 6.5), "title": title, "handles": handles, "ncol": 2}
    intensities = [x for x, _, _ in predicted]
    return measured_roofline(roofs, flat, intensities, draw, name="exam roofline", **style)


def outputs() -> dict[str, str | bytes]:
    data = load()
    measured = load_measured(data)
    return {
        "generated/exam-roofs.md": roofs_table(data),
        "generated/exam-predictions.md": predictions_table(data),
        "generated/exam-errors.md": errors_table(data, measured),
        "figures/exam-roofline.svg": figure(data, measured),
    }

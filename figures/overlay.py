"""Results' roofline overlay: each kernel where the byte model predicts it and where
data/roofline-overlay-h200.json measures it, on the H200's measured roofs at N = 64 and 2048."""

import sys

from bench.bytes import CASES
from figures.bytes import dram_bytes, flops, model
from figures.core import h200_measured, legend_entry, load, markdown_table, measured_roofline, spots

ANCHORS = (64, 2048)
OVERLAY_IMPLS = ("naive", "flash", "decode", "paged")  # SDPA's FA2 is on Lab 01's table only
LABEL = {"naive": "naive", "flash": "Flash", "decode": "decode", "paged": "paged"}
COLOR = {"naive": "C3", "flash": "C2", "decode": "C0", "paged": "C4"}
MARKER = {"prefill": "o", "decode": "s"}


def points(data: dict, anchor: int) -> tuple[list[dict], list[str]]:
    """The points at one anchor, model and measured, and the cases missing from the data."""
    roof, out, missing = h200_measured(), [], []
    for case in (c for c in CASES if c.n == anchor and c.impl in OVERLAY_IMPLS):
        entry = data["cases"].get(case.id)
        if entry is None or "all" not in entry or entry.get("device_s") is None:
            missing.append(case.id)
            continue
        f = flops(case)
        i_model = f / sum(k["read"] + k["write"] for k in model(case, entry["params"]).values())
        rate_model = roof.attainable(i_model, head_dim=case.d)
        point = {"case": case, "label": f"{LABEL[case.impl]} {case.heads}"}
        point |= {"i_model": i_model, "rate_model": rate_model}
        point |= {"i_meas": f / dram_bytes(entry["all"]), "rate_meas": f / entry["device_s"]}
        out.append(point | {"device_s": entry["device_s"], "call_s": entry["call_s"]})
    return out, missing


def merge_coincident(marks: list[tuple]) -> list[tuple[float, float, str]]:
    """One label for the measured points of one phase on one spot (within 3% on both axes)."""
    out = []
    for g in spots(marks, 0.03, apart=lambda p: p["case"].phase):
        by_impl: dict[str, list[str]] = {}
        for _, _, q in g:
            by_impl.setdefault(LABEL[q["case"].impl], []).append(q["case"].heads)
        heads = list(by_impl.values())
        if all(h == heads[0] for h in heads):  # "decode, paged MQA", "naive MHA, GQA, MQA"
            label = f"{', '.join(by_impl)} {', '.join(heads[0])}"
        else:  # "naive MHA / Flash MiniGPT"
            label = " / ".join(f"{i} {', '.join(h)}" for i, h in by_impl.items())
        out.append((g[0][0], g[0][1], label))
    return out


def figure(pts: list[dict], anchor: int) -> bytes:
    roof, d = h200_measured(), 64
    exp = roof.attention_roof(d)

    def draw(ax):
        for p in pts:
            c, m = COLOR[p["case"].impl], MARKER[p["case"].phase]
            size = 4 if p["case"].impl == "paged" else 6  # paged over contiguous: both visible
            model_xy = (p["i_model"], p["rate_model"] / 1e12)
            meas_xy = (p["i_meas"], p["rate_meas"] / 1e12)
            ax.plot(*zip(model_xy, meas_xy, strict=True), "-", color=c, lw=0.8, alpha=0.6)
            ax.plot(*model_xy, m, markerfacecolor="white", markeredgecolor=c, markersize=size)
            ax.plot(*meas_xy, m, color=c, markersize=size)
        rates = [p[k] / 1e12 for p in pts for k in ("rate_model", "rate_meas")]
        return rates, merge_coincident([(p["i_meas"], p["rate_meas"] / 1e12, p) for p in pts])

    minigpt = " (MiniGPT: d = 32)" if any(p["case"].d != d for p in pts) else ""
    title = f"H200, N = {anchor}: model (hollow) and measured (filled), fp16, d = 64{minigpt}"
    hollow = {"markerfacecolor": "white", "markeredgecolor": "0.3"}
    marks = [("o", "prefill", {}), ("s", "decode (B = 64)", {})]
    marks += [("o", "model: roofline.py bytes, attainable rate", hollow)]
    marks += [("o", "measured: ncu DRAM bytes, CUDA-graph time", {})]
    handles = [legend_entry(ls="", marker=m, color="0.3", **s, label=t) for m, t, s in marks]
    ours = {k: LABEL[k] + (" (ours)" if k != "naive" else "") for k in OVERLAY_IMPLS}
    handles += [legend_entry(color=COLOR[k], label=text) for k, text in ours.items()]
    flat = [("--", exp, f"exp2 not overlapped, d = {d}: {exp / 1e12:.0f} TFLOP/s")]
    intensities = [p["i_model"] for p in pts] + [p["i_meas"] for p in pts]
    style = {"figsize": (9, 7), "title": title, "handles": handles, "ncol": 3}
    return measured_roofline(roof, flat, intensities, draw, name=f"overlay N = {anchor}", **style)


def table(pts: list[dict]) -> str:
    """ "of roof": the measured rate over the roof above the measured point."""
    roof, body = h200_measured(), []
    for p in pts:
        c, of_roof = p["case"], p["rate_meas"] / roof.attainable(p["i_meas"], head_dim=p["case"].d)
        cells = [f"{p['i_model']:,.1f}", f"{p['rate_model'] / 1e12:,.1f}", f"{p['i_meas']:,.1f}"]
        cells += [f"{p['rate_meas'] / 1e12:,.2f}", f"{of_roof:.0%}"]
        times = [f"{p['device_s'] * 1e6:,.1f}", f"{p['call_s'] * 1e6:,.1f}"]
        body.append([LABEL[c.impl], c.heads, c.phase, *cells, *times])
    header = "kernel | heads | phase | I model | roof | I meas. | TFLOP/s meas. | of roof"
    return markdown_table(f"{header} | device µs | call µs", body)


def outputs() -> dict[str, str | bytes]:
    data, out, missing = load("roofline-overlay-h200.json"), {}, []
    for anchor in ANCHORS:
        pts, gone = points(data, anchor)
        missing += gone
        if not gone:
            out[f"figures/roofline-overlay-n{anchor}.svg"] = figure(pts, anchor)
            out[f"generated/overlay-n{anchor}.md"] = table(pts)
    if missing:
        sys.exit(
            "points missing from data/roofline-overlay-h200.json (measure them on a GPU "
            f"with `python -m bench.overlay`; none is drawn in their place): {', '.join(missing)}"
        )
    return out

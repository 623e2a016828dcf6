"""The roofline overlay: naive, Flash, MQA and paged attention (MHA and GQA for contrast) on the
H200's measured roofline, at N = 64 (the verb sequence) and N = 2048. Each implementation is two
points joined by a line: where minimodel.roofline predicts it (the compulsory bytes of its
kernels, and the attainable rate at that intensity) and where the measurement puts it (its FLOPs
over the DRAM bytes Nsight Compute counted, and its FLOPs over its measured time). Draws
data/roofline-overlay-h200.json (measured by `python -m bench.overlay`) into docs/figures/
roofline-overlay-n64.svg and -n2048.svg and docs/generated/overlay-n64.md and -n2048.md.
"""

import json
import sys
from pathlib import Path

from bench.bytes import CASES, Case
from bench.core import DATA as DATA_DIR
from bench.core import ROOT
from figures.core import emit

DATA = DATA_DIR / "roofline-overlay-h200.json"
ANCHORS = (64, 2048)
OVERLAY_IMPLS = ("naive", "flash", "decode", "paged")  # SDPA's FA2 is on Lab 01's table only


# --- the model and the measured point of a case ---------------------------------------------------


def flops(case: Case) -> int:
    from minimodel.roofline import attention_flops

    return attention_flops(case.b, case.hq, case.nq, case.nk, case.d, causal=case.causal)


def model_kernels(case: Case, params: dict) -> dict[str, dict[str, int]]:
    """The byte model of a case's kernels (Lab 01's functions), with the kernel's own tiles."""
    from minimodel import roofline as r

    shape = (case.b, case.hq, case.hkv, case.nq, case.nk, case.d)
    if case.impl == "naive":
        return r.naive_attention_bytes_per_kernel(*shape, causal=case.causal)
    if case.impl in ("flash", "sdpa_flash"):
        return {
            "flash": r.flash_forward_bytes(
                *shape, block_m=params["block_m"], block_n=params["block_n"], causal=case.causal
            )
        }
    ctx = (case.b, case.hq, case.hkv, case.nk, case.d)
    if case.impl == "decode":
        return r.decode_bytes(*ctx, num_splits=params["num_splits"])
    if case.impl == "paged":
        return r.paged_decode_bytes(
            *ctx,
            block_size=params["block_size"],
            block_n=params["block_n"],
            num_splits=params["num_splits"],
        )
    raise ValueError(f"no model for {case.impl!r}")


def model_bytes(case: Case, params: dict) -> int:
    """Compulsory bytes of the whole case: every kernel's distinct reads and its writes."""
    return sum(k["read"] + k["write"] for k in model_kernels(case, params).values())


L2_WRITE = ("lts__t_sectors_srcunit_tex_op_write.sum", "lts__t_sectors_op_write.sum")


def measured_bytes(entry: dict) -> float:
    """DRAM bytes read (caches flushed before each kernel) plus the bytes written to L2: a write
    reaches DRAM only when L2 evicts it, which may be after the kernel ends."""
    metric = next(m for m in L2_WRITE if m in entry["all"])
    return entry["all"]["dram__bytes_read.sum"] + 32 * entry["all"][metric]


# --- the figure ----------------------------------------------------------------------------------

LABEL = {"naive": "naive", "flash": "Flash", "decode": "decode", "paged": "paged"}
COLOR = {"naive": "C3", "flash": "C2", "decode": "C0", "paged": "C4"}
MARKER = {"prefill": "o", "decode": "s"}


def points(data: dict, anchor: int) -> tuple[list[dict], list[str]]:
    """The overlay's points at one anchor, model and measured; and the expected cases missing
    from the data (named, never invented)."""
    from figures.core import h200_measured

    roof = h200_measured()
    out, missing = [], []
    for case in CASES:
        if case.n != anchor or case.impl not in OVERLAY_IMPLS:
            continue
        entry = data["cases"].get(case.id)
        if entry is None or "all" not in entry or entry.get("device_s") is None:
            missing.append(case.id)
            continue
        f = flops(case)
        i_model = f / model_bytes(case, entry["params"])
        out.append(
            {
                "case": case,
                "label": f"{LABEL[case.impl]} {case.heads}",
                "flops": f,
                "i_model": i_model,
                "rate_model": roof.attainable(i_model, head_dim=case.d),
                "i_meas": f / measured_bytes(entry),
                "rate_meas": f / entry["device_s"],
                "call_rate": f / entry["call_s"],
                "device_s": entry["device_s"],
                "call_s": entry["call_s"],
            }
        )
    return out, missing


def merge_coincident(marks: list[tuple]) -> list[tuple[float, float, str, bool]]:
    """One label for the points of one phase that sit on one spot (within 3% on both log axes),
    e.g. "naive MHA, GQA, MQA" or "decode, paged MQA": several labels there could not say which
    is which."""
    groups: list[list[tuple]] = []
    for mark in marks:
        x, y, p, model = mark
        for g in groups:
            gx, gy, gp, gmodel = g[0]
            if (
                gmodel == model
                and gp["case"].phase == p["case"].phase
                and abs(x / gx - 1) < 0.03
                and abs(y / gy - 1) < 0.03
            ):
                g.append(mark)
                break
        else:
            groups.append([mark])
    out = []
    for g in groups:
        x, y, _, model = g[0]
        by_impl: dict[str, list[str]] = {}
        for _, _, q, _ in g:
            by_impl.setdefault(LABEL[q["case"].impl], []).append(q["case"].heads)
        heads = list(by_impl.values())
        if all(h == heads[0] for h in heads):  # "decode, paged MQA", "naive MHA, GQA, MQA"
            label = f"{', '.join(by_impl)} {', '.join(heads[0])}"
        else:  # "naive MHA / Flash MiniGPT"
            label = " / ".join(f"{i} {', '.join(h)}" for i, h in by_impl.items())
        out.append((x, y, label, model))
    return out


def figure(pts: list[dict], anchor: int) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from figures.core import check_labels, h200_measured, render_svg
    from minimodel.roofline_plot import ROOF_COLORS, _place_labels

    roof = h200_measured()
    d = 64
    boxes = []

    def draw(path: Path) -> None:
        plt.rcParams["svg.hashsalt"] = "minimodel"
        xs_all = [p["i_model"] for p in pts] + [p["i_meas"] for p in pts] + [roof.ridge]
        lo, hi = min(xs_all) / 3, max(xs_all) * 3
        xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
        fig, ax = plt.subplots(figsize=(9, 7))
        color = ROOF_COLORS[True][0]
        ax.plot(xs, [roof.attainable(x) / 1e12 for x in xs], color=color)
        exp = roof.attention_roof(d)
        flat = [x for x in xs if x * roof.bandwidth >= exp]
        ax.plot(flat, [exp / 1e12] * len(flat), "--", color=color, lw=1.2)
        marks = []  # (x, y, label, model?, implementation)
        for p in pts:
            c = COLOR[p["case"].impl]
            m = MARKER[p["case"].phase]
            size = 4 if p["case"].impl == "paged" else 6  # paged over contiguous: both visible
            ax.plot(
                [p["i_model"], p["i_meas"]],
                [p["rate_model"] / 1e12, p["rate_meas"] / 1e12],
                "-",
                color=c,
                lw=0.8,
                alpha=0.6,
            )
            ax.plot(
                p["i_model"],
                p["rate_model"] / 1e12,
                m,
                markerfacecolor="white",
                markeredgecolor=c,
                markersize=size,
            )
            ax.plot(p["i_meas"], p["rate_meas"] / 1e12, m, color=c, markersize=size)
            marks += [
                (p["i_model"], p["rate_model"] / 1e12, p, True),
                (p["i_meas"], p["rate_meas"] / 1e12, p, False),
            ]
        merged = [m for m in merge_coincident(marks) if not m[3]]  # measured ends labelled
        anchors = [(x, y) for x, y, _, _ in merged]
        rates = [y for _, y, _, _ in marks]
        ax.set(
            xscale="log",
            yscale="log",
            xlim=(lo, hi),
            ylim=(min(rates) / 4, roof.peak_flops / 1e12 * 2.5),
            xlabel="arithmetic intensity (FLOP/byte)",
            ylabel="TFLOP/s",
            title=f"H200, N = {anchor}: model (hollow) and measured (filled), fp16, d = 64"
            + (" (MiniGPT: d = 32)" if any(p["case"].d != d for p in pts) else ""),
        )
        ax.grid(True, which="both", alpha=0.3)
        handles = [
            Line2D(
                [],
                [],
                color=color,
                label=f"{roof.name}: {roof.peak_flops / 1e12:.0f} "
                f"TFLOP/s, {roof.bandwidth / 1e12:.2f} TB/s",
            ),
            Line2D(
                [],
                [],
                color=color,
                ls="--",
                label=f"exp2 not overlapped, d = {d}: {exp / 1e12:.0f} TFLOP/s",
            ),
            Line2D([], [], ls="", marker="o", color="0.3", label="prefill"),
            Line2D([], [], ls="", marker="s", color="0.3", label="decode (B = 64)"),
            Line2D(
                [],
                [],
                ls="",
                marker="o",
                markerfacecolor="white",
                markeredgecolor="0.3",
                label="model: roofline.py bytes, attainable rate",
            ),
            Line2D(
                [],
                [],
                ls="",
                marker="o",
                color="0.3",
                label="measured: ncu DRAM bytes, CUDA-graph time",
            ),
        ] + [
            Line2D([], [], color=COLOR[k], label=LABEL[k] + (" (ours)" if k != "naive" else ""))
            for k in OVERLAY_IMPLS
        ]
        ax.legend(
            handles=handles,
            fontsize=7.5,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.1),
            ncol=3,
            frameon=False,
        )
        fig.tight_layout()
        boxes.extend(_place_labels(ax, anchors, [label for _, _, label, _ in merged]))
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)

    svg = render_svg(draw)
    check_labels(boxes, f"overlay N = {anchor}")
    return svg


# --- the table under each figure ------------------------------------------


def table(pts: list[dict]) -> str:
    from figures.core import h200_measured, markdown_table

    roof = h200_measured()
    # I in FLOP/byte, rates in TFLOP/s; "of roof": the measured rate over the roof above the
    # measured point; times per call, on the device (graph replay) and from Python
    header = [
        "kernel",
        "heads",
        "phase",
        "I model",
        "roof",
        "I meas.",
        "TFLOP/s meas.",
        "of roof",
        "device µs",
        "call µs",
    ]
    body = [
        [
            LABEL[p["case"].impl],
            p["case"].heads,
            p["case"].phase,
            f"{p['i_model']:,.1f}",
            f"{p['rate_model'] / 1e12:,.1f}",
            f"{p['i_meas']:,.1f}",
            f"{p['rate_meas'] / 1e12:,.2f}",
            f"{p['rate_meas'] / roof.attainable(p['i_meas'], head_dim=p['case'].d):.0%}",
            f"{p['device_s'] * 1e6:,.1f}",
            f"{p['call_s'] * 1e6:,.1f}",
        ]
        for p in pts
    ]
    return markdown_table(header, body)


def outputs() -> dict[str, str | bytes]:
    data = json.loads(DATA.read_text())
    out, missing = {}, []
    for anchor in ANCHORS:
        pts, gone = points(data, anchor)
        missing += gone
        if not gone:
            out[f"figures/roofline-overlay-n{anchor}.svg"] = figure(pts, anchor)
            out[f"generated/overlay-n{anchor}.md"] = table(pts)
    if missing:
        sys.exit(
            f"points missing from {DATA.relative_to(ROOT)} (measure them on a GPU with "
            f"`python -m bench.overlay`; none is drawn in their place): {', '.join(missing)}"
        )
    return out


if __name__ == "__main__":
    emit(outputs())

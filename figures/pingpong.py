"""Lab 02 part 2's schedule diagram of ping-pong between two consumer warpgroups: a model of the
order of events in made-up units, not a measurement."""

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from figures.core import legend_below, svg, write

GEMM, SOFTMAX, RESCALE = 1.0, 1.6, 0.3
TILES = 4  # key tiles per work item
COLORS = {"S": "#4f7cac", "PV": "#5b8e7d", "softmax": "#f4a259", "rescale": "#bc4b51"}


def schedule() -> list[tuple[str, str, float, float, str]]:
    """[(row, kind, start, end, label)]: rows 'WG0', 'WG1' and 'tensor cores'."""
    events: list[tuple[str, str, float, float, str]] = []
    tc_free = 0.0
    turn = {0: 0.0, 1: float("inf")}  # when each warpgroup may next issue; WG0 goes first
    ready = {0: 0.0, 1: 0.0}  # when each warpgroup's threads are free
    step = {0: -1, 1: -1}  # the last tile whose S the warpgroup issued, -1 before the prologue
    while min(step.values()) < TILES:
        # the warpgroup holding the turn issues next
        wg = min((w for w in (0, 1) if step[w] < TILES), key=lambda w: turn[w])
        issue = max(turn[wg], ready[wg])
        t = step[wg]  # issue S_{t+1} (none after the last tile) and P~_t V_t (none before t = 0)
        products = [("S", f"S{t + 1}")] if t + 1 < TILES else []
        products += [("PV", f"PV{t}")] if t >= 0 else []
        ends = {}
        for kind, label in products:
            start = max(issue, tc_free)
            tc_free = start + GEMM
            ends[kind] = tc_free
            events.append(("tensor cores", kind, start, tc_free, f"{label} (WG{wg})"))
            events.append((f"WG{wg}", "issued", issue, issue, label))
        if step[1 - wg] < TILES:  # hand the turn to the other warpgroup, unless it is done
            turn[wg], turn[1 - wg] = float("inf"), issue
        free = issue
        if "S" in ends:  # wait for S_{t+1} only, then its softmax while P~_t V_t runs
            start = max(free, ends["S"])
            free = start + SOFTMAX
            events.append((f"WG{wg}", "softmax", start, free, f"softmax S{t + 1}"))
        if "PV" in ends:  # wait for the product, then rescale acc
            start = max(free, ends["PV"])
            free = start + RESCALE
            events.append((f"WG{wg}", "rescale", start, free, ""))
        ready[wg] = free
        step[wg] = t + 1
    _check(events)
    return events


def _check(events) -> None:
    tc = sorted((s, e) for row, _, s, e, _ in events if row == "tensor cores")
    assert all(a[1] <= b[0] for a, b in zip(tc, tc[1:], strict=False)), "products overlap"
    for wg in ("WG0", "WG1"):
        # by name: its products ("PV0 (WG0)", on the tensor cores), its softmaxes ("S0")
        pv = {lab.split()[0]: (s, e) for _, k, s, e, lab in events if k == "PV" and wg in lab}
        sm = {lab[8:]: (s, e) for row, k, s, e, lab in events if (row, k) == (wg, "softmax")}
        for t in range(len(pv) - 1):
            (a, b), (s, e) = sm[f"S{t + 1}"], pv[f"PV{t}"]
            assert a < e and s < b, f"{wg}: softmax S{t + 1} does not overlap PV{t}"


def outputs() -> dict[str, str | bytes]:
    events = schedule()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    y = {"WG0": 2, "WG1": 1, "tensor cores": 0}  # the rows, top to bottom
    for row, kind, s, e, label in events:
        if kind == "issued":
            ax.plot([s, s], [y[row] - 0.38, y[row] + 0.38], color="black", lw=0.8)
            continue
        ax.barh(y[row], e - s, left=s, height=0.6, color=COLORS[kind], edgecolor="white", lw=0.8)
        if label:
            ink = "white" if kind != "softmax" else "black"
            write(ax, (s + e) / 2, y[row], label.replace(" (", "\n("), 6.5, color=ink)
    ax.set_yticks(list(y.values()), ["consumer WG0", "consumer WG1", "tensor cores"], fontsize=8)
    end = max(e for *_, e, _ in events)
    ax.set(xlim=(0, end + 0.1), xlabel="time (schedule units: one product = 1; not measured)")
    ax.xaxis.label.set_fontsize(8)
    ax.tick_params(axis="x", labelsize=7)
    title = "Schedule diagram, not a measurement: ping-pong between two consumer warpgroups, "
    ax.set_title(title + "softmax of S_(t+1) overlapping P~_t V_t", fontsize=9)
    keys = {"S": "S_(t+1) = Q K_(t+1)^T", "PV": "acc += P~_t V_t", "softmax": "softmax of S_(t+1)"}
    keys["rescale"] = "wait for P~V, rescale acc"
    handles = [Patch(facecolor=COLORS[k], label=lab) for k, lab in keys.items()]
    handles.append(plt.Line2D([], [], color="black", lw=0.8, label="issue (then the turn passes)"))
    legend_below(ax, handles, 0.3, fontsize=7, ncol=5)
    ax.spines[["top", "right"]].set_visible(False)
    return {"figures/hopper-pingpong-schedule.svg": svg(fig)}

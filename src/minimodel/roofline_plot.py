# ~/~ begin <<docs/theory/00-motivation.md#src/minimodel/roofline_plot.py>>[init]
"""The roofline figure: a device's roofs and the kernels placed on them.

Tangled from docs/theory/00-motivation.md; edit the page, not this file.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from minimodel.ceilings import Ceilings
from minimodel.roofline import _check_positive, _is_finite_positive

__all__ = ["POINT_COLOR", "ROOF_COLORS", "LabelBox", "RooflinePoint", "plot_roofline"]

# ~/~ begin <<docs/theory/00-motivation.md#roofline-plot>>[init]
@dataclass(frozen=True)
class RooflinePoint:
    """A kernel on the roofline: its intensity and, if measured, its achieved FLOP/s."""

    label: str
    intensity: float
    flops_per_s: float | None = None  # None: drawn at the attainable rate (a prediction)


# One colour per kind of roof in every figure: datasheet roofs blue, measured roofs orange (a
# second roof of the same kind takes the next colour of its tuple); points red.
ROOF_COLORS = {False: ("C0", "C4", "C8"), True: ("C1", "C5", "C9")}
POINT_COLOR = "C3"
LabelBox = tuple[str, tuple[float, float, float, float]]  # a label and its (x0, y0, x1, y1) px


def plot_roofline(
    ceilings: Sequence[Ceilings],
    points: Sequence[RooflinePoint],
    path: str | Path,
    *,
    title: str | None = None,
    head_dim: int | None = None,
) -> list[LabelBox]:
    """Draw each roof (with head_dim, its exponential roof dashed too) and the points, predicted
    ones hollow on the first roof; save to `path` (.svg/.png); return the label boxes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not ceilings:
        raise ValueError("plot_roofline needs at least one Ceilings")
    if head_dim is not None:
        _check_positive(head_dim=head_dim)
    for p in points:  # a log axis: an intensity of 0 (or a rate of 0) has no place on it
        rate_ok = p.flops_per_s is None or _is_finite_positive(p.flops_per_s)
        if not (_is_finite_positive(p.intensity) and rate_ok):
            got = f"got intensity {p.intensity!r}, flops_per_s {p.flops_per_s!r}"
            must = "intensity and flops_per_s (or None) must be finite and > 0 on log axes"
            raise ValueError(f"point {p.label!r}: {must}, {got}")
    plt.rcParams["svg.hashsalt"] = "minimodel"  # stable SVG ids: regenerated figures diff cleanly
    intensities = [p.intensity for p in points] + [c.ridge for c in ceilings]
    lo, hi = min(intensities) / 4, max(intensities) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7, 5))
    drawn = {False: 0, True: 0}
    for c in ceilings:
        palette = ROOF_COLORS[c.measured]
        color = palette[drawn[c.measured] % len(palette)]
        drawn[c.measured] += 1
        ax.plot(xs, [c.attainable(x) / 1e12 for x in xs], color=color, label=c.name)
        if head_dim is not None and c.exp_rate is not None:
            roof, label = c.attention_roof(head_dim), f"{c.name}: exp2 not overlapped, d={head_dim}"
            flat = [x for x in xs if x * c.bandwidth >= roof]
            ax.plot(flat, [roof / 1e12] * len(flat), "--", color=color, lw=1.2, label=label)
    anchors = []
    for p in points:
        rate = p.flops_per_s if p.flops_per_s is not None else ceilings[0].attainable(p.intensity)
        face = POINT_COLOR if p.flops_per_s is not None else "none"
        ax.plot(p.intensity, rate / 1e12, "o", markerfacecolor=face, markeredgecolor=POINT_COLOR)
        anchors.append((p.intensity, rate / 1e12))
    bottom = min([y for _, y in anchors] + [lo * c.bandwidth / 1e12 for c in ceilings]) / 3
    top = max(c.peak_flops for c in ceilings) / 1e12 * 1.8
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(bottom, top))
    ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s", title=title or "")
    ax.grid(True, which="both", alpha=0.3)
    # The legend below the axes, where it hides no roof and no point.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()  # before the labels: it moves the axes, and the labels are placed in pixels
    boxes = _place_labels(ax, anchors, [p.label for p in points])
    fig.savefig(path, metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)
    return boxes


# Candidate label offsets in points, nearest first: a ring around the marker, then rings further
# out (ring > 0), which get a leader line back to their point.
_NEAR = [(7, 0), (6, 6), (6, -6), (-7, 0), (-6, 6), (-6, -6), (0, 9), (0, -9)]
_AWAY = [(1, 0), (0.7, 0.7), (0.7, -0.7), (-1, 0), (-0.7, 0.7), (-0.7, -0.7), (0, 1), (0, -1)]
_LABEL_OFFSETS = [(0, offset) for offset in _NEAR] + [
    (ring, (r * dx, r * dy)) for ring, r in enumerate((18, 30, 44, 60), start=1) for dx, dy in _AWAY
]


def _boxes_overlap(a, b, pad: float = 0.5) -> bool:
    return a.x0 < b.x1 - pad and b.x0 < a.x1 - pad and a.y0 < b.y1 - pad and b.y0 < a.y1 - pad


def _place_labels(ax, anchors: list[tuple[float, float]], labels: list[str]) -> list[LabelBox]:
    """Label each point where its text stays inside the axes and overlaps no other label, no
    marker and not the legend; among such places prefer near ones that cross no drawn line."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    blocked = [ax.get_legend().get_window_extent(renderer)]
    blocked += [Bbox.from_bounds(x - 5, y - 5, 10, 10) for x, y in ax.transData.transform(anchors)]
    lines = [line for line in ax.get_lines() if line.get_linestyle() not in ("None", "none", "")]
    curves = [ax.transData.transform(line.get_xydata()) for line in lines]
    placed: list[tuple[str, Bbox]] = []
    for (x, y), text in zip(anchors, labels, strict=True):
        if not text:
            continue
        best = None
        for ring, (dx, dy) in _LABEL_OFFSETS:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            arrow = {"arrowstyle": "-", "color": "0.5", "lw": 0.6, "shrinkB": 4} if ring else None
            at = {"xytext": (dx, dy), "textcoords": "offset points", "fontsize": 8}
            ann = ax.annotate(text, (x, y), ha=ha, va=va, arrowprops=arrow, **at)
            box = ann.get_window_extent(renderer)
            inside = all(frame.contains(*corner) for corner in box.corners())
            clashes = sum(_boxes_overlap(box, b) for b in blocked + [b for _, b in placed])
            crossed = sum(
                any(box.x0 <= px <= box.x1 and box.y0 <= py <= box.y1 for px, py in curve)
                for curve in curves
            )
            score = (not inside, clashes, crossed + ring)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, ann, box)
            else:
                ann.remove()
            if score == (False, 0, 0):
                break
        placed.append((text, best[2]))
    return [(text, (float(b.x0), float(b.y0), float(b.x1), float(b.y1))) for text, b in placed]
# ~/~ end
# ~/~ end

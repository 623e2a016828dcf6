"""What the table and figure modules share. Each module's `outputs()` returns {path under docs/:
a Markdown table or SVG bytes}, from the package and the committed data under data/."""

import io
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.ticker import NullLocator
from matplotlib.transforms import Bbox

from minimodel import roofline_plot as rp
from minimodel.ceilings import Ceilings

ROOT = Path(__file__).resolve().parents[1]
DASH = "–"  # a table cell with no value


def load(name: str) -> dict:
    """A data file of data/."""
    return json.loads((ROOT / "data" / name).read_text())


def index(records: list[dict], fields: Sequence[str]) -> dict:
    """Each record under the tuple of its `fields`."""
    return {tuple(r[f] for f in fields): r for r in records}


def svg(fig, rect: tuple | None = None, laid_out: bool = False) -> bytes:
    """The figure laid out tight (within `rect` of it: room for a legend or note) unless already
    `laid_out`, as SVG bytes without a date (a redrawn figure diffs cleanly); closes it."""
    if not laid_out:
        fig.tight_layout(rect=rect)
    out = io.BytesIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def markdown_table(header: str | list[str], rows: list[list[object]], caption: str = "") -> str:
    """A Markdown table, and its one-line caption below if any; a header given as one string is
    its cells joined by " | "."""
    header = header.split(" | ") if isinstance(header, str) else header
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n" + (f"\n{caption}\n" if caption else "")


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def number(value: float | None, fmt: str = ",.1f", scale: float = 1) -> str:
    """A table cell of a number (times `scale`: 1e3 for ms in µs), or a dash where there is none."""
    return DASH if value is None else format(value * scale, fmt)


def share(flops_per_s: float, of: float) -> str:
    """A cell of a rate in TFLOP/s and its share of another: "444 (58%)"."""
    return f"{flops_per_s / 1e12:,.0f} ({flops_per_s / of:.0%})"


def ratio(a: float | None, b: float | None, fmt: str = ".2f") -> str:
    """A table cell of a / b, or a dash where either is missing (or b is 0)."""
    return DASH if a is None or not b else format(a / b, fmt)


def run_caption(env: dict) -> str:
    """A GPU run's environment for a caption: device, versions, commit and date."""
    versions = f"torch {env['torch']}, triton {env['triton']}, commit {env['commit']}"
    return f"{env['device']}, {versions}, {env['date']}"


def copy_rate(data: dict) -> float:
    """A GPU run's copy rate, bytes/s: the mean of its measurements (at its start and end)."""
    return sum(data["copy_bytes_per_s"]) / len(data["copy_bytes_per_s"])


def h200_exp_rate() -> float:
    """The H200's exponentials per second (exp2), data/mufu-h200.json."""
    return load("mufu-h200.json")["mufu"]["exp2_per_s"]


def h200_measured() -> Ceilings:
    """The H200's measured roofs (data/ceilings-h200.json) with its exponential rate."""
    c = load("ceilings-h200.json")["ceilings"]
    return Ceilings(**c, exp_rate=h200_exp_rate(), measured=True)


def merge_close_labels(points: Sequence[rp.RooflinePoint]) -> list[rp.RooflinePoint]:
    """One label ("a; b") for two predicted points within 5% in intensity (one spot on the roof)."""
    out: list[rp.RooflinePoint] = []
    for p in sorted(points, key=lambda p: p.intensity):
        last = out[-1] if out else None
        predicted = p.flops_per_s is None and last is not None and last.flops_per_s is None
        if predicted and last.label and p.intensity < 1.05 * last.intensity:
            out[-1] = rp.RooflinePoint(f"{last.label}; {p.label}", last.intensity)
            p = rp.RooflinePoint("", p.intensity)
        out.append(p)
    return out


def check_labels(boxes, figure: str) -> None:
    """Exit with a message if two placed labels overlap."""
    boxes = [(text, Bbox.from_extents(*box)) for text, box in boxes]
    pairs = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]]
    if clashes := [(a[0], b[0]) for a, b in pairs if rp._boxes_overlap(a[1], b[1])]:
        sys.exit(f"{figure}: labels overlap: {clashes}")


def spots(points: Sequence[tuple], within: float, apart=lambda item: None) -> list[list]:
    """The points [(x, y, item)] grouped by spot on log axes: a point joins the first group whose
    first point is within `within` (relative) in x and y and that `apart` does not tell apart."""
    groups: list[list] = []
    for x, y, item in points:
        close = lambda g, x=x, y=y: abs(x / g[0][0] - 1) < within and abs(y / g[0][1] - 1) < within
        near = (g for g in groups if close(g) and apart(g[0][2]) == apart(item))
        if (group := next(near, None)) is None:
            groups.append(group := [])
        group.append((x, y, item))
    return groups


def sizes_axis(ax, ticks: Sequence[int], label: str = "", base: int = 10) -> None:
    """A log x axis of sizes with a tick at each of `ticks` only ("2k" for 2,048), a light grid."""
    ax.set_xscale("log", base=base)
    ax.set_xticks(ticks, [f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)
    ax.grid(True, alpha=0.3)


# The illustrative diagrams' vocabulary: canvas, box, cells, write, arrow, legend_below.


def canvas(xlim: tuple, ylim: tuple, figsize: tuple | None = None, ax=None):
    """A diagram's axes (a new figure of `figsize`'s unless `ax` is given): no axis drawn."""
    fig, ax = plt.subplots(figsize=figsize) if ax is None else (ax.figure, ax)
    ax.set(xlim=xlim, ylim=ylim)
    ax.axis("off")
    return fig, ax


def box(ax, x: float, y: float, width: float, height: float, color="white", **style) -> None:
    """A rectangle from its lower left corner (x, y), outlined thin black unless `style` says."""
    style = {"edgecolor": "black", "lw": 0.6} | style
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, **style))


def cells(ax, x: float, y: float, width: float, height: float, colors, step=None, **style) -> None:
    """A row of boxes from (x, y), one per colour, `step` apart (their width unless given)."""
    for i, color in enumerate(colors):
        box(ax, x + i * (step or width), y, width, height, color, **style)


def write(ax, x: float, y: float, text: str, size: float = 8, **style) -> None:
    """Text centred on (x, y) unless `style` aligns it otherwise."""
    ax.text(x, y, text, **({"ha": "center", "va": "center", "fontsize": size} | style))


def arrow(ax, start: tuple, end: tuple, **style) -> None:
    style = {"arrowstyle": "-|>", "mutation_scale": 8, "lw": 0.8} | style
    ax.add_patch(FancyArrowPatch(start, end, **style))


def legend_below(ax, handles, below: float, **style) -> None:
    """The legend under the axes (`below` in axes fractions), where it hides nothing."""
    where = {"loc": "upper center", "bbox_to_anchor": (0.5, -below), "frameon": False}
    ax.legend(handles=handles, **where, **style)


def legend_entry(**style) -> Line2D:
    """A legend's entry: a line or marker of `style`, drawn nowhere."""
    return Line2D([], [], **style)


def measured_roofline(roofs, flat, intensities, draw, *, name: str, **style) -> bytes:
    """A roofline on the H200's measured roofs whose points `draw(ax)` draws, returning (their
    TFLOP/s, [(x, y, label)]); `flat` lists the flat roofs as (linestyle, FLOP/s, legend).
    `style`: figsize, title, ncol, handles (after the roofs')."""
    color, peak, beta = rp.ROOF_COLORS[True][0], roofs.peak_flops, roofs.bandwidth
    intensities = [*intensities, peak / beta]  # the ridge in view
    lo, hi = min(intensities) / 3, max(intensities) * 3
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    fig, ax = plt.subplots(figsize=style["figsize"])
    ax.plot(xs, [min(peak, x * beta) / 1e12 for x in xs], color=color)
    text = f"{roofs.name}: {peak / 1e12:.0f} TFLOP/s, {beta / 1e12:.2f} TB/s"
    handles = [legend_entry(color=color, label=text)]
    for line, roof, text in flat:
        under = [x for x in xs if x * beta >= roof]
        ax.plot(under, [roof / 1e12] * len(under), line, color=color, lw=1.2)
        handles.append(legend_entry(color=color, ls=line, label=text))
    rates, labels = draw(ax)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(min(rates) / 4, peak / 1e12 * 2.5))
    ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s", title=style["title"])
    ax.grid(True, which="both", alpha=0.3)
    legend_below(ax, handles + style["handles"], 0.1, fontsize=7.5, ncol=style["ncol"])
    fig.tight_layout()  # before the labels: they are placed in pixels
    boxes = rp._place_labels(ax, [(x, y) for x, y, _ in labels], [t for _, _, t in labels])
    check_labels(boxes, name)
    return svg(fig, laid_out=True)


def roofline_svg(ceilings, points, *, title: str, head_dim: int | None = None) -> bytes:
    """A roofline figure (Ceilings, RooflinePoints) as SVG bytes; exits if two labels overlap."""
    with tempfile.TemporaryDirectory() as tmp:
        path, points = Path(tmp) / "roofline.svg", merge_close_labels(points)
        boxes = rp.plot_roofline(ceilings, points, path, title=title, head_dim=head_dim)
        check_labels(boxes, f"roofline figure {title!r}")
        return path.read_bytes()

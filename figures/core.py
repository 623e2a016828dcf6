"""Shared plumbing for the figure and table scripts (figures/*.py).

Each script computes its outputs (Markdown tables, SVG figures) from the package and from the
committed data under data/, then either writes them or, with --check, fails if any committed file
differs from what it would write. CI runs every script with --check.

Every roofline figure goes through `roofline_svg`: one colour per kind of roof (datasheet blue,
measured orange, set in minimodel.roofline_plot.plot_roofline), labels placed apart by
plot_roofline, and a hard failure, in writing and in --check alike, if two labels still overlap.
"""

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from minimodel.ceilings import Ceilings
from minimodel.roofline_plot import LabelBox, RooflinePoint, plot_roofline

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CEILINGS = ROOT / "data" / "ceilings-h200.json"
MUFU = ROOT / "data" / "mufu-h200.json"


def render_svg(draw: Callable[[Path], object]) -> bytes:
    """Run draw(path) into a temporary .svg file and return its bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.svg"
        draw(path)
        return path.read_bytes()


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- The H200's measured roofs and its exponential rate ------------------------------------------


def h200_exp_rate() -> float:
    """The H200's exponentials per second (exp2), measured by bench.mufu (data/mufu-h200.json)."""
    return json.loads(MUFU.read_text())["mufu"]["exp2_per_s"]


def h200_measured() -> Ceilings:
    """The H200's measured roofs (data/ceilings-h200.json) with its exponential rate."""
    c = json.loads(CEILINGS.read_text())["ceilings"]
    return Ceilings(
        c["name"],
        c["peak_flops"],
        c["bandwidth"],
        l2_bytes=c.get("l2_bytes"),
        smem_per_sm_bytes=c.get("smem_per_sm_bytes"),
        source=c.get("source", ""),
        exp_rate=h200_exp_rate(),
        measured=True,
    )


# --- Roofline figures ----------------------------------------------------------------------------


def merge_close_labels(points: Sequence[RooflinePoint]) -> list[RooflinePoint]:
    """Predicted points within 5% in intensity sit on top of each other on the roof: label them
    once ("a; b") rather than twice."""
    out: list[RooflinePoint] = []
    for p in sorted(points, key=lambda p: p.intensity):
        last = out[-1] if out else None
        if (
            last is not None
            and last.label
            and p.flops_per_s is None
            and last.flops_per_s is None
            and p.intensity < 1.05 * last.intensity
        ):
            out[-1] = RooflinePoint(f"{last.label}; {p.label}", last.intensity)
            p = RooflinePoint("", p.intensity)
        out.append(p)
    return out


def check_labels(boxes: Sequence[LabelBox], figure: str) -> None:
    """Exit with a message if two placed labels overlap (the placer's own test, on its result)."""
    from matplotlib.transforms import Bbox

    from minimodel.roofline_plot import _boxes_overlap

    boxes = [(text, Bbox.from_extents(*box)) for text, box in boxes]
    clashes = [
        (a, b)
        for i, (a, box) in enumerate(boxes)
        for b, other in boxes[i + 1 :]
        if _boxes_overlap(box, other)
    ]
    if clashes:
        sys.exit(f"{figure}: labels overlap: {clashes}")


def roofline_svg(
    ceilings: Sequence[Ceilings],
    points: Sequence[RooflinePoint],
    *,
    title: str,
    head_dim: int | None = None,
) -> bytes:
    """A roofline figure as SVG bytes; exits with a message if two point labels overlap."""
    boxes: list[LabelBox] = []

    def draw(path: Path) -> None:
        boxes.extend(
            plot_roofline(
                ceilings, merge_close_labels(points), path, title=title, head_dim=head_dim
            )
        )

    svg = render_svg(draw)
    check_labels(boxes, f"roofline figure {title!r}")
    return svg


def emit(
    outputs: dict[str, str | bytes], argv: list[str] | None = None, *, root: Path = DOCS
) -> None:
    """Write outputs (paths relative to root, docs/ unless told), or with --check compare them
    and exit 1 on drift."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if committed files are stale")
    args = parser.parse_args(argv)
    stale = []
    for rel, content in outputs.items():
        data = content.encode() if isinstance(content, str) else content
        path = root / rel
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if stale:
        print(f"stale generated files (run 'make figures'): {', '.join(stale)}", file=sys.stderr)
        sys.exit(1)

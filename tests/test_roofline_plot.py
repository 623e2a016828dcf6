# ~/~ begin <<docs/theory/00-motivation.md#tests/test_roofline_plot.py>>[init]
"""Checks of the roofline figure (tangled from docs/theory/00-motivation.md)."""

import pytest

from minimodel.ceilings import HARDWARE
from minimodel.roofline_plot import RooflinePoint, plot_roofline


# ~/~ begin <<docs/theory/00-motivation.md#roofline-plot-check>>[init]
def test_plot_writes_a_figure(tmp_path):
    path = tmp_path / "roof.svg"
    plot_roofline([HARDWARE["H200"]], [RooflinePoint("naive", 30.0), RooflinePoint("x", 500, 3e14)],
                  path, head_dim=64)
    assert path.read_text().lstrip().startswith("<?xml")


def test_plot_places_labels_apart(tmp_path):
    # Three points on one spot and one nearby: their labels must not cover each other.
    points = [RooflinePoint(f"point {i}", 31.0 + i / 10) for i in range(3)]
    points += [RooflinePoint("measured", 31.0, 1e13)]
    boxes = plot_roofline([HARDWARE["H200"]], points, tmp_path / "roof.svg")
    assert [label for label, _ in boxes] == [p.label for p in points]
    for i, (_, a) in enumerate(boxes):
        for _, b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: plot_roofline([HARDWARE["H200"]], [RooflinePoint("zero", 0.0)], "x.svg"),
         r"'zero'.*intensity.*0\.0"),
        (lambda: plot_roofline([HARDWARE["H200"]], [], "x.svg", head_dim=0), r"head_dim must"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end
# ~/~ end

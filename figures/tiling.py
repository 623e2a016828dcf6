"""Lab 02's figures and table of the Flash kernel's three loop runs over the grid of query tiles x
key tiles, from minimodel.roofline.key_range (the kernels' key range in plain Python)."""

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from figures.core import box, legend_below, markdown_table, svg
from minimodel.roofline import key_range

# The worked example: a ragged shape, bottom-right aligned (N_k >= N_q), tiles of the kernel's
# d = 64 class, a window wider than a key tile and not a multiple of it.
NQ, NK, BLOCK_M, BLOCK_N, WINDOW = 250, 350, 64, 32, 100
RUNS = ("edge", "interior", "diagonal", "skipped")
COLORS = {"edge": "#f4a259", "interior": "#5b8e7d", "diagonal": "#bc4b51", "skipped": "#eeeeee"}
LEGEND = {
    "edge": "masked: the window's edge [lo, full_lo)",
    "interior": "no mask: the interior [full_lo, full_hi)",
    "diagonal": "masked: the diagonal and ragged end [full_hi, hi)",
    "skipped": "skipped: never loaded",
}


def loop_runs(bounds: tuple[int, int, int, int], block_n: int) -> dict[int, str]:
    """{key tile start: run} as the three loops visit them (each tile once, on a tile boundary)."""
    lo, full_lo, full_hi, hi = bounds
    visited: dict[int, str] = {}
    for run, (a, b) in zip(RUNS, ((lo, full_lo), (full_lo, full_hi), (full_hi, hi)), strict=False):
        for n0 in range(a, b, block_n):
            assert n0 % block_n == 0 and n0 not in visited, (bounds, run, n0)
            visited[n0] = run
    return visited


def tile_grid(nq: int, nk: int, block_m: int, block_n: int, causal: bool, window) -> list[tuple]:
    """[(i0, bounds, run of every key tile)] for every query tile."""
    grid = []
    for i0 in range(0, nq, block_m):
        bounds = key_range(i0, nq, nk, window, block_m, block_n, causal=causal)[1:]
        visited = loop_runs(bounds, block_n)
        grid.append((i0, bounds, [visited.get(n0, "skipped") for n0 in range(0, nk, block_n)]))
    return grid


def figure(causal: bool, window: int | None) -> bytes:
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for i0, _, runs in tile_grid(NQ, NK, BLOCK_M, BLOCK_N, causal, window):
        for n0, run in zip(range(0, NK, BLOCK_N), runs, strict=True):
            size = min(BLOCK_N, NK - n0), min(BLOCK_M, NQ - i0)
            box(ax, n0, i0, *size, COLORS[run], edgecolor="white", lw=1.5)
    # The visible pairs: key j is visible to query i iff i + shift - W < j <= i + shift.
    shift = NK - NQ
    rows = [0, NQ]
    right = [min(NK, i + shift + 0.5) for i in rows]
    left = [max(0, i + shift - window + 0.5) if window else 0 for i in rows]
    ax.fill_betweenx(rows, left, right, color="black", alpha=0.16, lw=0)
    ax.plot(right, rows, color="black", lw=1)
    if window:
        ax.plot(left, rows, color="black", lw=1, ls="--")
    ax.set(xlim=(0, NK), ylim=(NQ, 0), xlabel="key position j", ylabel="query row i")
    ax.set(xticks=range(0, NK + 1, BLOCK_N), yticks=[*range(0, NQ, BLOCK_M), NQ], aspect="equal")
    ax.tick_params(labelsize=7)
    mask = f"causal, window $W$ = {window}" if window else "causal"
    title = f"{mask}: $N_q$ = {NQ}, $N_k$ = {NK}, BLOCK_M = {BLOCK_M}, BLOCK_N = {BLOCK_N}"
    ax.set_title(title, fontsize=10)
    handles = [Patch(facecolor=COLORS[r], label=LEGEND[r]) for r in RUNS if window or r != "edge"]
    handles.append(Patch(facecolor="black", alpha=0.16, label="visible pairs (reference mask)"))
    legend_below(ax, handles, 0.14, fontsize=7.5, ncol=2)
    return svg(fig)


def example_table() -> str:
    rows = []
    for causal, window in ((True, None), (True, WINDOW)):
        for i0, bounds, runs in tile_grid(NQ, NK, BLOCK_M, BLOCK_N, causal, window):
            last, shift = min(i0 + BLOCK_M, NQ) - 1, NK - NQ
            counts = " / ".join(str(runs.count(r)) for r in RUNS)
            where = [f"{i0}-{last}", f"{i0 + shift}-{i0 + BLOCK_M - 1 + shift}"]
            rows.append([f"W = {window}" if window else "causal", *where, *bounds, counts])
    header = "mask | query rows | positions | `lo` | `full_lo` | `full_hi` | `hi`"
    return markdown_table(f"{header} | key tiles: edge / interior / diagonal / skipped", rows)


def outputs() -> dict[str, str | bytes]:
    return {
        "figures/flash-tiling-causal.svg": figure(True, None),
        "figures/flash-tiling-window.svg": figure(True, WINDOW),
        "generated/flash-tiling-example.md": example_table(),
    }

"""Lab 03 part 2's figure of split-KV decoding: the splits `choose_num_splits` makes of one
context, their float64 partials and the merge (asserted equal to the unsplit softmax)."""

import matplotlib.pyplot as plt
import torch
import triton

from figures.core import arrow, box, canvas, cells, svg, write
from minimodel.ceilings import HARDWARE
from minimodel.kernels import INTERPRET
from minimodel.paged_attention import choose_num_splits, decode_config

BATCH, HQ, HKV, D, ELEM_BYTES, CONTEXT = 1, 32, 8, 128, 2, 1000
GPU = "H200"
SHOWN_DIMS = 24  # components of O_u drawn
COLORS = ["#5b8e7d", "#f4a259", "#8e6c8a", "#4f7cac", "#bc4b51", "#9a8c3a"]


def splits() -> tuple[int, int, int, list[tuple[int, int]]]:
    """(block_n, num_splits, split_len, [(start, end) of each split]) for the named shape."""
    if INTERPRET:
        raise SystemExit("figures.split_kv draws the GPU's tiles: run it without TRITON_INTERPRET")
    block_n = decode_config(D, ELEM_BYTES).block_n
    n = choose_num_splits(BATCH, HKV, CONTEXT, block_n, HARDWARE[GPU].sm_count)
    split_len = triton.cdiv(triton.cdiv(CONTEXT, n), block_n) * block_n  # as _launch_decode
    ranges = [(u * split_len, min(CONTEXT, (u + 1) * split_len)) for u in range(n)]
    assert ranges[-1][1] == CONTEXT and all(a < b for a, b in ranges), ranges
    return block_n, n, split_len, ranges


def partials(ranges: list[tuple[int, int]]) -> dict:
    g = torch.Generator().manual_seed(0)
    draw = lambda *size: torch.randn(*size, generator=g, dtype=torch.float64)
    q, k, v = draw(D), draw(CONTEXT, D), draw(CONTEXT, D)
    s = k @ q / D**0.5
    partial = lambda a, b: (torch.softmax(s[a:b], 0) @ v[a:b], torch.logsumexp(s[a:b], 0).item())
    parts = [partial(a, b) for a, b in ranges]
    lse_u = torch.tensor([lse for _, lse in parts], dtype=torch.float64)
    m = lse_u.max()
    w = torch.exp(lse_u - m)
    o = sum(wu * ou for wu, (ou, _) in zip(w, parts, strict=True)) / w.sum()
    lse = (m + torch.log(w.sum())).item()
    torch.testing.assert_close(o, torch.softmax(s, 0) @ v, rtol=0, atol=1e-12)
    assert abs(lse - torch.logsumexp(s, 0).item()) < 1e-12
    return {"parts": parts, "weights": (w / w.sum()).tolist(), "o": o, "lse": lse}


def outputs() -> dict[str, str | bytes]:
    block_n, n, split_len, ranges = splits()
    p = partials(ranges)
    fig, ax = canvas((-60, CONTEXT + 20), (-0.5, 6.3), (9.6, 4.6))
    lim = max(float(abs(o[:SHOWN_DIMS]).max()) for o, _ in p["parts"])
    cmap = plt.get_cmap("RdBu_r")

    def strip(x0: float, width: float, y: float, o: torch.Tensor) -> None:
        colors = [cmap(0.5 + 0.5 * float(o[j]) / lim) for j in range(SHOWN_DIMS)]
        cells(ax, x0, y, width / SHOWN_DIMS, 0.35, colors, lw=0)
        box(ax, x0, y, width, 0.35, fill=False)

    left = {"ha": "left", "size": 7.5}
    # The context, its tiles and its splits.
    write(ax, -55, 5.55, "context\n(keys)", ha="left")
    for u, (a, b) in enumerate(ranges):
        box(ax, a, 5.3, b - a, 0.5, COLORS[u % len(COLORS)])
        write(ax, (a + b) / 2, 5.55, f"split {u}: keys {a}-{b - 1}", 7.5, color="white")
        for t in range(a + block_n, b, block_n):
            ax.plot([t, t], [5.3, 5.42], color="white", lw=0.8)
        write(ax, (a + b) / 2, 6.0, f"program (b, h_kv, {u})", 7, va="baseline")
    # Each split's partial.
    for u, ((a, b), (o_u, lse_u)) in enumerate(zip(ranges, p["parts"], strict=True)):
        x0, width, mid = a + 10, min(split_len, b - a) - 20, (a + b) / 2
        arrow(ax, (mid, 5.3), (mid, 4.2))
        strip(x0, width, 3.75, o_u)
        write(ax, x0, 3.55, f"O_{u}   lse_{u} = {lse_u:.3f}", ha="left", va="top")
        weight = f"weight e^(lse_{u} - lse) = {p['weights'][u]:.3f}"
        write(ax, x0, 3.15, weight, **left, va="top")
        arrow(ax, (mid, 2.6), (CONTEXT / 2, 1.55), color="#555555")
    write(ax, -55, 3.92, "partials\n(float32\nworkspace)", **left)
    strip(CONTEXT / 2 - 150, 300, 1.1, p["o"])
    merged = f"merged: O = sum_u e^(lse_u - lse) O_u,   lse = log sum_u e^(lse_u) = {p['lse']:.3f}"
    write(ax, CONTEXT / 2, 0.85, merged, va="top")
    write(ax, CONTEXT / 2, 0.35, "equal to the unsplit softmax to 1e-12 (float64)", 7.5, va="top")
    write(ax, -55, 1.28, "_merge_splits", **left, family="monospace")
    title = f"B = {BATCH}, H_q = {HQ}, H_kv = {HKV}, d = {D}, fp16, {CONTEXT} keys on the {GPU} "
    title += f"({HARDWARE[GPU].sm_count} SMs): choose_num_splits = {n}, BLOCK_N = {block_n}, "
    ax.set_title(title + f"split length {split_len}", fontsize=9)
    strips = f"Strips: the first {SHOWN_DIMS} of {D} components of one query row's output "
    strips += "(seeded random keys and values), blue negative, red positive; white ticks mark the "
    strips += "key tiles."
    fig.text(0.5, 0.01, strips, ha="center", fontsize=7)
    return {"figures/split-kv-merge.svg": svg(fig, rect=(0, 0.03, 1, 1))}

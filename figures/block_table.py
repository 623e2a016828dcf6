"""Theory 03's and Lab 03's figure of block tables and copy-on-write, read from a BlockManager's
tables after a fork and an append."""

import matplotlib.pyplot as plt

from figures.core import arrow, box, canvas, cells, svg, write
from minimodel.block_manager import BlockManager

NUM_BLOCKS, BLOCK_SIZE = 8, 4
PROMPT = list(range(101, 111))  # 10 tokens: two full blocks and a last block holding 2
PARENT, CHILD = 0, 1
NEW_TOKEN = 999
COLORS = {"shared": "#5b8e7d", "parent": "#f4a259", "copy": "#bc4b51", "free": "#eeeeee"}


def scenario() -> dict:
    """Run the scenario; return the tables before and after the append and the copy made."""
    bm = BlockManager(NUM_BLOCKS, BLOCK_SIZE, watermark=0.0)
    bm.allocate(PARENT, PROMPT)
    bm.mark_computed(PARENT, len(PROMPT))
    bm.fork(PARENT, CHILD)
    forked = {s: bm.block_table(s) for s in (PARENT, CHILD)}
    assert forked[PARENT] == forked[CHILD], forked
    copy = bm.append_slot(CHILD, NEW_TOKEN)
    after = {s: bm.block_table(s) for s in (PARENT, CHILD)}
    assert copy is not None and copy[0] == forked[CHILD][-1] == after[PARENT][-1], (copy, after)
    assert after[CHILD][-1] == copy[1] and after[CHILD][:-1] == after[PARENT][:-1], after
    tokens = {PARENT: len(PROMPT), CHILD: len(PROMPT) + 1}
    return {"forked": forked, "after": after, "copy": copy, "tokens": tokens}


def _panel(ax, tables: dict[int, list[int]], tokens: dict[int, int], copy, title: str) -> None:
    refs = [sum(t.count(p) for t in tables.values()) for p in range(NUM_BLOCKS)]
    canvas((-0.3, 10.3), (-0.6, 6.4), ax=ax)
    ax.set_title(title, fontsize=10)
    # Physical pool, in the middle row.
    for p in range(NUM_BLOCKS):
        kind = "shared" if refs[p] == 2 else "copy" if copy and p == copy[1] else "parent"
        x = 1.15 + p * 1.05
        box(ax, x, 2.6, 0.9, 0.8, COLORS[kind if refs[p] else "free"])
        write(ax, x + 0.45, 3.08, f"{p}", 9, weight="bold")
        write(ax, x + 0.45, 2.78, f"ref {refs[p]}" if refs[p] else "free", 6.5)
    write(ax, 0.0, 3.0, "physical\nblocks", ha="left")
    # Logical blocks of each sequence: the parent on top, the child below.
    for seq, y in ((PARENT, 5.2), (CHILD, 0.0)):
        n = tokens[seq]
        write(ax, 0.0, y + 0.4, f"seq {seq}\n{n} tokens", ha="left")
        for i, p in enumerate(tables[seq]):
            filled = min(BLOCK_SIZE, n - i * BLOCK_SIZE)
            x = 1.8 + i * 1.6
            box(ax, x, y, 1.3, 0.8)
            slots = ["#555555" if s < filled else "white" for s in range(BLOCK_SIZE)]
            cells(ax, x + 0.05, y + 0.08, 0.28, 0.22, slots, step=0.3, edgecolor="#555555", lw=0.4)
            write(ax, x + 0.65, y + 0.55, f"logical {i}", 7)
            # from the logical block's edge that faces the pool to the physical block's
            y_from, y_to = (y, 3.4) if seq == PARENT else (y + 0.8, 2.6)
            arrow(ax, (x + 0.65, y_from), (1.15 + p * 1.05 + 0.45, y_to), color="black")


def outputs() -> dict[str, str | bytes]:
    s = scenario()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    forked = f"after fork({PARENT}, {CHILD}): one set of blocks, each held twice"
    _panel(axes[0], s["forked"], {PARENT: len(PROMPT), CHILD: len(PROMPT)}, None, forked)
    src, dst = s["copy"]
    copied = f"after append_slot({CHILD}): copy-on-write, block {src} -> block {dst}"
    _panel(axes[1], s["after"], s["tokens"], s["copy"], copied)
    what = f"BlockManager({NUM_BLOCKS} blocks of {BLOCK_SIZE} slots): a {len(PROMPT)}-token "
    what += "prompt, forked, one token appended to the fork. Dark slots hold a token."
    fig.text(0.5, 0.02, what, ha="center", fontsize=8)
    return {"figures/block-table-cow.svg": svg(fig, rect=(0, 0.05, 1, 1))}

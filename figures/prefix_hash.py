"""Lab 03's figure of prefix caching's hash chain: two prompts' block names from the block
manager's own `_name`, and the cache hit a BlockManager finds for the second."""

from figures.core import arrow, box, canvas, svg, write
from minimodel.block_manager import BlockManager, _name

BLOCK_SIZE = 4
SHARED = 10  # the common prefix, not a multiple of the block size
PROMPT_A = [11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41, 42]
PROMPT_B = PROMPT_A[:SHARED] + [73, 74, 81, 82, 83]
COLORS = {"hit": "#5b8e7d", "miss": "#f4a259", "partial": "#eeeeee"}


def chain(tokens: list[int]) -> list[bytes]:
    """The names of the full blocks of `tokens`, each chained from the one before."""
    names: list[bytes] = []
    for i in range(len(tokens) // BLOCK_SIZE):
        parent = names[-1] if names else None
        names.append(_name(parent, tokens[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]))
    return names


def scenario() -> dict:
    bm = BlockManager(16, BLOCK_SIZE, watermark=0.0, enable_prefix_caching=True)
    bm.allocate(0, PROMPT_A)
    bm.mark_computed(0, len(PROMPT_A))
    bm.allocate(1, PROMPT_B)
    names = {"A": chain(PROMPT_A), "B": chain(PROMPT_B)}
    common = 0
    while common < min(map(len, names.values())) and names["A"][common] == names["B"][common]:
        common += 1
    tables = {"A": bm.block_table(0), "B": bm.block_table(1)}
    assert bm.num_cached_tokens(1) == common * BLOCK_SIZE, (bm.num_cached_tokens(1), common)
    assert tables["A"][:common] == tables["B"][:common], tables
    assert not set(tables["A"][common:]) & set(tables["B"][common:]), tables
    return {"names": names, "tables": tables, "common": common}


def outputs() -> dict[str, str | bytes]:
    s = scenario()
    fig, ax = canvas((-0.2, 12.4), (-0.9, 5.0), (9.6, 3.9))
    w, gap = 2.3, 0.55
    for row, (key, tokens, y) in enumerate((("A", PROMPT_A, 3.2), ("B", PROMPT_B, 0.4))):
        write(ax, -0.1, y + 0.55, f"prompt {key}\n{len(tokens)} tokens", ha="left")
        names, table = s["names"][key], s["tables"][key]
        for i in range((len(tokens) + BLOCK_SIZE - 1) // BLOCK_SIZE):
            block = tokens[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]
            full = len(block) == BLOCK_SIZE
            kind = "partial" if not full else "hit" if i < s["common"] else "miss"
            x = 1.4 + i * (w + gap)
            box(ax, x, y, w, 1.1, COLORS[kind])
            mid = x + w / 2
            write(ax, mid, y + 0.82, " ".join(map(str, block)), family="monospace")
            label = f"name {names[i].hex()[:8]}..." if full else "partial: no name"
            write(ax, mid, y + 0.5, label, 7.5, family="monospace")
            write(ax, mid, y + 0.2, f"physical block {table[i]}", 7)
            if full and i > 0:  # the parent's name is hashed into this one
                arrow(ax, (x - gap, y + 0.5), (x, y + 0.5))
            if row == 0 and i < s["common"]:
                arrow(ax, (mid, y), (mid, 1.5), arrowstyle="<->", ls="--", mutation_scale=10)
                write(ax, mid + 0.08, 2.35, "same name,\nsame block", 7, ha="left")
    x_div = 1.4 + (SHARED // BLOCK_SIZE) * (w + gap) + (SHARED % BLOCK_SIZE) / BLOCK_SIZE * w
    ax.plot([x_div, x_div], [1.55, 3.15], color="#bc4b51", lw=1.2, ls=":")
    ax.plot([x_div, x_div], [4.35, 4.5], color="#bc4b51", lw=1.2)
    differ = f"prompts differ from token {SHARED} on"
    write(ax, x_div, 4.6, differ, va="baseline", color="#bc4b51")
    hashed = "name_n = SHA-256(name_(n-1), token ids of block n), minimodel.block_manager._name; "
    write(ax, 6.1, -0.45, hashed + f"blocks of {BLOCK_SIZE} tokens.", 7.5, va="baseline")
    key = f"Green: the blocks B finds in the cache ({s['common'] * BLOCK_SIZE} tokens), shared "
    key += "with A; orange: full blocks whose names differ, each computed by its own prompt; grey: "
    write(ax, 6.1, -0.8, key + "partial blocks, never named.", 7.5, va="baseline")
    return {"figures/prefix-hash-chain.svg": svg(fig)}

"""Lab 03 part 2's tables and figure of the paged-attention benchmark
(data/bench-paged-decode-h200.json) and its tile sweep (data/paged-tile-sweep-h200.json)."""

import functools

import matplotlib.pyplot as plt

from figures import core
from figures.core import copy_rate, markdown_table, number, sizes_axis, svg

DECODE = {  # implementation: its column
    "paged_bs16": "ours, paged (b=16)",
    "paged_bs64": "ours, paged (b=64)",
    "contiguous": "ours, contiguous",
    "sdpa_cudnn": "SDPA cuDNN",
    "sdpa_flash": "SDPA FA2",
    "flash_attention": "Lab 02 flash_attention",
}
fmt = functools.partial(number, fmt=",.0f")  # GB/s and TFLOP/s cells
FIELDS = ("group", "b", "ctx", "hkv", "d", "window", "dtype", "impl")


load = functools.partial(core.load, "bench-paged-decode-h200.json")
index = functools.partial(core.index, fields=FIELDS)


def key(group, b, ctx, impl, hkv=8, d=128, window=None, dtype="float16"):
    return (group, b, ctx, hkv, d, window, dtype, impl)


def rate(rec: dict | None, mode: str = "graph") -> float | None:
    """GB/s of one record: 'graph' (CUDA-graph replay) or 'eager'."""
    return None if rec is None else rec.get("graph_gb_per_s" if mode == "graph" else "gb_per_s")


def case_name(r: dict) -> str:
    heads = {32: "MHA", 8: "GQA", 1: "MQA"}[r["hkv"]] if r["hq"] == 32 else f"Hq={r['hq']}"
    ctx = "1..8,192 (mixed)" if r["group"] == "mixed" else f"{r['ctx']:,}"
    extra = [heads] + ([f"W={r['window']:,}"] if r["window"] else [])
    extra += [f"d={r['d']}"] if r["d"] != 128 else []
    extra += [r["dtype"]] if r["dtype"] != "float16" else []
    return f"B={r['b']}, ctx {ctx}, " + ", ".join(extra)


def decode_table(data: dict, mode: str) -> str:
    copy, idx, rows = copy_rate(data) / 1e9, index(data["decode"]), []
    for case in dict.fromkeys(k[:-1] for k in idx):  # the shapes, in the order measured
        ours = idx[(*case, "paged_bs16")]
        rates = [fmt(rate(idx.get((*case, i)), mode)) for i in DECODE]
        share = f"{rate(ours, mode) / copy:.0%}"
        rows.append([case_name(ours), f"{ours['kv_bytes'] / 1e6:,.0f}", *rates, share])
    header = ["shape (Hq=32 unless said, d=128, fp16)", "K/V MB", *DECODE.values()]
    return markdown_table([*header, "ours b=16 ÷ copy"], rows)


FA2_BAR = ("paged_bs16", "sdpa_flash")
BARS = [  # the three bars, through the block table (b=16): (name, ours, theirs, share)
    ("B=64, ctx 4,096: ≥ 80% of copy", key("b64", 64, 4096, "paged_bs16"), None, 0.80),
    ("B=1, ctx 131,072: ≥ 70% of copy", key("b1", 1, 131072, "paged_bs16"), None, 0.70),
    ("B=1, ctx 32,768: faster than SDPA FA2", *(key("b1", 1, 32768, i) for i in FA2_BAR), None),
]


def acceptance(data: dict) -> tuple[str, dict]:
    """The bars on CUDA-graph replay and eager: the table, and {(bar, mode): met}."""
    idx, copy, rows, met = index(data["decode"]), copy_rate(data) / 1e9, [], {}
    for name, ours_key, theirs_key, share in BARS:
        cells = [name]
        for mode in ("graph", "eager"):
            ours = rate(idx[ours_key], mode)
            if share is not None:
                ok, cell = ours >= share * copy, f"{ours:,.0f} GB/s = {ours / copy:.0%} of copy"
            else:
                theirs = rate(idx[theirs_key], mode)
                cell = f"{ours:,.0f} vs {theirs:,.0f} GB/s ({ours / theirs:.2f}x)"
                ok = ours > theirs
            cells += [cell, "yes" if ok else "**no**"]
            met[(name, mode)] = ok
        rows.append(cells)
    return markdown_table("bar | CUDA graph | met | eager call | met", rows), met


def splits_table(data: dict) -> str:
    rows = []
    for r in data["splits"]:
        shape, programs = f"B={r['b']}, ctx {r['ctx']:,}", r["splits"] * r["b"] * r["hkv"]
        rates = [fmt(r.get("graph_gb_per_s")), fmt(r.get("gb_per_s"))]
        rows.append([shape, programs, r["splits"], "chosen" if r["chosen"] else "", *rates])
    header = "shape (GQA 32/8, b=16) | programs | splits |  | GB/s, graph | GB/s, eager"
    return markdown_table(header, rows)


WINDOW_CASES = (
    ("ctx 32,768, no window", key("window", 16, 32768, "paged_bs64")),
    ("ctx 32,768, W = 4,096", key("window", 16, 32768, "paged_bs64", window=4096)),
    ("ctx 4,096, no window", key("window", 16, 4096, "paged_bs64")),
)


def window_table(data: dict) -> str:
    """W=4096 at 32k against the full 32k and against a 4k context, B=16: time follows W."""
    idx = index(data["decode"])
    cells = lambda r: [f"{r['kv_bytes'] / 1e6:,.0f}", f"{r['graph_ms'] * 1e3:,.0f}", fmt(rate(r))]
    rows = [[label, *cells(idx[k])] for label, k in WINDOW_CASES]
    return markdown_table("B=16, GQA 32/8, blocks of 64 | K/V MB read | µs (graph) | GB/s", rows)


def prefill_table(data: dict) -> str:
    idx, rows = core.index(data["prefill"], ("b", "ctx", "nq", "window", "impl")), []
    for b, ctx, nq, w in dict.fromkeys(k[:-1] for k in idx):  # the shapes, in the order measured
        name = f"B={b}, {nq:,} new tokens on a {ctx:,}-key context" + (f", W={w:,}" if w else "")
        impls = ("paged_bs16", "paged_bs64", "flash_attention")
        rates = [idx[(b, ctx, nq, w, i)]["graph_tflops"] for i in impls]
        rows.append([name, *map(fmt, rates), f"{rates[1] / rates[2]:.2f}"])
    header = "prefill (Hq=32, Hkv=8, d=128, fp16, causal) | ours, paged b=16 | ours, paged b=64"
    return markdown_table(f"{header} | Lab 02 (contiguous, TMA) | b=64 ÷ Lab 02", rows)


def sweep_tables() -> dict[str, str]:
    """The tile sweep's decode (GB/s) and prefill (TFLOP/s) tables, eager timing."""
    recs = core.load("paged-tile-sweep-h200.json")["records"]
    by = {}  # (config, b, ctx, impl) -> the first such record
    for r in recs:
        by.setdefault((tuple(r["config"]), r["b"], r["ctx"], r["impl"]), r)
    tiles = lambda config: ", ".join(map(str, config))
    cols = [(64, 4096, "paged_bs16"), (64, 4096, "contiguous"), (1, 131072, "paged_bs16")]
    cols.append((1, 131072, "contiguous"))  # (b, ctx, impl) of the header's columns
    rows = []
    for cfg in dict.fromkeys(tuple(r["config"]) for r in recs if "gb_per_s" in r):
        rates = [by.get((cfg, *col), {}).get("gb_per_s") for col in cols]
        rows.append([tiles(cfg), *map(fmt, rates)])
    header = "BLOCK_N, warps, stages | B=64, 4k: paged b=16 | contiguous | B=1, 128k: paged b=16"
    prefill = [r for r in recs if "tflops" in r and r["impl"] != "flash_attention"]
    prefill = [[tiles(r["config"]), DECODE[r["impl"]], fmt(r["tflops"])] for r in prefill]
    prefill_header = "BLOCK_M, BLOCK_N, warps, stages | kernel | TFLOP/s"
    return {
        "generated/paged-tile-sweep-decode.md": markdown_table(f"{header} | contiguous", rows),
        "generated/paged-tile-sweep-prefill.md": markdown_table(prefill_header, prefill),
    }


def figure(data: dict) -> bytes:
    idx, copy = index(data["decode"]), copy_rate(data) / 1e9
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for ax, (group, b) in zip(axes, (("b1", 1), ("b64", 64)), strict=True):
        ctxs = sorted({r["ctx"] for r in data["decode"] if r["group"] == group})
        styles = {"paged_bs16": "o-", "contiguous": "s--", "sdpa_cudnn": "^-"}
        for impl, style in (styles | {"sdpa_flash": "v-", "flash_attention": "x:"}).items():
            ys = [rate(idx.get(key(group, b, c, impl))) for c in ctxs]
            width = 2.5 if impl == "paged_bs16" else 1.2
            ax.plot(ctxs, ys, style, label=DECODE[impl], linewidth=width)
        label = f"device copy, same run ({copy:,.0f} GB/s)"
        ax.axhline(copy, color="grey", linestyle="--", linewidth=1, label=label)
        ax.set(title=f"B = {b}, GQA 32/8, d = 128, fp16", ylim=(0, copy * 1.12))
        sizes_axis(ax, ctxs, "context length (keys per sequence)")
    axes[0].set_ylabel("K/V bytes read per second (GB/s), CUDA-graph replay")
    axes[0].legend(fontsize=7, loc="upper left")
    return svg(fig)


def outputs() -> dict[str, str | bytes]:
    data = load()
    return sweep_tables() | {
        "generated/paged-decode-acceptance.md": acceptance(data)[0],
        "generated/paged-decode-graph.md": decode_table(data, "graph"),
        "generated/paged-decode-eager.md": decode_table(data, "eager"),
        "generated/paged-decode-splits.md": splits_table(data),
        "generated/paged-decode-window.md": window_table(data),
        "generated/paged-prefill.md": prefill_table(data),
        "figures/paged-decode-bandwidth.svg": figure(data),
    }

"""Lab 03 part 2's table of what the paged kernels' checks cost (data/paged-checks-h200.json)."""

import functools

from figures.core import load, markdown_table, number

us = functools.partial(number, scale=1e3)  # ms as µs


def outputs() -> dict[str, str | bytes]:
    data, rows = load("paged-checks-h200.json"), []
    for kind in ("decode", "prefill"):
        for c in data[kind]:
            keys = f"{c['context']:,} keys"
            if kind == "prefill":
                keys = f"{c['new_tokens']:,} new of {c['context']:,}"
            t = {r["path"]: r for r in c["rows"]}
            checked, fast = t["checked"]["eager_ms"], t["fast"]["eager_ms"]
            graph, flags = t["fast"]["graph_ms"], t["fast+flags"]["graph_ms"]
            shape = f"{kind}, B = {c['B']}, {keys}, blocks of {c['block_size']}"
            rows.append([shape, us(checked), us(fast), us(graph), us(flags), us(checked - fast)])
    header = "shape | checked, eager µs | fast, eager µs | fast, graph µs | fast + flags, graph µs"
    return {"generated/paged-checks.md": markdown_table(f"{header} | the checks, µs", rows)}

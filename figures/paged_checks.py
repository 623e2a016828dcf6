"""Table of what the paged kernels' data checks cost (data/paged-checks-h200.json,
bench/paged_checks.py): per shape, the checked path eager, the fast path with and without error
flags, eager and under CUDA-graph replay.

    python -m figures.paged_checks            # write docs/generated/paged-checks.md
    python -m figures.paged_checks --check    # fail if it is stale
"""

import json

from figures.core import ROOT, emit, markdown_table

DATA = ROOT / "data" / "paged-checks-h200.json"


def shape(kind: str, case: dict) -> str:
    if kind == "decode":
        return f"decode, B = {case['B']}, {case['context']:,} keys, blocks of {case['block_size']}"
    return (
        f"prefill, B = {case['B']}, {case['new_tokens']:,} new of {case['context']:,}, "
        f"blocks of {case['block_size']}"
    )


def table(data: dict) -> str:
    rows = []
    for kind in ("decode", "prefill"):
        for case in data[kind]:
            t = {r["path"]: r for r in case["rows"]}
            us = lambda v: "–" if v is None else f"{v * 1e3:,.1f}"  # noqa: E731
            rows.append(
                [
                    shape(kind, case),
                    us(t["checked"]["eager_ms"]),
                    us(t["fast"]["eager_ms"]),
                    us(t["fast"]["graph_ms"]),
                    us(t["fast+flags"]["graph_ms"]),
                    us(t["checked"]["eager_ms"] - t["fast"]["eager_ms"]),
                ]
            )
    return markdown_table(
        [
            "shape",
            "checked, eager µs",
            "fast, eager µs",
            "fast, graph µs",
            "fast + flags, graph µs",
            "the checks, µs",
        ],
        rows,
    )


def outputs() -> dict[str, str | bytes]:
    return {"generated/paged-checks.md": table(json.loads(DATA.read_text()))}


if __name__ == "__main__":
    emit(outputs())

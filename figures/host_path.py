"""Tables of the host path (data/host-path-h200.json, bench/host_path.py): for each shape, every
call's host time per call, GPU time under graph replay and eager time, with the ratios to
SDPA-cuDNN measured in the same process, and which calls still refused a bad call there.

    python -m figures.host_path            # write docs/generated/host-path*.md
    python -m figures.host_path --check    # fail if they are stale
"""

import json

from figures.core import ROOT, emit, markdown_table

DATA = ROOT / "data" / "host-path-h200.json"


def shape(case: dict) -> str:
    """The shape in a few words; what the cases share (fp16, d = 128, 32 query heads; decode
    B = 1 with 8 kv heads; prefill B = 4, causal) is said once, on the page."""
    if case["kind"] == "decode":
        return f"decode, {case['keys']:,} keys"
    return f"prefill, N = {case['n']}"


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def times(data: dict) -> str:
    rows = []
    for case in data["cases"]:
        ref = next(r for r in case["records"] if r["impl"] == "sdpa_cudnn")
        for r in case["records"]:
            graph_us = None if r["gpu_ms"] is None else r["gpu_ms"] * 1e3
            rows.append(
                [
                    shape(case) if r is case["records"][0] else "",
                    f"`{r['impl']}`",
                    cell(r["host_us"]),
                    cell(graph_us),
                    cell(r["eager_us"]),
                    "–" if r["host_us"] is None else f"{r['host_us'] - ref['host_us']:+,.1f}",
                    "–" if graph_us is None else f"{r['gpu_ms'] / ref['gpu_ms']:.2f}",
                    f"{r['eager_us'] / ref['eager_us']:.2f}",
                ]
            )
    return markdown_table(
        [
            "shape",
            "call",
            "host µs",
            "graph µs",
            "eager µs",
            "host − cuDNN µs",
            "graph ÷ cuDNN",
            "eager ÷ cuDNN",
        ],
        rows,
    )


def refusals(data: dict) -> str:
    rows = [
        [
            shape(c),
            ", ".join(f"`{k}`" for k, ok in c["still_refuses"].items() if ok),
            ", ".join(f"`{k}`" for k, ok in c["still_refuses"].items() if not ok) or "none",
        ]
        for c in data["cases"]
    ]
    return markdown_table(["shape", "refused a bad call, same process", "did not"], rows)


def outputs() -> dict[str, str | bytes]:
    data = json.loads(DATA.read_text())
    return {
        "generated/host-path.md": times(data),
        "generated/host-path-refusals.md": refusals(data),
    }


if __name__ == "__main__":
    emit(outputs())

"""Tables and figure of the forward-attention benchmark (Lab 02, Results), from
data/bench-attention-h200.json (written by bench/attention.py on the H200).

    python -m figures.bench            # write docs/generated/bench-*.md and the figure
    python -m figures.bench --check    # fail if they are stale
    python -m figures.bench --data /tmp/x.json --out-dir /tmp/docs   # another data file
Tables only: the sentences about them (the environment, the bars, the shortfalls) are written
in the pages, and tests/test_data_claims.py recomputes each from the data (test_bench_*).

Two kernels of ours are in the data: Lab 02's teaching kernel (`minimodel`) and the fast Hopper
kernel (`minimodel_hopper`, issue 14); the head dim 256 rows appear when the data has them.
"""

import argparse
import json
import statistics
from pathlib import Path

from figures.core import DOCS, ROOT, emit, h200_measured, markdown_table, render_svg

DATA = ROOT / "data" / "bench-attention-h200.json"
IMPLS = [
    "minimodel",
    "minimodel_hopper",
    "sdpa_flash",
    "sdpa_cudnn",
    "flex",
    "sdpa_efficient",
    "naive",
]
OURS = ("minimodel", "minimodel_hopper")
# Table headers (short: the grid table must fit the page's column at 1280 px) and legend labels.
LABEL = {
    "minimodel": "minimodel",
    "minimodel_hopper": "Hopper",
    "sdpa_flash": "FA2",
    "sdpa_cudnn": "cuDNN",
    "flex": "Flex",
    "sdpa_efficient": "efficient",
    "naive": "naive",
}
LEGEND = {
    "minimodel": "minimodel (Lab 02)",
    "minimodel_hopper": "minimodel Hopper",
    "sdpa_flash": "SDPA FA2",
    "sdpa_cudnn": "SDPA cuDNN",
    "flex": "Flex",
    "sdpa_efficient": "SDPA efficient",
    "naive": "naive",
}
COLOR = {
    "minimodel": "C0",
    "minimodel_hopper": "C6",
    "sdpa_flash": "C1",
    "sdpa_cudnn": "C2",
    "flex": "C3",
    "sdpa_efficient": "C4",
    "naive": "C5",
}
HOPPER_BAR = 0.95  # issue 14: the Hopper kernel at least 0.95x cuDNN at d = 128, N >= 2048
BAR_D, BAR_MIN_N = 128, 2048
SHORT = (512, 1024)  # issue 14's short sequences


def load(path: Path = DATA) -> dict:
    data = json.loads(path.read_text())
    data["source"] = (
        str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    )
    return data


def index(records: list[dict]) -> dict:
    """(group, dtype, d, n, hkv, causal, window, impl) -> record."""
    return {
        (r["group"], r["dtype"], r["d"], r["n"], r["hkv"], r["causal"], r["window"], r["impl"]): r
        for r in records
    }


def grid_key(dtype: str, d: int, n: int, causal: bool) -> tuple:
    """A point of FlashAttention-2's grid (hidden 2048: H = 2048 / d), without the impl."""
    return ("fa2", dtype, d, n, 2048 // d, causal, None)


def rate(idx: dict, key: tuple, impl: str) -> float | None:
    """TFLOP/s of impl at key, or None if it was not run or failed there."""
    rec = idx.get((*key, impl))
    return rec.get("tflops") if rec else None


def tflops(x: float | None) -> str:
    return f"{x:.0f}" if x is not None else "–"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b is not None else "–"


def grid_dims(data: dict) -> list[int]:
    return sorted({r["d"] for r in data["records"] if r["group"] == "fa2"})


def grid_lengths(data: dict) -> list[int]:
    return sorted({r["n"] for r in data["records"] if r["group"] == "fa2"})


def grid_table(data: dict, dtype: str) -> str:
    idx = index(data["records"])
    rows = []
    for d in grid_dims(data):
        for causal in (False, True):
            for n in grid_lengths(data):
                key = grid_key(dtype, d, n, causal)
                r = {i: rate(idx, key, i) for i in IMPLS}
                rows.append(
                    [d, "yes" if causal else "no", f"{n:,}"]
                    + [tflops(r[i]) for i in IMPLS]
                    + [
                        ratio(r["minimodel"], r["sdpa_cudnn"]),
                        ratio(r["minimodel_hopper"], r["sdpa_cudnn"]),
                    ]
                )
    # Ratios to cuDNN only: with both kernels of ours, more columns would not fit the page (the
    # teaching kernel's ratios to FA2 and Flex are Lab 02's acceptance table and shortfalls).
    header = (
        ["d", "causal", "N"] + [LABEL[i] for i in IMPLS] + ["minimodel ÷ cuDNN", "Hopper ÷ cuDNN"]
    )
    return markdown_table(header, rows)


def bar_points(data: dict) -> list[tuple]:
    """The points of both bars: d = 128, N >= 2048 of the grid, fp16 and bf16, causal and not."""
    return [
        grid_key(dtype, BAR_D, n, causal)
        for dtype in ("float16", "bfloat16")
        for causal in (False, True)
        for n in grid_lengths(data)
        if n >= BAR_MIN_N
    ]


def acceptance(data: dict) -> str:
    """Lab 02's bar for the teaching kernel: >= 1.3x SDPA FA2 and faster than Flex."""
    idx = index(data["records"])
    rows = []
    for key in bar_points(data):
        fa2, flex, ours = (rate(idx, key, i) for i in ("sdpa_flash", "flex", "minimodel"))
        ok = ours >= 1.3 * fa2 and ours > flex
        rows.append(
            [
                key[1],
                yes(key[5]),
                f"{key[3]:,}",
                f"{ours:.0f}",
                f"{ours / fa2:.2f}",
                f"{ours / flex:.2f}",
                "yes" if ok else "**no**",
            ]
        )
    header = [
        "dtype",
        "causal",
        "N",
        "minimodel TFLOP/s",
        "÷ SDPA FA2 (≥ 1.30)",
        "÷ Flex (> 1)",
        "met",
    ]
    return markdown_table(header, rows)


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def acceptance_hopper(data: dict) -> str:
    """Issue 14's bar: minimodel_hopper / sdpa_cudnn >= 0.95 at every point of bar_points."""
    idx = index(data["records"])
    rows = []
    for key in bar_points(data):
        ours, cudnn = rate(idx, key, "minimodel_hopper"), rate(idx, key, "sdpa_cudnn")
        both = ours is not None and cudnn is not None
        met = "yes" if both and ours >= HOPPER_BAR * cudnn else "**no**" if both else "not measured"
        rows.append(
            [
                key[1],
                yes(key[5]),
                f"{key[3]:,}",
                tflops(cudnn),
                tflops(HOPPER_BAR * cudnn if cudnn is not None else None),
                tflops(ours),
                ratio(ours, cudnn),
                met,
            ]
        )
    header = [
        "dtype",
        "causal",
        "N",
        "cuDNN TFLOP/s",
        f"{HOPPER_BAR:.2f} × cuDNN",
        "Hopper TFLOP/s",
        "÷ cuDNN",
        f"met (≥ {HOPPER_BAR:.2f})",
    ]
    return markdown_table(header, rows)


def shortfalls(data: dict) -> str:
    """Every point of the grid where the teaching kernel is under 1.3x FA2 or not faster than
    Flex: the honest half of the results."""
    idx = index(data["records"])
    under = []
    order = lambda kv: (kv[0][1], kv[0][2], kv[0][5], kv[0][3])  # noqa: E731 - dtype, d, causal, N
    for (group, dtype, d, n, hkv, causal, window, impl), rec in sorted(idx.items(), key=order):
        if group != "fa2" or impl != "minimodel" or "tflops" not in rec:
            continue
        key = (group, dtype, d, n, hkv, causal, window)
        ours, fa2, flex = rec["tflops"], rate(idx, key, "sdpa_flash"), rate(idx, key, "flex")
        if (fa2 is not None and ours < 1.3 * fa2) or (flex is not None and ours <= flex):
            under.append(
                [
                    dtype,
                    d,
                    yes(causal),
                    f"{n:,}",
                    f"{ours:.0f}",
                    ratio(ours, fa2),
                    ratio(ours, flex),
                ]
            )
    return markdown_table(["dtype", "d", "causal", "N", "TFLOP/s", "÷ FA2", "÷ Flex"], under)


def hopper_short(data: dict) -> str:
    """The Hopper kernel against cuDNN at N = 512 and 1,024, beside the teaching kernel's ratio."""
    idx = index(data["records"])
    rows = []
    for dtype in ("float16", "bfloat16"):
        for d in grid_dims(data):
            for causal in (False, True):
                for n in SHORT:
                    key = grid_key(dtype, d, n, causal)
                    ours, cudnn = rate(idx, key, "minimodel_hopper"), rate(idx, key, "sdpa_cudnn")
                    rows.append(
                        [
                            dtype,
                            d,
                            yes(causal),
                            f"{n:,}",
                            tflops(ours),
                            tflops(cudnn),
                            ratio(ours, cudnn),
                            ratio(rate(idx, key, "minimodel"), cudnn),
                        ]
                    )
    header = [
        "dtype",
        "d",
        "causal",
        "N",
        "Hopper TFLOP/s",
        "cuDNN TFLOP/s",
        "Hopper ÷ cuDNN",
        "minimodel ÷ cuDNN",
    ]
    return markdown_table(header, rows)


EXP_IMPLS = ["minimodel", "minimodel_hopper", "sdpa_cudnn", "sdpa_flash"]


def exp_lengths(data: dict) -> list[int]:
    return [n for n in grid_lengths(data) if n >= 2048]


def exp_roof_table(data: dict) -> str:
    """Each implementation's median rate (fp16, no mask, N >= 2048) against the exponential
    roof of a kernel that does not overlap exponentials and matrix products
    (minimodel.roofline: Ceilings.attention_roof on the H200's measured roofs)."""
    roof = h200_measured()
    idx = index(data["records"])
    lengths = exp_lengths(data)
    rows = []
    for d in (64, 128):
        cap = roof.attention_roof(d)
        cells = []
        for impl in EXP_IMPLS:
            rates = [
                x
                for n in lengths
                if (x := rate(idx, grid_key("float16", d, n, False), impl)) is not None
            ]
            if len(rates) < len(lengths):
                cells.append(f"ran at {len(rates)} of {len(lengths)}")
            else:
                med = statistics.median(rates)
                cells.append(f"{med:.0f} ({med * 1e12 / cap:.0%})")
        rows.append(
            [
                d,
                f"{cap / 1e12:.0f} ({cap / roof.peak_flops:.0%})",
                f"{roof.attention_roof(d, overlapped=True) / 1e12:.0f}",
                *cells,
            ]
        )
    header = [
        "d",
        "cap, not overlapped (of matmul)",
        "cap, overlapped",
        *(LABEL[i] for i in EXP_IMPLS),
    ]
    return markdown_table(header, rows)


def gqa_window_pairs(data: dict) -> list[tuple[str, dict, dict]]:
    """(comparison, baseline record, variant record): GQA against MHA at the same FLOPs, and a
    4,096-key window against full causal attention."""
    idx = index(data["records"])
    pairs = [
        (
            f"GQA vs MHA, N={n:,}, {'causal' if causal else 'non-causal'}",
            idx[("gqa", "float16", 128, n, 32, causal, None, "minimodel")],
            idx[("gqa", "float16", 128, n, 8, causal, None, "minimodel")],
        )
        for n in (2048, 8192)
        for causal in (False, True)
    ]
    return pairs + [
        (
            "window W=4,096 vs full causal, N=16,384",
            idx[("window", "float16", 128, 16384, 16, True, None, "minimodel")],
            idx[("window", "float16", 128, 16384, 16, True, 4096, "minimodel")],
        )
    ]


def gqa_window_table(data: dict) -> str:
    rows = [
        [
            what,
            f"{a['ms']:.3f}",
            f"{b['ms']:.3f}",
            f"{b['ms'] / a['ms']:.2f}",
            f"{b['flops'] / a['flops']:.2f}",
            f"{a['tflops']:.0f} → {b['tflops']:.0f}",
        ]
        for what, a, b in gqa_window_pairs(data)
    ]
    header = [
        "comparison (fp16, d=128, minimodel)",
        "baseline ms",
        "variant ms",
        "time ratio",
        "FLOP ratio",
        "TFLOP/s",
    ]
    return markdown_table(header, rows)


def spreads(data: dict) -> list[float]:
    """Relative difference between the two timing rounds of every measurement, sorted."""
    return sorted(
        abs(a - b) / min(a, b)
        for a, b in (r["ms_runs"] for r in data["records"] if len(r.get("ms_runs", [])) == 2)
    )


def median_spread(data: dict) -> float:
    s = spreads(data)
    return s[len(s) // 2]


def draw(data: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "minimodel"
    idx = index(data["records"])
    lengths, dims = grid_lengths(data), grid_dims(data)
    fig, axes = plt.subplots(
        len(dims), 2, figsize=(10, 0.6 + 3.5 * len(dims)), sharex=True, squeeze=False
    )
    for row, d in enumerate(dims):
        for col, causal in enumerate((False, True)):
            ax = axes[row][col]
            for impl in IMPLS:
                ys = [rate(idx, grid_key("float16", d, n, causal), impl) for n in lengths]
                ys = [float("nan") if y is None else y for y in ys]
                ax.plot(
                    lengths,
                    ys,
                    "o-",
                    label=LEGEND[impl],
                    color=COLOR[impl],
                    linewidth=2.5 if impl in OURS else 1.2,
                )
            ax.axhline(
                data["ceilings"]["peak_flops"] / 1e12,
                color="grey",
                linestyle="--",
                linewidth=1,
                label="measured fp16 matmul",
            )
            ax.set(
                xscale="log", title=f"d={d}, {'causal' if causal else 'non-causal'}", ylim=(0, None)
            )
            ax.set_xticks(lengths, [f"{n // 1024}k" if n >= 1024 else str(n) for n in lengths])
            ax.grid(True, alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s (fp16)")
            if row == len(dims) - 1:
                ax.set_xlabel("sequence length N (16k tokens per batch)")
    # One legend for all panels, below them: inside a panel it would cover some curve.
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def outputs(path: Path = DATA) -> dict[str, str | bytes]:
    data = load(path)
    return {
        "generated/bench-grid-float16.md": grid_table(data, "float16"),
        "generated/bench-grid-bfloat16.md": grid_table(data, "bfloat16"),
        "generated/bench-acceptance.md": acceptance(data),
        "generated/bench-acceptance-hopper.md": acceptance_hopper(data),
        "generated/bench-exp-roof.md": exp_roof_table(data),
        "generated/bench-gqa-window.md": gqa_window_table(data),
        "generated/bench-shortfalls.md": shortfalls(data),
        "generated/bench-hopper-short.md": hopper_short(data),
        "figures/bench-flash.svg": render_svg(lambda p: draw(data, p)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if committed files are stale")
    parser.add_argument("--data", type=Path, default=DATA, help="the benchmark's data file")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=DOCS,
        help="where generated/ and figures/ go (docs/ unless told)",
    )
    args = parser.parse_args()
    emit(outputs(args.data), ["--check"] if args.check else [], root=args.out_dir)

"""Tables and figure of the forward-attention benchmark (Lab 02, Results), from
data/bench-attention-h200.json (written by scripts/bench_attention.py on the H200).

    python scripts/fig_bench.py            # write docs/generated/bench-*.md and the figure
    python scripts/fig_bench.py --check    # fail if they are stale
It also fails if the data stops supporting what the pages say about it.
"""

import json

from figlib import ROOT, emit, markdown_table, render_svg

DATA = ROOT / "data" / "bench-attention-h200.json"
IMPLS = ["minimodel", "sdpa_flash", "sdpa_cudnn", "flex", "sdpa_efficient", "naive"]
LABEL = {"minimodel": "minimodel", "sdpa_flash": "SDPA FA2", "sdpa_cudnn": "SDPA cuDNN",
         "flex": "Flex", "sdpa_efficient": "SDPA efficient", "naive": "naive"}


def load() -> dict:
    return json.loads(DATA.read_text())


def index(records: list[dict]) -> dict:
    """(group, dtype, d, n, hkv, causal, window, impl) -> record."""
    return {(r["group"], r["dtype"], r["d"], r["n"], r["hkv"], r["causal"], r["window"],
             r["impl"]): r for r in records}


def tflops(rec: dict | None) -> str:
    return f"{rec['tflops']:.0f}" if rec and "tflops" in rec else "–"


def grid_table(data: dict, dtype: str) -> str:
    idx = index(data["records"])
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for n in sorted({r["n"] for r in data["records"] if r["group"] == "fa2"}):
                recs = {i: idx.get(("fa2", dtype, d, n, 2048 // d, causal, None, i)) for i in IMPLS}
                ours = recs["minimodel"]["tflops"]
                rows.append([d, "yes" if causal else "no", f"{n:,}"]
                            + [tflops(recs[i]) for i in IMPLS]
                            + [f"{ours / recs['sdpa_flash']['tflops']:.2f}",
                               f"{ours / recs['flex']['tflops']:.2f}",
                               f"{ours / recs['sdpa_cudnn']['tflops']:.2f}"])
    header = (["d", "causal", "N"] + [LABEL[i] for i in IMPLS]
              + ["÷ FA2", "÷ Flex", "÷ cuDNN"])
    return markdown_table(header, rows)


def acceptance(data: dict) -> tuple[str, list[str]]:
    """The issue's bar at d=128, N >= 2048: >= 1.3x SDPA FA2 and faster than Flex."""
    idx = index(data["records"])
    rows, failures = [], []
    for dtype in ("float16", "bfloat16"):
        for causal in (False, True):
            for n in (2048, 4096, 8192, 16384):
                get = lambda i: idx[("fa2", dtype, 128, n, 16, causal, None, i)]["tflops"]  # noqa: B023, E731
                fa2, flex, ours = get("sdpa_flash"), get("flex"), get("minimodel")
                ok = ours >= 1.3 * fa2 and ours > flex
                if not ok:
                    failures.append(f"{dtype} causal={causal} N={n}")
                rows.append([dtype, "yes" if causal else "no", f"{n:,}", f"{ours:.0f}",
                             f"{ours / fa2:.2f}", f"{ours / flex:.2f}", "yes" if ok else "**no**"])
    header = ["dtype", "causal", "N", "minimodel TFLOP/s", "÷ SDPA FA2 (≥ 1.30)", "÷ Flex (> 1)",
              "met"]
    return markdown_table(header, rows), failures


def accuracy_failures(data: dict) -> list[str]:
    """Each of our outputs was checked against the float32 reference before it was timed; its
    max-abs error must be at most 2x that of PyTorch's own fused kernel on the same inputs and
    dtype (FlashAttention-2's; FlexAttention's for windows, which SDPA cannot run). No absolute
    floor: in bf16 both errors are near 8e-3 at the largest shapes, and the ratio is what
    tells a kernel bug from bf16's rounding."""
    idx = index(data["records"])
    bad = []
    for key, rec in idx.items():
        if key[-1] != "minimodel":
            continue
        candidates = (idx.get((*key[:-1], impl), {}) for impl in ("sdpa_flash", "flex"))
        theirs = next((c["max_err"] for c in candidates if "max_err" in c), None)
        if theirs is None:
            bad.append(f"no PyTorch kernel to compare errors with at {key}")
        elif not rec["max_err"] <= 2 * theirs:
            bad.append(f"max_err {rec['max_err']:.1e} > 2 x {theirs:.1e} at {key}")
    return bad


def shortfalls(data: dict) -> str:
    """Every point of the grid where the kernel is under 1.3x FA2, not faster than Flex, or
    slower than cuDNN: the honest half of the results."""
    idx = index(data["records"])
    noise = median_spread(data)
    under, cudnn_ahead, points = [], 0, 0
    order = lambda kv: (kv[0][1], kv[0][2], kv[0][5], kv[0][3])  # noqa: E731 - dtype, d, causal, N
    for (group, dtype, d, n, hkv, causal, window, impl), rec in sorted(idx.items(), key=order):
        if group != "fa2" or impl != "minimodel":
            continue
        get = lambda i: idx[(group, dtype, d, n, hkv, causal, window, i)]["tflops"]  # noqa: B023, E731
        ours, points = rec["tflops"], points + 1
        cudnn_ahead += get("sdpa_cudnn") > ours * (1 + noise)
        if ours < 1.3 * get("sdpa_flash") or ours <= get("flex"):
            under.append([dtype, d, "yes" if causal else "no", f"{n:,}", f"{ours:.0f}",
                          f"{ours / get('sdpa_flash'):.2f}", f"{ours / get('flex'):.2f}"])
    lines = [f"cuDNN is faster than minimodel at {cudnn_ahead} of the {points} points of the grid "
             f"by more than the noise floor ({noise:.1%}, the median spread between rounds); "
             "the others are ties within it.\n"]
    if under:
        lines += ["\nPoints under 1.3x FlashAttention-2 or not faster than Flex:\n\n",
                  markdown_table(["dtype", "d", "causal", "N", "TFLOP/s", "÷ FA2", "÷ Flex"],
                                 under)]
    return "".join(lines)


def gqa_window_table(data: dict) -> tuple[str, list[str]]:
    idx = index(data["records"])
    rows, failures = [], []
    for n in (2048, 8192):
        for causal in (False, True):
            mha = idx[("gqa", "float16", 128, n, 32, causal, None, "minimodel")]
            gqa = idx[("gqa", "float16", 128, n, 8, causal, None, "minimodel")]
            if gqa["ms"] > mha["ms"]:
                failures.append(f"GQA slower than MHA at N={n} causal={causal}")
            rows.append([f"GQA vs MHA, N={n:,}, {'causal' if causal else 'non-causal'}",
                         f"{mha['ms']:.3f}", f"{gqa['ms']:.3f}", f"{gqa['ms'] / mha['ms']:.2f}",
                         "1.00", f"{mha['tflops']:.0f} → {gqa['tflops']:.0f}"])
    full = idx[("window", "float16", 128, 16384, 16, True, None, "minimodel")]
    win = idx[("window", "float16", 128, 16384, 16, True, 4096, "minimodel")]
    if not win["ms"] < 0.6 * full["ms"]:
        failures.append("the window run does not save work")
    rows.append(["window W=4,096 vs full causal, N=16,384", f"{full['ms']:.3f}",
                 f"{win['ms']:.3f}", f"{win['ms'] / full['ms']:.2f}",
                 f"{win['flops'] / full['flops']:.2f}",
                 f"{full['tflops']:.0f} → {win['tflops']:.0f}"])
    header = ["comparison (fp16, d=128, minimodel)", "baseline ms", "variant ms", "time ratio",
              "FLOP ratio", "TFLOP/s"]
    return markdown_table(header, rows), failures


def spreads(data: dict) -> list[float]:
    """Relative difference between the two timing rounds of every measurement, sorted."""
    return sorted(abs(a - b) / min(a, b) for a, b in
                  (r["ms_runs"] for r in data["records"] if len(r.get("ms_runs", [])) == 2))


def median_spread(data: dict) -> float:
    s = spreads(data)
    return s[len(s) // 2]


def environment_line(data: dict) -> str:
    env, ceil = data["environment"], data["ceilings"]
    spread = spreads(data)
    return (f"Measured on an {env['device']} (torch {env['torch']}, triton {env['triton']}, "
            f"commit `{env['commit']}`, {env['date'][:10]}); {data['timing']}. The two rounds "
            f"of a measurement differ by {spread[len(spread) // 2]:.1%} at the median and "
            f"{spread[-1]:.1%} at worst. Measured ceilings of the same machine: "
            f"{ceil['peak_flops'] / 1e12:.0f} TFLOP/s fp16 matmul, "
            f"{ceil['bandwidth'] / 1e9:,.0f} GB/s copy (`data/ceilings-h200.json`).\n")


def draw(data: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "minimodel"
    idx = index(data["records"])
    lengths = sorted({r["n"] for r in data["records"] if r["group"] == "fa2"})
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for row, d in enumerate((64, 128)):
        for col, causal in enumerate((False, True)):
            ax = axes[row][col]
            for impl in IMPLS:
                ys = [idx[("fa2", "float16", d, n, 2048 // d, causal, None, impl)].get("tflops")
                      for n in lengths]
                ax.plot(lengths, ys, "o-", label=LABEL[impl],
                        linewidth=2.5 if impl == "minimodel" else 1.2)
            ax.axhline(data["ceilings"]["peak_flops"] / 1e12, color="grey", linestyle="--",
                       linewidth=1, label="measured fp16 matmul")
            ax.set(xscale="log", title=f"d={d}, {'causal' if causal else 'non-causal'}",
                   ylim=(0, None))
            ax.set_xticks(lengths, [f"{n // 1024}k" if n >= 1024 else str(n) for n in lengths])
            ax.grid(True, alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s (fp16)")
            if row == 1:
                ax.set_xlabel("sequence length N (16k tokens per batch)")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    data = load()
    accept, failures = acceptance(data)
    failures += accuracy_failures(data)
    extra, failures2 = gqa_window_table(data)
    # The pages say the bar is met everywhere and GQA/window behave: fail loudly if the data
    # stops saying so, rather than let the prose drift from it.
    if failures or failures2:
        raise SystemExit(f"the benchmark data contradicts the pages: {failures + failures2}")
    emit({
        "generated/bench-environment.md": environment_line(data),
        "generated/bench-grid-float16.md": grid_table(data, "float16"),
        "generated/bench-grid-bfloat16.md": grid_table(data, "bfloat16"),
        "generated/bench-acceptance.md": accept,
        "generated/bench-gqa-window.md": extra,
        "generated/bench-shortfalls.md": shortfalls(data),
        "figures/bench-flash.svg": render_svg(lambda p: draw(data, p)),
    })


if __name__ == "__main__":
    main()

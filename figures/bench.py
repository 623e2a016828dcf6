"""Tables and figure of the forward-attention benchmark (Lab 02, Results), from
data/bench-attention-h200.json (written by bench/attention.py on the H200).

    python -m figures.bench            # write docs/generated/bench-*.md and the figure
    python -m figures.bench --check    # fail if they are stale
    python -m figures.bench --data /tmp/x.json --out-dir /tmp/docs   # another data file
It also fails if the data stops supporting what the pages say about it.

Two kernels of ours are in the data: Lab 02's teaching kernel (`minimodel`) and the fast Hopper
kernel (`minimodel_hopper`, issue 14). Every table works without the second (a data file from
before it existed) and says "not measured" where it would be; the head dim 256 rows appear when
the data has them.
"""

import argparse
import json
import statistics
from pathlib import Path

from figures.core import DOCS, ROOT, emit, h200_exp_rate, h200_measured, markdown_table, render_svg

DATA = ROOT / "data" / "bench-attention-h200.json"
IMPLS = ["minimodel", "minimodel_hopper", "sdpa_flash", "sdpa_cudnn", "flex", "sdpa_efficient",
         "naive"]
OURS = ("minimodel", "minimodel_hopper")
# Table headers (short: the grid table must fit the page's column at 1280 px) and legend labels.
LABEL = {"minimodel": "minimodel", "minimodel_hopper": "Hopper", "sdpa_flash": "FA2",
         "sdpa_cudnn": "cuDNN", "flex": "Flex", "sdpa_efficient": "efficient", "naive": "naive"}
LEGEND = {"minimodel": "minimodel (Lab 02)", "minimodel_hopper": "minimodel Hopper",
          "sdpa_flash": "SDPA FA2", "sdpa_cudnn": "SDPA cuDNN", "flex": "Flex",
          "sdpa_efficient": "SDPA efficient", "naive": "naive"}
COLOR = {"minimodel": "C0", "minimodel_hopper": "C6", "sdpa_flash": "C1", "sdpa_cudnn": "C2",
         "flex": "C3", "sdpa_efficient": "C4", "naive": "C5"}
HOPPER_BAR = 0.95  # issue 14: the Hopper kernel at least 0.95x cuDNN at d = 128, N >= 2048
BAR_D, BAR_MIN_N = 128, 2048
SHORT = (512, 1024)  # issue 14's short sequences


def load(path: Path = DATA) -> dict:
    data = json.loads(path.read_text())
    data["source"] = (str(path.resolve().relative_to(ROOT))
                      if path.resolve().is_relative_to(ROOT) else str(path))
    return data


def index(records: list[dict]) -> dict:
    """(group, dtype, d, n, hkv, causal, window, impl) -> record."""
    return {(r["group"], r["dtype"], r["d"], r["n"], r["hkv"], r["causal"], r["window"],
             r["impl"]): r for r in records}


def grid_key(dtype: str, d: int, n: int, causal: bool) -> tuple:
    """A point of FlashAttention-2's grid (hidden 2048: H = 2048 / d), without the impl."""
    return ("fa2", dtype, d, n, 2048 // d, causal, None)


def rate(idx: dict, key: tuple, impl: str) -> float | None:
    """TFLOP/s of impl at key, or None if it was not run or failed there."""
    rec = idx.get((*key, impl))
    return rec.get("tflops") if rec else None


def measured(data: dict, impl: str) -> bool:
    return any(r["impl"] == impl for r in data["records"])


def not_measured(data: dict, impl: str) -> str:
    return f"not measured (no `{impl}` records in `{data['source']}`)"


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
                rows.append([d, "yes" if causal else "no", f"{n:,}"]
                            + [tflops(r[i]) for i in IMPLS]
                            + [ratio(r["minimodel"], r["sdpa_cudnn"]),
                               ratio(r["minimodel_hopper"], r["sdpa_cudnn"])])
    # Ratios to cuDNN only: with both kernels of ours, more columns would not fit the page (the
    # teaching kernel's ratios to FA2 and Flex are Lab 02's acceptance table and shortfalls).
    header = ["d", "causal", "N"] + [LABEL[i] for i in IMPLS] + ["minimodel ÷ cuDNN",
                                                                 "Hopper ÷ cuDNN"]
    note = ("" if measured(data, "minimodel_hopper") else
            f"\nHopper, the fast Hopper kernel: {not_measured(data, 'minimodel_hopper')}.\n")
    return markdown_table(header, rows) + note


def acceptance(data: dict) -> tuple[str, list[str]]:
    """Lab 02's bar for the teaching kernel at d=128, N >= 2048: >= 1.3x SDPA FA2 and faster
    than Flex."""
    idx = index(data["records"])
    rows, failures = [], []
    for dtype in ("float16", "bfloat16"):
        for causal in (False, True):
            for n in (2048, 4096, 8192, 16384):
                key = grid_key(dtype, 128, n, causal)
                fa2, flex, ours = (rate(idx, key, i) for i in ("sdpa_flash", "flex", "minimodel"))
                if None in (fa2, flex, ours):
                    failures.append(f"no rate for minimodel, FA2 or Flex at {key}")
                    continue
                ok = ours >= 1.3 * fa2 and ours > flex
                if not ok:
                    failures.append(f"{dtype} causal={causal} N={n}")
                rows.append([dtype, "yes" if causal else "no", f"{n:,}", f"{ours:.0f}",
                             f"{ours / fa2:.2f}", f"{ours / flex:.2f}", "yes" if ok else "**no**"])
    header = ["dtype", "causal", "N", "minimodel TFLOP/s", "÷ SDPA FA2 (≥ 1.30)", "÷ Flex (> 1)",
              "met"]
    return markdown_table(header, rows), failures


def where(key: tuple) -> str:
    _, dtype, d, n, _, causal, _ = key
    return f"{dtype}, d = {d}, {'causal' if causal else 'non-causal'}, N = {n:,}"


def acceptance_hopper(data: dict) -> str:
    """Issue 14's bar: minimodel_hopper / sdpa_cudnn >= 0.95 at d = 128 and every N >= 2048 of
    the grid, fp16 and bf16, causal and not; a verdict line, then the points."""
    idx = index(data["records"])
    rows, failing, ratios, at_least_cudnn = [], [], [], 0
    points = [grid_key(dtype, BAR_D, n, causal) for dtype in ("float16", "bfloat16")
              for causal in (False, True) for n in grid_lengths(data) if n >= BAR_MIN_N]
    for key in points:
        ours, cudnn = rate(idx, key, "minimodel_hopper"), rate(idx, key, "sdpa_cudnn")
        if ours is not None and cudnn is not None:
            ratios.append((ours / cudnn, key))
            met = ours >= HOPPER_BAR * cudnn
            at_least_cudnn += ours >= cudnn
        else:
            met = False
        if not met:
            failing.append(key)
        _, dtype, _, n, _, causal, _ = key
        rows.append([dtype, "yes" if causal else "no", f"{n:,}", tflops(cudnn),
                     tflops(HOPPER_BAR * cudnn if cudnn is not None else None), tflops(ours),
                     ratio(ours, cudnn),
                     "yes" if met else ("**no**" if ours is not None and cudnn is not None
                                        else "not measured")])
    bar = (f"at least {HOPPER_BAR:.2f}x SDPA's cuDNN backend at d = {BAR_D} and every "
           f"N ≥ {BAR_MIN_N:,} of the grid, fp16 and bf16, causal and not")
    if not measured(data, "minimodel_hopper"):
        verdict = (f"**Not measured.** The bar is {bar}; the Hopper kernel is "
                   f"{not_measured(data, 'minimodel_hopper')}.")
    else:
        lo, lo_key = min(ratios, key=lambda t: t[0]) if ratios else (None, None)
        spread = (f" The Hopper kernel runs at {lo:.2f}x cuDNN's rate at the lowest "
                  f"({where(lo_key)}) and {max(r for r, _ in ratios):.2f}x at the highest; it is "
                  f"at least as fast as cuDNN at {at_least_cudnn} of the {len(points)} points."
                  if ratios else "")
        unrun = [k for k in failing if rate(idx, k, "minimodel_hopper") is None
                 or rate(idx, k, "sdpa_cudnn") is None]
        if not failing:
            verdict = f"**Met** at all {len(points)} points: the Hopper kernel is {bar}."
        else:
            verdict = (f"**Not met** at {len(failing)} of the {len(points)} points (the bar "
                       f"is {bar})"
                       + (f"; {len(unrun)} of them without a rate for one of the two"
                          if unrun else "") + ".")
        verdict += spread
    header = ["dtype", "causal", "N", "cuDNN TFLOP/s", f"{HOPPER_BAR:.2f} × cuDNN",
              "Hopper TFLOP/s", "÷ cuDNN", f"met (≥ {HOPPER_BAR:.2f})"]
    return verdict + "\n\n" + markdown_table(header, rows)


def accuracy_failures(data: dict) -> list[str]:
    """Each of our outputs was checked against the float32 reference before it was timed; its
    max-abs error must be at most 2x that of PyTorch's own fused kernel on the same inputs and
    dtype (FlashAttention-2's; FlexAttention's for windows, which SDPA cannot run). No absolute
    floor: in bf16 both errors are near 8e-3 at the largest shapes, and the ratio is what
    tells a kernel bug from bf16's rounding. Our kernels must also have run at every case: an
    error there is a bug, not an unsupported combination."""
    idx = index(data["records"])
    bad = []
    for key, rec in idx.items():
        if key[-1] not in OURS or rec.get("outside_contract"):  # e.g. the Hopper kernel at d=256
            continue
        if "max_err" not in rec:
            bad.append(f"{key[-1]} did not run at {key}: {rec.get('error')}")
            continue
        candidates = (idx.get((*key[:-1], impl), {}) for impl in ("sdpa_flash", "flex"))
        theirs = next((c["max_err"] for c in candidates if "max_err" in c), None)
        if theirs is None:
            bad.append(f"no PyTorch kernel to compare errors with at {key}")
        elif not rec["max_err"] <= 2 * theirs:
            bad.append(f"max_err {rec['max_err']:.1e} > 2 x {theirs:.1e} at {key}")
    return bad


def shortfalls(data: dict) -> str:
    """Every point of the grid where the teaching kernel is under 1.3x FA2, not faster than
    Flex, or slower than cuDNN; then the Hopper kernel against cuDNN, at short sequences in
    particular: the honest half of the results."""
    idx = index(data["records"])
    noise = median_spread(data)
    under, cudnn_ahead, points, no_cudnn = [], 0, 0, 0
    order = lambda kv: (kv[0][1], kv[0][2], kv[0][5], kv[0][3])  # noqa: E731 - dtype, d, causal, N
    for (group, dtype, d, n, hkv, causal, window, impl), rec in sorted(idx.items(), key=order):
        if group != "fa2" or impl != "minimodel" or "tflops" not in rec:
            continue
        key = (group, dtype, d, n, hkv, causal, window)
        ours, cudnn = rec["tflops"], rate(idx, key, "sdpa_cudnn")
        fa2, flex = rate(idx, key, "sdpa_flash"), rate(idx, key, "flex")
        if cudnn is None:
            no_cudnn += 1
        else:
            points += 1
            cudnn_ahead += cudnn > ours * (1 + noise)
        if (fa2 is not None and ours < 1.3 * fa2) or (flex is not None and ours <= flex):
            under.append([dtype, d, "yes" if causal else "no", f"{n:,}", f"{ours:.0f}",
                          ratio(ours, fa2), ratio(ours, flex)])
    lines = [f"cuDNN is faster than minimodel at {cudnn_ahead} of the {points} points of the grid "
             f"by more than the noise floor ({noise:.1%}, the median spread between rounds); "
             "the others are ties within it"
             + (f" (cuDNN did not run at {no_cudnn} more)" if no_cudnn else "") + ".\n"]
    if under:
        lines += ["\nPoints under 1.3x FlashAttention-2 or not faster than Flex:\n\n",
                  markdown_table(["dtype", "d", "causal", "N", "TFLOP/s", "÷ FA2", "÷ Flex"],
                                 under)]
    lines.append("\n" + hopper_shortfalls(data, noise))
    return "".join(lines)


def hopper_shortfalls(data: dict, noise: float) -> str:
    """The Hopper kernel against cuDNN over the whole grid, then at N = 512 and 1,024 point by
    point, beside the teaching kernel's ratio."""
    if not measured(data, "minimodel_hopper"):
        return f"**The Hopper kernel**: {not_measured(data, 'minimodel_hopper')}.\n"
    idx = index(data["records"])
    behind = ahead = both = 0
    rows = []
    for dtype in ("float16", "bfloat16"):
        for d in grid_dims(data):
            for causal in (False, True):
                for n in grid_lengths(data):
                    key = grid_key(dtype, d, n, causal)
                    ours, cudnn = rate(idx, key, "minimodel_hopper"), rate(idx, key, "sdpa_cudnn")
                    if ours is not None and cudnn is not None:
                        both += 1
                        behind += cudnn > ours * (1 + noise)
                        ahead += ours > cudnn * (1 + noise)
                    if n in SHORT:
                        rows.append([dtype, d, "yes" if causal else "no", f"{n:,}", tflops(ours),
                                     tflops(cudnn), ratio(ours, cudnn),
                                     ratio(rate(idx, key, "minimodel"), cudnn)])
    head = (f"**The Hopper kernel.** Of the {both} points of the grid where both ran, cuDNN is "
            f"faster than minimodel Hopper at {behind} by more than the noise floor, minimodel "
            f"Hopper faster at {ahead}, and the other {both - behind - ahead} are ties. "
            f"The short sequences, N = {SHORT[0]:,} and {SHORT[1]:,}, point by point:\n\n")
    header = ["dtype", "d", "causal", "N", "Hopper TFLOP/s", "cuDNN TFLOP/s", "Hopper ÷ cuDNN",
              "minimodel ÷ cuDNN"]
    return head + markdown_table(header, rows)


EXP_IMPLS = ["minimodel", "minimodel_hopper", "sdpa_cudnn", "sdpa_flash"]


def exp_roof_table(data: dict) -> str:
    """Each implementation's median rate (fp16, no mask, N >= 2048) against the exponential
    roof of a kernel that does not overlap exponentials and matrix products
    (minimodel.roofline: Ceilings.attention_roof on the H200's measured roofs)."""
    roof = h200_measured()
    idx = index(data["records"])
    lengths = [n for n in grid_lengths(data) if n >= 2048]
    rows = []
    for d in (64, 128):
        cap = roof.attention_roof(d)
        cells = []
        for impl in EXP_IMPLS:
            rates = [x for n in lengths
                     if (x := rate(idx, grid_key("float16", d, n, False), impl)) is not None]
            if not measured(data, impl):
                cells.append("not measured")
            elif len(rates) < len(lengths):
                cells.append(f"ran at {len(rates)} of {len(lengths)}")
            else:
                med = statistics.median(rates)
                cells.append(f"{med:.0f} ({med * 1e12 / cap:.0%})")
        rows.append([d, f"{cap / 1e12:.0f} ({cap / roof.peak_flops:.0%})",
                     f"{roof.attention_roof(d, overlapped=True) / 1e12:.0f}", *cells])
    header = ["d", "cap, not overlapped (of matmul)", "cap, overlapped",
              *(LABEL[i] for i in EXP_IMPLS)]
    exp_rate, exp_source = h200_exp_rate()
    note = (f"\nCaps in TFLOP/s from `minimodel.roofline` (`Ceilings.attention_roof`): the "
            f"measured matmul rate, {roof.peak_flops / 1e12:.0f} TFLOP/s "
            f"(`data/ceilings-h200.json`), and {exp_rate / 1e12:.2f} T exp2/s, {exp_source}. "
            f"Rates: each implementation's median TFLOP/s over N = "
            + ", ".join(f"{n:,}" for n in lengths)
            + f" (fp16, no mask; `{data['source']}`), in parentheses as a share of the cap not "
            "overlapped. A kernel whose exponentials and matrix products take turns cannot pass "
            "that cap: a share above 100% is a kernel that overlaps them.\n")
    return markdown_table(header, rows) + note


def gqa_window_table(data: dict) -> tuple[str, list[str]]:
    idx = index(data["records"])
    rows, failures = [], []
    if not any(r["group"] in ("gqa", "window") for r in data["records"]):
        return f"GQA and window runs: not measured (no such records in `{data['source']}`).\n", []
    for n in (2048, 8192):
        for causal in (False, True):
            mha = idx[("gqa", "float16", 128, n, 32, causal, None, "minimodel")]
            gqa = idx[("gqa", "float16", 128, n, 8, causal, None, "minimodel")]
            # the same FLOPs and a quarter of the K/V bytes: GQA may not be slower than MHA by
            # more than the two measurements' own spread between timing rounds
            noise = max(abs(a - b) / min(a, b) for a, b in (mha["ms_runs"], gqa["ms_runs"]))
            if gqa["ms"] > mha["ms"] * (1 + noise):
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
    # A file merged from several calls of the benchmark (--merge) lists the runs that still own
    # records; each case's implementations all come from one of them.
    used = {r.get("run", 0) for r in data["records"]}
    runs = [r for i, r in enumerate(data.get("runs", [])) if i in used]
    if len(runs) > 1:
        parts = [f"{', '.join(r['groups'])} with torch {e['torch']}, triton {e['triton']} at "
                 f"commit `{e['commit']}` ({e['date'][:10]})"
                 for r in runs for e in (r["environment"],)]
        where_ = (f"Measured on an {env['device']} in {len(runs)} runs, each case in one of them "
                  f"with all its implementations: {'; '.join(parts)}")
    else:
        where_ = (f"Measured on an {env['device']} (torch {env['torch']}, triton {env['triton']}, "
                  f"commit `{env['commit']}`, {env['date'][:10]})")
    return (f"{where_}; {data['timing']}. The two rounds "
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
    lengths, dims = grid_lengths(data), grid_dims(data)
    fig, axes = plt.subplots(len(dims), 2, figsize=(10, 0.6 + 3.5 * len(dims)), sharex=True,
                             squeeze=False)
    for row, d in enumerate(dims):
        for col, causal in enumerate((False, True)):
            ax = axes[row][col]
            for impl in IMPLS:
                ys = [rate(idx, grid_key("float16", d, n, causal), impl) for n in lengths]
                ys = [float("nan") if y is None else y for y in ys]
                label = LEGEND[impl] + ("" if measured(data, impl) else " (not measured)")
                ax.plot(lengths, ys, "o-", label=label, color=COLOR[impl],
                        linewidth=2.5 if impl in OURS else 1.2)
            ax.axhline(data["ceilings"]["peak_flops"] / 1e12, color="grey", linestyle="--",
                       linewidth=1, label="measured fp16 matmul")
            ax.set(xscale="log", title=f"d={d}, {'causal' if causal else 'non-causal'}",
                   ylim=(0, None))
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
    accept, failures = acceptance(data)
    failures += accuracy_failures(data)
    extra, failures2 = gqa_window_table(data)
    # The pages say Lab 02's bar is met everywhere, our kernels are as accurate as PyTorch's and
    # GQA/window behave: fail loudly if the data stops saying so, rather than let the prose drift
    # from it. Issue 14's bar for the Hopper kernel is not asserted: its table states whether
    # the data meets it.
    if failures or failures2:
        raise SystemExit(f"the benchmark data contradicts the pages: {failures + failures2}")
    return {
        "generated/bench-environment.md": environment_line(data),
        "generated/bench-grid-float16.md": grid_table(data, "float16"),
        "generated/bench-grid-bfloat16.md": grid_table(data, "bfloat16"),
        "generated/bench-acceptance.md": accept,
        "generated/bench-acceptance-hopper.md": acceptance_hopper(data),
        "generated/bench-exp-roof.md": exp_roof_table(data),
        "generated/bench-gqa-window.md": extra,
        "generated/bench-shortfalls.md": shortfalls(data),
        "figures/bench-flash.svg": render_svg(lambda p: draw(data, p)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if committed files are stale")
    parser.add_argument("--data", type=Path, default=DATA, help="the benchmark's data file")
    parser.add_argument("--out-dir", type=Path, default=DOCS,
                        help="where generated/ and figures/ go (docs/ unless told)")
    args = parser.parse_args()
    emit(outputs(args.data), ["--check"] if args.check else [], root=args.out_dir)

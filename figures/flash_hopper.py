"""Lab 02 part 2's tables: the drafts (data/flash-hopper-drafts-h200.json), the ablation
(data/flash-hopper-ablation-h200.json) and Triton's warp specialisation (data/autows-probe.json);
Lab 03 part 2's tables of the measurements behind `minimodel.attention`'s kernel choice (and the
graph-timed prefill grid, data/prefill-grid-h200.json)."""

import re

from figures.core import DASH, load, markdown_table, yes

ABLATION = {"hopper": "kept kernel", "hopper, no ping-pong": "no ping-pong"}
ABLATION |= {"hopper, one program per item pair": "not persistent", "hopper, neither": "neither"}
ABLATION |= {"lab02": "Lab 02", "sdpa_cudnn": "cuDNN"}
# A draft's switches: the kept kernel's setting, and how a draft that differs is named
SWITCHES = {"PERSISTENT": (True, "not persistent"), "PINGPONG": (True, "no ping-pong")}
SWITCHES |= {"CONSUMER_REGS": (240, "{} registers"), "STAGES": (2, "{} stages")}


def drafts_table() -> str:
    rows = []
    runs = load("flash-hopper-drafts-h200.json")["runs"]
    for run, variant in ((r, v) for r in runs for v in r["variants"]):  # every draft's variants
        cfg = variant["cfg"]
        changed = [(k, text) for k, (kept, text) in SWITCHES.items() if cfg.get(k, kept) != kept]
        switches = [text.format(cfg[k]) for k, text in changed]
        err = max(check["err"] for check in variant["checks"])
        what = [run["draft"], ", ".join(switches) or "as described", cfg["d"]]
        what.append(cfg.get("dtype", "float16"))
        for p in variant["perf"]:
            rates = [f"{p['hopper']:.0f}", f"{p['cudnn']:.0f}", f"{p['ratio']:.2f}"]
            rows.append([*what, f"{p['n']:,}", yes(p["causal"]), *rates, f"{err:.1e}"])
    header = "draft | variant | d | dtype | N | causal | TFLOP/s | cuDNN | ÷ cuDNN | max error"
    return markdown_table(header, rows)


def ablation_table() -> str:
    data = load("flash-hopper-ablation-h200.json")
    names = [*data["variants"], "lab02", "sdpa_cudnn"]
    rows = []
    for rec in data["records"]:
        cudnn = rec["sdpa_cudnn"]["tflops"]
        cells = [f"{rec[n]['tflops']:.0f} ({rec[n]['tflops'] / cudnn:.2f})" for n in names]
        rows.append([f"{rec['n']:,}", yes(rec["causal"]), *cells])
    env = data["environment"]
    run = f"{env['device']}, torch {env['torch']}, Triton {env['triton']}, commit {env['commit']}"
    header = ["N", "causal", *(ABLATION[n] for n in names)]
    return markdown_table(header, rows, f"{run}, {env['date'][:10]}.")


HOPPER_RULE = "Hopper, fp16/bf16, d ≤ 128, not the next: the Hopper kernel"
SHORT_RULE = "causal, N ≤ 512, d ≤ 64: Lab 02's kernel"
RULES = ((HOPPER_RULE, "hopper", "lab02"), (SHORT_RULE, "lab02", "hopper"))  # (rule, picked, other)


def span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def short_causal(n: int, d: int, causal: bool) -> bool:
    """Whether minimodel.attention sends a call to Lab 02's kernel by SHORT_RULE."""
    from minimodel.attention import SHORT_CAUSAL

    return causal and n <= SHORT_CAUSAL[0] and d <= SHORT_CAUSAL[1]


def rule_classes(points, ratio, timing: str, file: str, by_d: bool = True, dtype: str = ""):
    """Dispatch rows (see dispatch_evidence) per head dim (descending; all together unless `by_d`)
    and rule that takes some of `points` [(d, N, causal, dtype, record)]; `ratio(record, picked,
    other)`: the picked kernel's speed over the other's, kernels named "hopper" and "lab02"."""
    dims = sorted({p[0] for p in points}, reverse=True)
    for group in [[p for p in points if p[0] == d] for d in dims] if by_d else [points]:
        for rule, picked, other in RULES:
            if mine := [p for p in group if short_causal(p[1], p[0], p[2]) == (rule == SHORT_RULE)]:
                ds = " and ".join(str(d) for d in sorted({p[0] for p in mine}))
                dtypes = dtype or " and ".join(sorted({p[3] for p in mine}))
                shapes = f"d = {ds}, {dtypes}, N = {span([p[1] for p in mine])}"
                yield rule, shapes, timing, file, [ratio(p[4], picked, other) for p in mine]


def dispatch_evidence() -> list[tuple[str, str, str, str, list[float]]]:
    """Per rule of minimodel.attention._forward and shape class: (rule, shapes, timing, data
    file, the picked kernel's rate over the other's at every point of the file where both ran:
    Lab 02's, or for SHORT_RULE the Hopper kernel's)."""
    from figures import bench as fb
    from figures import paged_decode as fp

    idx = fp.index(fp.load()["decode"])
    lab02 = {k[:-1]: r for k, r in idx.items() if k[-1] == "flash_attention"}
    pairs = [(r, lab02.get(k[:-1])) for k, r in idx.items() if k[-1] == "contiguous"]
    pairs = [(ours, lab02) for ours, lab02 in pairs if fp.rate(lab02)]
    ratios = [fp.rate(ours) / fp.rate(lab02) for ours, lab02 in pairs]
    shapes = f"decode, B = {span([ours['b'] for ours, _ in pairs])}, contiguous cache"
    rule = "one query row (decode): the decode kernel"
    rows = [(rule, shapes, "graph", "bench-paged-decode-h200.json", ratios)]
    tflops = lambda r, picked, other: r[picked]["tflops"] / r[other]["tflops"]
    for file in ("flash-hopper-ablation-h200.json", "flash-hopper-ablation-d64-h200.json"):
        records = [(r["d"], r["n"], r["causal"], r["dtype"], r) for r in load(file)["records"]]
        rows += rule_classes(records, tflops, "graph", file, by_d=False, dtype="fp16")
    grid = prefill_grid()
    ms = lambda p, picked, other: grid[p][other]["graph_ms"] / grid[p][picked]["graph_ms"]
    rows += rule_classes([(*p, p) for p in grid], ms, "graph", "prefill-grid-h200.json")
    fwd = fb.index(fb.load()["records"])  # the forward grid (eager do_bench), keys as fb.FIELDS
    name = {"hopper": "minimodel_hopper", "lab02": "minimodel"}
    keys = [k[:-1] for k in fwd if k[-1] == "minimodel"]
    keys = [k for k in keys if fb.rate(fwd, k, "minimodel_hopper")]  # ran: d <= 128 only
    rate = lambda k, picked, other: fb.rate(fwd, k, name[picked]) / fb.rate(fwd, k, name[other])
    points = [(k[2], k[3], k[5], k[1], k) for k in keys]
    return rows + list(rule_classes(points, rate, "eager", "bench-attention-h200.json"))


def prefill_grid() -> dict[tuple, dict[str, dict]]:
    """bench.prefill_grid's records by point (d, N, causal, dtype), then by kernel."""
    points = {}
    for rec in load("prefill-grid-h200.json")["records"]:
        points.setdefault((rec["d"], rec["n"], rec["causal"], rec["dtype"]), {})[rec["impl"]] = rec
    return points


def prefill_grid_table() -> str:
    """Each kernel's rate over cuDNN's at every point of the graph-timed prefill grid, the one
    minimodel.attention picks first."""
    points, env = prefill_grid(), load("prefill-grid-h200.json")["environment"]
    lengths = sorted({p[1] for p in points})
    rows = []
    for d, causal, dtype in sorted({(p[0], p[2], p[3]) for p in points}):
        cells = []
        for n in lengths:
            recs = points[d, n, causal, dtype]
            order = ("lab02", "hopper") if short_causal(n, d, causal) else ("hopper", "lab02")
            cells.append(" / ".join(f"{recs[k]['vs_cudnn']:.2f}" for k in order))
        rows.append([d, yes(causal), dtype, *cells])
    header = ["d", "causal", "dtype", *(f"N = {n:,}" for n in lengths)]
    caption = f"The picked kernel first; commit {env['commit']}, {env['date'][:10]}."
    return markdown_table(header, rows, caption)


def dispatch_table() -> str:
    rows = []
    for rule, shapes, timing, file, ratios in dispatch_evidence():
        spread = f"{min(ratios):.2f} to {max(ratios):.2f}"
        slower = sum(x < 1 for x in ratios)
        rows.append([rule, shapes, f"`data/{file}`", timing, len(ratios), spread, slower])
    header = "rule | shape class | data | timing | points | picked ÷ the other | points slower"
    return markdown_table(header, rows)


def ptxas_short(report: str | None) -> str:
    """'255 regs, 88 B spilled' from ptxas's -v lines; '–' where ptxas did not run."""
    if not report:
        return DASH
    regs = re.search(r"Used (\d+) registers", report)
    spill = re.search(r"(\d+) bytes spill stores", report)
    return f"{regs.group(1)} regs, {spill.group(1)} B spilled" if regs and spill else report


def autows_table() -> str:
    data = load("autows-probe.json")
    rows = []
    for rec in data["records"]:
        if not rec["compiled"]:
            result = f"compile error ({rec['error'].split(':')[0]})"
        elif rec["ttgir_has_warp_specialize"]:
            result = "partitions made"
        else:
            result = "compiled, no partitions"
        tile, ptxas = f"{rec['BLOCK_M']} x {rec['BLOCK_N']}", ptxas_short(rec.get("ptxas"))
        flag = yes(rec["warp_specialize_flag"])
        rows.append([rec["target"], flag, tile, rec["num_warps"], result, ptxas])
    env = data["environment"]
    header = "target | warp_specialize=True | tile | warps | result | registers (sm_90)"
    return markdown_table(header, rows, f"Triton {env['triton']}, commit {env['commit']}.")


def outputs() -> dict[str, str | bytes]:
    return {
        "generated/hopper-drafts.md": drafts_table(),
        "generated/hopper-ablation.md": ablation_table(),
        "generated/hopper-autows.md": autows_table(),
        "generated/attention-dispatch.md": dispatch_table(),
        "generated/prefill-grid.md": prefill_grid_table(),
    }

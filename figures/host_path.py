"""Lab 03 part 2's tables of the host path (data/host-path-h200.json), of one Triton launch's
host cost (data/launch-costs-h200.json), of the split decode's merge folded or launched apart
(data/fold-merge-h200.json) and of what the paged kernels' checks cost
(data/paged-checks-h200.json)."""

from figures.core import load, markdown_table, ratio
from figures.core import number as cell
from minimodel.paged_attention import FOLD_MAX_KV_BYTES


def shape(case: dict) -> str:
    if case["kind"] == "decode":
        return f"decode, {case['keys']:,} keys"
    return f"prefill, N = {case['n']}"


def times(data: dict) -> str:
    rows = []
    for case in data["cases"]:
        ref = next(r for r in case["records"] if r["impl"] == "sdpa_cudnn")
        for r in case["records"]:
            host, gpu = r["host_us"], r["gpu_ms"]
            times = [cell(host), cell(gpu, scale=1e3), cell(r["eager_us"])]
            times.append(cell(None if host is None else host - ref["host_us"], "+,.1f"))
            times += [ratio(gpu, ref["gpu_ms"]), ratio(r["eager_us"], ref["eager_us"])]
            rows.append([shape(case) if r is case["records"][0] else "", f"`{r['impl']}`", *times])
    header = "shape | call | host µs | graph µs | eager µs | host − cuDNN µs | graph ÷ cuDNN"
    return markdown_table(f"{header} | eager ÷ cuDNN", rows)


PARTS = {
    "checks": "`attention`'s checks (`_check_call`)",
    "allocate_output": "O allocated (one `torch.empty`: no lse is asked for)",
    "decode_one_launch": "`decode_contiguous`, one split: one launch",
    "decode_split_and_merge": "`decode_contiguous`, default split, merge folded: one launch",
}


def parts(data: dict) -> str:
    """Host µs of the pieces of a decode call, one column per decode shape."""
    cases = [c for c in data["cases"] if "host_parts_us" in c]
    rows = [[label, *(cell(c["host_parts_us"][n]) for c in cases)] for n, label in PARTS.items()]
    return markdown_table(["host µs of", *(shape(c) for c in cases)], rows)


LAUNCHES = {
    "jit": "through Triton's JIT (`kernel[grid](...)`)",
    "direct_tensors": "Triton's wrapper of the C launcher (`compiled.run`), tensors",
    "direct_ints": "Triton's wrapper of the C launcher (`compiled.run`), addresses as ints",
    "minimodel_launch": "`minimodel.kernels.launch` (what the wrappers call)",
    "torch_empty": "for scale: one `torch.empty`",
}


def launch_costs() -> str:
    host, errors = (load("launch-costs-h200.json")[k] for k in ("host_us", "errors"))
    rows = [[label, cell(host.get(n)), errors.get(n, "")] for n, label in LAUNCHES.items()]
    return markdown_table("one launch of `_merge_splits` | host µs | error", rows)


FOLD_CALLS = {
    "sdpa_cudnn": "`sdpa_cudnn`",
    "attention": "`attention`, the default rule",
    "attention_folded": "`attention`, folded",
    "attention_two_launches": "`attention`, two launches",
    "decode_contiguous_folded": "`decode_contiguous`, folded",
    "decode_contiguous_two_launches": "`decode_contiguous`, two launches",
}


def fold_merge() -> str:
    """Host, graph and eager µs per call at each context, with the K/V bytes that the default
    rule (FOLD_MERGE = None) compares with FOLD_MAX_KV_BYTES and what it chose eagerly."""
    rows = []
    for c in load("fold-merge-h200.json")["cases"]:
        kv = 2 * c["b"] * c["hkv"] * c["keys"] * c["d"] * 2  # fp16 keys and values
        rule = "folds" if kv <= FOLD_MAX_KV_BYTES else "two launches"
        head = f"{c['keys']:,} keys, {c['num_splits']} splits, {kv / 2**20:,.0f} MiB: {rule}"
        for r in c["records"]:
            first = head if r is c["records"][0] else ""
            times = (cell(r[f]) for f in ("host_us", "gpu_us", "eager_us"))
            rows.append([first, FOLD_CALLS[r["impl"]], *times])
    header = "context, K/V read: eager default | call | host µs | graph µs | eager µs"
    return markdown_table(header, rows)


def paged_checks() -> str:
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
            times = (checked, fast, graph, flags, checked - fast)
            rows.append([shape, *(cell(ms, scale=1e3) for ms in times)])
    header = "shape | checked, eager µs | fast, eager µs | fast, graph µs | fast + flags, graph µs"
    return markdown_table(f"{header} | the checks, µs", rows)


def outputs() -> dict[str, str | bytes]:
    data = load("host-path-h200.json")
    refusals = []
    for c in data["cases"]:
        calls = c["still_refuses"].items()
        refused, kept = ([f"`{k}`" for k, ok in calls if ok is want] for want in (True, False))
        refusals.append([shape(c), ", ".join(refused), ", ".join(kept) or "none"])
    header = "shape | refused a bad call, same process | did not"
    return {
        "generated/launch-costs.md": launch_costs(),
        "generated/host-path.md": times(data),
        "generated/host-path-parts.md": parts(data),
        "generated/host-path-refusals.md": markdown_table(header, refusals),
        "generated/fold-merge.md": fold_merge(),
        "generated/paged-checks.md": paged_checks(),
    }

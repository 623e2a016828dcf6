"""Lab 03 part 2's tables of the host path (data/host-path-h200.json) and of one Triton launch's
host cost (data/launch-costs-h200.json)."""

from figures.core import load, markdown_table, ratio
from figures.core import number as cell


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
    "allocate_outputs": "O and lse allocated (two `torch.empty`)",
    "decode_one_launch": "`decode_contiguous`, one split: one launch",
    "decode_split_and_merge": "`decode_contiguous`, default split: split kernel and merge",
}


def parts(data: dict) -> str:
    """Host µs of the pieces of a decode call, one column per decode shape."""
    cases = [c for c in data["cases"] if "host_parts_us" in c]
    rows = [[label, *(cell(c["host_parts_us"][n]) for c in cases)] for n, label in PARTS.items()]
    return markdown_table(["host µs of", *(shape(c) for c in cases)], rows)


LAUNCHES = {
    "jit": "through Triton's JIT (`kernel[grid](...)`)",
    "direct_tensors": "the compiled kernel's launcher, tensors",
    "direct_ints": "the compiled kernel's launcher, addresses as ints",
    "minimodel_launch": "`minimodel.kernels.launch` (what the wrappers call)",
    "torch_empty": "for scale: one `torch.empty`",
}


def launch_costs() -> str:
    data = load("launch-costs-h200.json")
    rows = [
        [label, cell(data["host_us"].get(n)), data["errors"].get(n, "")]
        for n, label in LAUNCHES.items()
    ]
    return markdown_table("one launch of `_merge_splits` | host µs | error", rows)


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
    }

"""Lab 03's tables and figure: the memory experiment (data/paged-memory.json) and the block
manager's operations (data/block-manager-ops.json)."""

import matplotlib.pyplot as plt

from figures.core import load, markdown_table, sizes_axis, svg

# The PagedAttention paper (arXiv:2309.06180), Fig. 2: the share of KV memory holding token states.
PAPER_EXISTING = (0.204, 0.382)
PAPER_VLLM = 0.963
PAPER_DEFAULT_BLOCK = 16


def layout_name(run: dict) -> str:
    if run["layout"] == "contiguous":
        return "contiguous, max length"
    return f"paged, b = {run['block_size']}" + (", prefix sharing" if run["prefix_sharing"] else "")


def setup_table(data: dict) -> str:
    rows = []
    for w in data["workloads"]:
        tokens = [f"{w[f'mean_{x}']:.0f} / {w[f'max_{x}']:,}" for x in ("prompt", "output")]
        slots = [f"{w[x]:,}" for x in ("max_len", "budget_slots")]
        rows.append([w["name"], w["description"], *tokens, *slots])
    env, run = data["environment"], f"{data['requests']} requests per workload, seed {data['seed']}"
    header = "workload | what it is | prompt tokens (mean / max) | output tokens (mean / max)"
    header += " | contiguous reservation | KV budget (token slots)"
    caption = f"{run}; Python {env['python']}, commit {env['commit']}, {env['date']}."
    return markdown_table(header, rows, caption)


def results_table(data: dict) -> str:
    rows = []
    for w in data["workloads"]:
        for r in w["runs"]:
            computed, cached = r["prefill_tokens_computed"], r["prefill_tokens_cached"]
            shares = [f"{r[f'token_states_of_{x}']:.1%}" for x in ("reserved", "budget")]
            running = [f"{r['mean_running']:.1f}", f"{r['max_running']}", f"{r['preemptions']:,}"]
            cache = f"{cached / (cached + computed):.0%}"
            rows.append([w["name"], layout_name(r), *shares, *running, cache, f"{r['steps']:,}"])
    header = "workload | layout | token states / reserved | token states / budget"
    header += " | running at once (mean) | (max) | preemptions | prefill from cache | steps"
    return markdown_table(header, rows)


def pick(w: dict, layout: str, b: int | None = None, sharing: bool = False) -> dict:
    key = (layout, b, sharing)
    return next(r for r in w["runs"] if (r["layout"], r["block_size"], r["prefix_sharing"]) == key)


def summary(data: dict) -> str:
    """The comparison with the paper, every number of ours read from the data."""
    rows = []
    for w in data["workloads"]:
        c, p = pick(w, "contiguous"), pick(w, "paged", PAPER_DEFAULT_BLOCK)
        s = pick(w, "paged", PAPER_DEFAULT_BLOCK, True)
        shares = [f"{c['token_states_of_budget']:.1%}", f"{p['token_states_of_budget']:.1%}"]
        more = [f"{x['mean_running'] / c['mean_running']:.1f}x" for x in (p, s)]
        rows.append([w["name"], *shares, f"{1 - p['token_states_of_reserved']:.1%}", *more])
    orca = f"{PAPER_EXISTING[0]:.1%} to {PAPER_EXISTING[1]:.1%} (Orca)"
    vllm = [f"{PAPER_VLLM:.1%} (vLLM)", f"{1 - PAPER_VLLM:.1%} (under 4%)"]
    rows.append(["PagedAttention paper (Fig. 2)", orca, *vllm, "", ""])
    b = f"paged b = {PAPER_DEFAULT_BLOCK}"
    header = f" | contiguous: token states / budget | {b}: token states / budget"
    header += f" | {b}: waste in reserved blocks | requests at once, {b} / contiguous"
    return markdown_table(f"{header} | the same, with prefix sharing", rows)


def figure(data: dict) -> bytes:
    fig, (ax_use, ax_run) = plt.subplots(1, 2, figsize=(10, 4))
    colours = {"verbs": "tab:blue", "long-tail": "tab:orange"}
    for w in data["workloads"]:
        colour = colours.get(w["name"], "tab:gray")
        paged = [r for r in w["runs"] if r["layout"] == "paged"]
        for sharing, style in ((False, "-o"), (True, "--s")):
            runs = [r for r in paged if r["prefix_sharing"] == sharing]
            sizes = [r["block_size"] for r in runs]
            label = f"{w['name']}, paged" + (" + prefix sharing" if sharing else "")
            used = [100 * r["token_states_of_reserved"] for r in runs]
            ax_use.plot(sizes, used, style, color=colour, label=label)
            ax_run.plot(sizes, [r["mean_running"] for r in runs], style, color=colour, label=label)
        c = pick(w, "contiguous")
        for ax, y in ((ax_use, 100 * c["token_states_of_reserved"]), (ax_run, c["mean_running"])):
            ax.axhline(y, color=colour, linestyle=":", label=f"{w['name']}, contiguous")
    span = [100 * x for x in PAPER_EXISTING]
    ax_use.axhspan(*span, color="0.85", zorder=0, label="paper: existing systems (of budget)")
    for ax in (ax_use, ax_run):
        sizes_axis(ax, data["block_sizes"], "block size b (token slots)", base=2)
    ax_use.set(ylim=(0, 100), ylabel="token states / reserved KV memory (%)")
    ax_run.set(ylim=(0, None), ylabel="requests running at once (mean, server full)")
    handles, labels = ax_use.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle("One KV budget: contiguous reservation against paging")
    return svg(fig, rect=(0, 0.12, 1, 1))


def ops_table(data: dict) -> str:
    rows = []
    for r in sorted(data["results"], key=lambda r: (r["prefix_caching"], r["live"])):
        ns = (r["allocate_ns"], r["append_slot_ns"])
        times = [cell for t in ns for cell in (f"{t / 1e3:.2f}", f"{1e9 / t:,.0f}")]
        rows.append([f"{r['live']:,}", "on" if r["prefix_caching"] else "off", *times])
    header = "live sequences | prefix caching | allocate (µs) | allocate per s | append_slot (µs)"
    return markdown_table(f"{header} | append_slot per s", rows)


def outputs() -> dict[str, str | bytes]:
    memory = load("paged-memory.json")
    return {
        "generated/paged-memory-setup.md": setup_table(memory),
        "generated/paged-memory.md": results_table(memory),
        "generated/paged-memory-summary.md": summary(memory),
        "generated/block-manager-ops.md": ops_table(load("block-manager-ops.json")),
        "figures/paged-memory.svg": figure(memory),
    }

"""Tables and figure of Lab 03 from committed data: the memory experiment
(data/paged-memory.json, bench/paged_memory.py) and the cost of the block manager's
operations (data/block-manager-ops.json, bench/block_manager.py).

    python -m figures.paged_memory            # write docs/generated/paged-memory*.md,
                                                  # block-manager-ops.md, figures/paged-memory.svg
    python -m figures.paged_memory --check    # fail if they are stale
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from figures.core import emit, markdown_table, render_svg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MEMORY = ROOT / "data" / "paged-memory.json"
OPS = ROOT / "data" / "block-manager-ops.json"

# Kwon et al., "Efficient Memory Management for Large Language Model Serving with
# PagedAttention", SOSP 2023, arXiv:2309.06180, Fig. 2: the share of KV cache memory that holds
# token states in the systems it measured (Orca with three reservation policies) and in vLLM.
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
        rows.append(
            [
                w["name"],
                w["description"],
                f"{w['mean_prompt']:.0f} / {w['max_prompt']:,}",
                f"{w['mean_output']:.0f} / {w['max_output']:,}",
                f"{w['max_len']:,}",
                f"{w['budget_slots']:,}",
            ]
        )
    env = data["environment"]
    note = (
        f"\n{data['requests']} requests per workload, seed {data['seed']}; "
        f"`data/paged-memory.json`, written by `bench/paged_memory.py` (Python "
        f"{env['python']}, commit {env['commit']}, {env['date']}).\n"
    )
    header = [
        "workload",
        "what it is",
        "prompt tokens (mean / max)",
        "output tokens (mean / max)",
        "contiguous reservation",
        "KV budget (token slots)",
    ]
    return markdown_table(header, rows) + note


def results_table(data: dict) -> str:
    rows = []
    for w in data["workloads"]:
        for r in w["runs"]:
            computed, cached = r["prefill_tokens_computed"], r["prefill_tokens_cached"]
            rows.append(
                [
                    w["name"],
                    layout_name(r),
                    f"{r['token_states_of_reserved']:.1%}",
                    f"{r['token_states_of_budget']:.1%}",
                    f"{r['mean_running']:.1f}",
                    f"{r['max_running']}",
                    f"{r['preemptions']:,}",
                    f"{cached / (cached + computed):.0%}",
                    f"{r['steps']:,}",
                ]
            )
    header = [
        "workload",
        "layout",
        "token states / reserved",
        "token states / budget",
        "running at once (mean)",
        "(max)",
        "preemptions",
        "prefill from cache",
        "steps",
    ]
    return markdown_table(header, rows) + (
        "\nWhile requests wait (the server is full): token states are the physical slots "
        "holding a token's K/V, a shared block counted once; reserved are the slots of the "
        "blocks (or the reservations) that requests hold.\n"
    )


def pick(w: dict, layout: str, b: int | None = None, sharing: bool = False) -> dict:
    return next(
        r
        for r in w["runs"]
        if r["layout"] == layout and r["block_size"] == b and r["prefix_sharing"] == sharing
    )


def summary(data: dict) -> str:
    """The comparison with the paper, every number of ours read from the data."""
    rows = []
    for w in data["workloads"]:
        c = pick(w, "contiguous")
        p = pick(w, "paged", PAPER_DEFAULT_BLOCK)
        s = pick(w, "paged", PAPER_DEFAULT_BLOCK, True)
        rows.append(
            [
                w["name"],
                f"{c['token_states_of_budget']:.1%}",
                f"{p['token_states_of_budget']:.1%}",
                f"{1 - p['token_states_of_reserved']:.1%}",
                f"{p['mean_running'] / c['mean_running']:.1f}x",
                f"{s['mean_running'] / c['mean_running']:.1f}x",
            ]
        )
    rows.append(
        [
            "PagedAttention paper (Fig. 2)",
            f"{PAPER_EXISTING[0]:.1%} to {PAPER_EXISTING[1]:.1%} (Orca)",
            f"{PAPER_VLLM:.1%} (vLLM)",
            f"{1 - PAPER_VLLM:.1%} (under 4%)",
            "",
            "",
        ]
    )
    header = [
        "",
        "contiguous: token states / budget",
        f"paged b = {PAPER_DEFAULT_BLOCK}: token states / budget",
        f"paged b = {PAPER_DEFAULT_BLOCK}: waste in reserved blocks",
        f"requests at once, paged b = {PAPER_DEFAULT_BLOCK} / contiguous",
        "the same, with prefix sharing",
    ]
    return markdown_table(header, rows)


def figure(data: dict) -> bytes:
    plt.rcParams["svg.hashsalt"] = "minimodel"  # stable SVG ids: the figure diffs cleanly
    fig, (ax_use, ax_run) = plt.subplots(1, 2, figsize=(10, 4))
    colours = {"verbs": "tab:blue", "long-tail": "tab:orange"}
    for w in data["workloads"]:
        colour = colours.get(w["name"], "tab:gray")
        for sharing, style in ((False, "-o"), (True, "--s")):
            runs = [
                r for r in w["runs"] if r["layout"] == "paged" and r["prefix_sharing"] == sharing
            ]
            sizes = [r["block_size"] for r in runs]
            label = f"{w['name']}, paged" + (" + prefix sharing" if sharing else "")
            ax_use.plot(
                sizes,
                [100 * r["token_states_of_reserved"] for r in runs],
                style,
                color=colour,
                label=label,
            )
            ax_run.plot(sizes, [r["mean_running"] for r in runs], style, color=colour, label=label)
        c = pick(w, "contiguous")
        ax_use.axhline(
            100 * c["token_states_of_reserved"],
            color=colour,
            linestyle=":",
            label=f"{w['name']}, contiguous",
        )
        ax_run.axhline(
            c["mean_running"], color=colour, linestyle=":", label=f"{w['name']}, contiguous"
        )
    ax_use.axhspan(
        100 * PAPER_EXISTING[0],
        100 * PAPER_EXISTING[1],
        color="0.85",
        zorder=0,
        label="paper: existing systems (of budget)",
    )
    for ax, ylabel in (
        (ax_use, "token states / reserved KV memory (%)"),
        (ax_run, "requests running at once (mean, server full)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(data["block_sizes"], [str(b) for b in data["block_sizes"]])
        ax.set_xlabel("block size b (token slots)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    ax_use.set_ylim(0, 100)
    ax_run.set_ylim(bottom=0)
    handles, labels = ax_use.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle("One KV budget: contiguous reservation against paging")
    fig.tight_layout(rect=(0, 0.12, 1, 1))

    def draw(path: Path) -> None:
        fig.savefig(path, format="svg", metadata={"Date": None})

    svg = render_svg(draw)
    plt.close(fig)
    return svg


def ops_table(data: dict) -> str:
    rows = []
    for caching in (False, True):
        for r in sorted(
            (r for r in data["results"] if r["prefix_caching"] == caching), key=lambda r: r["live"]
        ):
            rows.append(
                [
                    f"{r['live']:,}",
                    "on" if caching else "off",
                    f"{r['allocate_ns'] / 1e3:.2f}",
                    f"{1e9 / r['allocate_ns']:,.0f}",
                    f"{r['append_slot_ns'] / 1e3:.2f}",
                    f"{1e9 / r['append_slot_ns']:,.0f}",
                ]
            )
    header = [
        "live sequences",
        "prefix caching",
        "allocate (µs)",
        "allocate per s",
        "append_slot (µs)",
        "append_slot per s",
    ]
    return markdown_table(header, rows)


def outputs() -> dict[str, str | bytes]:
    memory = json.loads(MEMORY.read_text())
    ops = json.loads(OPS.read_text())
    return {
        "generated/paged-memory-setup.md": setup_table(memory),
        "generated/paged-memory.md": results_table(memory),
        "generated/paged-memory-summary.md": summary(memory),
        "generated/block-manager-ops.md": ops_table(ops),
        "figures/paged-memory.svg": figure(memory),
    }


if __name__ == "__main__":
    emit(outputs())

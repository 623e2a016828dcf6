"""Tables and figure of Lab 04 from committed data: the KV cache on the verb sequence
(data/kv-cache-verbs.json, bench/kv_cache.py) and its extrapolation
(minimodel.roofline.kv_cache_bytes), the quality of the variants (data/gqa-quality.json,
bench/train_variants.py), and decode on the H200 (data/bench-paged-decode-h200.json from
bench/paged_decode.py, data/gqa-decode-h200.json from bench/gqa_decode.py).

    python -m figures.lab04            # write docs/generated/lab04-*.md and
                                           # docs/figures/lab04-quality-vs-bytes.svg
    python -m figures.lab04 --check    # fail if they are stale
"""

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from figures.core import emit, markdown_table, render_svg  # noqa: E402
from minimodel.roofline import kv_cache_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KV = ROOT / "data" / "kv-cache-verbs.json"
QUALITY = ROOT / "data" / "gqa-quality.json"
PAGED = ROOT / "data" / "bench-paged-decode-h200.json"
DECODE = ROOT / "data" / "gqa-decode-h200.json"
EXTRAPOLATE_N = 2048

# Published configurations (fp16/bf16 caches, E = 2):
# Llama 2 70B: 80 layers, 64 query heads, 8 kv heads (GQA), d = 128, 4096-token context
#   (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models", 2023,
#   arXiv:2307.09288; the released config.json: num_hidden_layers 80, num_attention_heads 64,
#   num_key_value_heads 8, hidden_size 8192).
# Mistral 7B: 32 layers, 32 query heads, 8 kv heads, d = 128, sliding window 4096 with a rolling
#   cache of the window, 8192-token context (Jiang et al., "Mistral 7B", 2023, arXiv:2310.06825,
#   Table 1).
PUBLISHED = [
    {
        "name": "Llama 2 70B",
        "layers": 80,
        "heads": 64,
        "kv_heads": 8,
        "d": 128,
        "context": 4096,
        "window": None,
    },
    {
        "name": "Mistral 7B",
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "d": 128,
        "context": 8192,
        "window": 4096,
    },
]


def size(nbytes: float) -> str:
    """Bytes in binary units, three significant figures."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:,.0f} B"


# --- The KV cache on the verb sequence -----------------------------------------------------------


def kv_table(data: dict) -> str:
    n, cfg = data["tokens"], data["config"]
    base = next(v for v in data["variants"] if v["n_kv_heads"] == cfg["n_heads"])
    rows = []
    for v in data["variants"]:
        kind = (
            "MHA" if v["n_kv_heads"] == cfg["n_heads"] else "MQA" if v["n_kv_heads"] == 1 else "GQA"
        )
        rows.append(
            [
                f"`{v['name']}` ({kind}, g = {v['group']})",
                f"{v['filled'] // n:,} / {v['formula_per_token']:,}",
                f"{v['filled_after_prefill']:,} / {v['formula_after_prefill']:,}",
                f"{v['filled']:,} / {v['formula_filled']:,}",
                f"{v['allocated']:,} / {v['formula_allocated']:,}",
                f"{base['filled'] / v['filled']:g}×",
            ]
        )
    header = [
        "variant",
        "per token",
        f"after the prefill ({data['prefill']} tokens)",
        f"filled, whole sequence ({n} tokens)",
        f"allocated ({cfg['max_seq_len']} slots)",
        "smaller than MHA by",
    ]
    return markdown_table(header, rows)


def extrapolated_table(data: dict) -> str:
    cfg, elem = data["config"], data["elem_bytes"]
    rows = []
    for v in data["variants"]:
        formula = kv_cache_bytes(
            cfg["n_layers"], v["n_kv_heads"], cfg["head_dim"], EXTRAPOLATE_N, elem_bytes=elem
        )
        mha = kv_cache_bytes(
            cfg["n_layers"], cfg["n_heads"], cfg["head_dim"], EXTRAPOLATE_N, elem_bytes=elem
        )
        rows.append(
            [
                f"the lab's MiniGPT, {data['dtype']}",
                f"`{v['name']}`",
                size(formula // EXTRAPOLATE_N),
                f"{EXTRAPOLATE_N:,}",
                size(formula),
                f"{mha / formula:g}×",
            ]
        )
    for m in PUBLISHED:
        tokens = m["context"] if m["window"] is None else min(m["context"], m["window"])
        mha = kv_cache_bytes(m["layers"], m["heads"], m["d"], tokens)
        for kv in sorted({m["heads"], m["kv_heads"], 1}, reverse=True):
            per_seq = kv_cache_bytes(m["layers"], kv, m["d"], tokens)
            label = f"`kv{kv}`" + (" (published)" if kv == m["kv_heads"] else "")
            cached = (
                f"{tokens:,}"
                if m["window"] is None
                else f"{tokens:,} (window of a {m['context']:,} context)"
            )
            rows.append(
                [
                    f"{m['name']}, fp16",
                    label,
                    size(per_seq // tokens),
                    cached,
                    size(per_seq),
                    f"{mha / per_seq:g}×",
                ]
            )
    header = [
        "model",
        "variant",
        "per token",
        "tokens cached per sequence",
        "per sequence",
        "smaller than MHA by",
    ]
    return markdown_table(header, rows)


# --- What the savings cost ------------------------------------------------------------------------

COLUMNS = [("scratch", 0, "from scratch"), ("converted", 0, "converted, no uptraining")]


def groups(data: dict) -> dict:
    """(variant, kind, uptrain steps) -> {seed: run}."""
    out: dict = {}
    for r in data["runs"]:
        out.setdefault((r["variant"], r["kind"], r["uptrain_steps"]), {})[r["seed"]] = r
    return out


def columns(data: dict) -> list[tuple[str, int, str]]:
    steps = data["recipe"]["steps"]
    up = [
        ("uptrained", u, f"uptrained {u} steps ({100 * u / steps:.0f}%)")
        for u in data["recipe"]["uptrain_steps"]
    ]
    return [("scratch", 0, f"from scratch ({steps} steps)"), COLUMNS[1], *up]


def stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.mean(values), min(values), max(values)


def cell(values: list[float]) -> str:
    mean, lo, hi = stats(values)
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def variants(data: dict) -> list[str]:
    return sorted({r["variant"] for r in data["runs"]}, key=lambda v: -int(v[2:]))


def per_token(kv: dict) -> dict[str, int]:
    return {v["name"]: v["filled"] // kv["tokens"] for v in kv["variants"]}


def quality_table(data: dict, kv: dict, metric: str) -> str:
    g, cols, bytes_per_token = groups(data), columns(data), per_token(kv)
    rows = []
    for v in variants(data):
        row = [f"`{v}`", f"{bytes_per_token[v]:,}"]
        for kind, u, _ in cols:
            runs = g.get((v, kind, u))
            row.append(cell([r[metric] for r in runs.values()]) if runs else "")
        rows.append(row)
    header = ["variant", "KV bytes per token", *[label for _, _, label in cols]]
    return markdown_table(header, rows)


def compare(runs: dict, base_runs: dict, metric: str) -> list[str]:
    """[difference of means, verdict]: a difference is claimed only when the ranges over seeds
    of the two do not overlap."""
    vals = [r[metric] for r in runs.values()]
    base = [r[metric] for r in base_runs.values()]
    diff = statistics.mean(vals) - statistics.mean(base)
    apart = min(vals) > max(base) or max(vals) < min(base)
    verdict = ("**higher**" if diff > 0 else "**lower**") if apart else "within the spread"
    return [f"{diff:+.3f}", verdict]


def differences(data: dict) -> str:
    """Each variant against the kv8 control of its column, held-out and training loss."""
    g = groups(data)
    scratch = g[("kv8", "scratch", 0)]
    rows = []
    for kind, u, label in columns(data):
        base = scratch if kind in ("scratch", "converted") else g[("kv8", kind, u)]
        for v in variants(data)[1:]:
            runs = g[(v, kind, u)]
            rows.append(
                [
                    label,
                    f"`{v}` − `kv8`",
                    *compare(runs, base, "heldout_loss"),
                    *compare(runs, base, "train_loss"),
                ]
            )
    header = [
        "runs",
        "compared",
        "held-out: difference (nats)",
        "held-out: ranges",
        "training verbs: difference",
        "training verbs: ranges",
    ]
    return markdown_table(header, rows)


def stems_table(data: dict) -> str:
    """Held-out loss split: the characters that repeat the verb's stem, and the others."""
    g = groups(data)
    rows = []
    for v in variants(data):
        row = [f"`{v}`"]
        for kind, u in (("scratch", 0), ("uptrained", max(data["recipe"]["uptrain_steps"]))):
            runs = g[(v, kind, u)].values()
            row += [
                cell([r["heldout_stem_loss"] for r in runs]),
                cell([r["heldout_rest_loss"] for r in runs]),
            ]
        rows.append(row)
    u = max(data["recipe"]["uptrain_steps"])
    header = [
        "variant",
        "from scratch: stem characters",
        "from scratch: the others",
        f"uptrained {u} steps: stem characters",
        f"uptrained {u} steps: the others",
    ]
    return markdown_table(header, rows)


def quality_figure(data: dict, kv: dict) -> bytes:
    plt.rcParams["svg.hashsalt"] = "minimodel"  # stable SVG ids: the figure diffs cleanly
    g, bytes_per_token = groups(data), per_token(kv)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = {
        "scratch": ("o", "tab:blue"),
        "converted": ("x", "tab:red"),
        "uptrained": ("s", "tab:green"),
    }
    shades = {0: 1.0}
    ups = data["recipe"]["uptrain_steps"]
    for i, u in enumerate(ups):
        shades[u] = 0.55 + 0.45 * i / max(1, len(ups) - 1)
    for offset, (kind, u, label) in zip((-0.09, -0.03, 0.03, 0.09), columns(data), strict=False):
        xs, ys, lo, hi = [], [], [], []
        for v in variants(data):
            runs = g.get((v, kind, u))
            if not runs:
                continue
            mean, a, b = stats([r["heldout_loss"] for r in runs.values()])
            xs.append(bytes_per_token[v] * 2**offset)
            ys.append(mean)
            lo.append(mean - a)
            hi.append(b - mean)
        marker, colour = styles[kind]
        ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            fmt=marker + "-",
            color=colour,
            alpha=shades[u],
            capsize=3,
            label=label,
            linewidth=1,
        )
    ax.set_xscale("log", base=2)
    ticks = sorted(bytes_per_token.values())
    ax.set_xticks(
        ticks, [f"{t:,}\n{name}" for t in ticks for name, b in bytes_per_token.items() if b == t]
    )
    ax.set_xlabel("KV cache bytes per token (measured, float32)")
    ax.set_ylabel("held-out loss, nats per character\n(mean; bars: min to max over seeds)")
    ax.set_title("Fewer kv heads, smaller cache: held-out loss on unseen verbs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()

    def draw(path: Path) -> None:
        fig.savefig(path, format="svg", metadata={"Date": None})

    svg = render_svg(draw)
    plt.close(fig)
    return svg


# --- Decode on the GPU ----------------------------------------------------------------------------

PAGED_IMPLS = {
    "contiguous": "our decode kernel (`minimodel.attention`), contiguous cache, kv heads in place",
    "paged_bs16": "our decode kernel through a block table (blocks of 16)",
    "sdpa_cudnn": "SDPA cuDNN, `enable_gqa`",
    "sdpa_flash": "SDPA FlashAttention-2, `enable_gqa`",
    "flash_attention": "Lab 02's Flash kernel (a prefill kernel), kv heads in place",
}
LAB04_IMPLS = {
    "grouped_attention": "Lab 04's `grouped_attention` (PyTorch operations, float32)",
    "sdpa_cudnn_repeated": "SDPA cuDNN on K/V repeated to 32 heads beforehand",
    "sdpa_flash_repeated": "SDPA FlashAttention-2 on K/V repeated to 32 heads beforehand",
    "repeat_then_sdpa_cudnn": "repeat to 32 heads inside the step, then SDPA cuDNN",
}
KV_HEADS = (32, 8, 1)


def decode_rows() -> dict:
    """impl -> {hkv: record} at B = 64, context 4096, Hq = 32, d = 128, fp16."""
    paged, lab = json.loads(PAGED.read_text()), json.loads(DECODE.read_text())
    table: dict = {}
    for r in paged["decode"]:
        if (
            r["impl"] in PAGED_IMPLS
            and r["b"] == 64
            and r["ctx"] == 4096
            and r["hq"] == 32
            and r["d"] == 128
            and r["dtype"] == "float16"
            and r["window"] is None
            and r["group"] in ("b64", "heads")
            and r["hkv"] in KV_HEADS
        ):
            table.setdefault(r["impl"], {})[r["hkv"]] = r
    for r in lab["decode"]:
        table.setdefault(r["impl"], {})[r["hkv"]] = r
    return table


def decode_table() -> str:
    table = decode_rows()
    names = {**PAGED_IMPLS, **LAB04_IMPLS}
    bytes_ = {h: kv_cache_bytes(1, h, 128, 4096, batch=64) for h in KV_HEADS}
    rows = [
        [
            "K/V bytes of the cache (the step's compulsory reads)",
            "",
            *[size(bytes_[h]) for h in KV_HEADS],
            f"{bytes_[32] / bytes_[8]:g}×",
            f"{bytes_[32] / bytes_[1]:g}×",
        ]
    ]
    for impl in [*PAGED_IMPLS, *LAB04_IMPLS]:
        recs = table.get(impl, {})
        ms = {h: recs[h]["graph_ms"] for h in KV_HEADS}
        source = "paged" if impl in PAGED_IMPLS else "lab 04"
        rows.append(
            [
                names[impl],
                source,
                *[f"{ms[h]:.3f} ms · {recs[h]['graph_gb_per_s']:,.0f} GB/s" for h in KV_HEADS],
                f"{ms[32] / ms[8]:.2f}×",
                f"{ms[32] / ms[1]:.1f}×",
            ]
        )
    header = [
        "one decode step of attention",
        "data",
        "kv32 (MHA)",
        "kv8 (GQA)",
        "kv1 (MQA)",
        "kv32 / kv8",
        "kv32 / kv1",
    ]
    return markdown_table(header, rows)


def outputs() -> dict[str, str | bytes]:
    kv = json.loads(KV.read_text())
    outputs: dict[str, str | bytes] = {
        "generated/lab04-kv-verbs.md": kv_table(kv),
        "generated/lab04-kv-extrapolated.md": extrapolated_table(kv),
    }
    quality = json.loads(QUALITY.read_text())
    outputs["generated/lab04-quality.md"] = quality_table(quality, kv, "heldout_loss")
    outputs["generated/lab04-quality-train.md"] = quality_table(quality, kv, "train_loss")
    outputs["generated/lab04-quality-differences.md"] = differences(quality)
    outputs["generated/lab04-quality-stems.md"] = stems_table(quality)
    outputs["figures/lab04-quality-vs-bytes.svg"] = quality_figure(quality, kv)
    outputs["generated/lab04-decode.md"] = decode_table()
    return outputs


if __name__ == "__main__":
    emit(outputs())

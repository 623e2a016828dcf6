"""Lab 04's tables and figure: the KV cache (data/kv-cache-verbs.json), the variants' quality
(data/gqa-quality.json), decode (data/bench-paged-decode-h200.json, data/gqa-decode-h200.json)."""

import statistics

import matplotlib.pyplot as plt

from figures.core import load, markdown_table, svg
from minimodel.roofline import kv_cache_bytes

EXTRAPOLATE_N = 2048

# Published configurations, fp16 caches: Llama 2 70B (arXiv:2307.09288 and its config.json),
# Mistral 7B with a rolling cache of its window (arXiv:2310.06825, Table 1).
PUBLISHED = [  # (name, layers, heads, kv heads, d, context, window)
    ("Llama 2 70B", 80, 64, 8, 128, 4096, None),
    ("Mistral 7B", 32, 32, 8, 128, 8192, 4096),
]


def size(nbytes: float) -> str:
    """Bytes in binary units, three significant figures."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:,.0f} B"


def kv_table(data: dict) -> str:
    n, cfg = data["tokens"], data["config"]
    base = next(v for v in data["variants"] if v["n_kv_heads"] == cfg["n_heads"])
    rows = []
    for v in data["variants"]:
        kind = {cfg["n_heads"]: "MHA", 1: "MQA"}.get(v["n_kv_heads"], "GQA")
        pairs = [(v["filled"] // n, v["formula_per_token"])]  # measured, by the formula
        pairs.append((v["filled_after_prefill"], v["formula_after_prefill"]))
        pairs += [(v[key], v[f"formula_{key}"]) for key in ("filled", "allocated")]
        counts = [f"{measured:,} / {formula:,}" for measured, formula in pairs]
        name, smaller = f"`{v['name']}` ({kind}, g = {v['group']})", base["filled"] / v["filled"]
        rows.append([name, *counts, f"{smaller:g}×"])
    header = f"variant | per token | after the prefill ({data['prefill']} tokens)"
    header += f" | filled, whole sequence ({n} tokens) | allocated ({cfg['max_seq_len']} slots)"
    return markdown_table(f"{header} | smaller than MHA by", rows)


def extrapolated_table(data: dict) -> str:
    cfg, elem, n = data["config"], data["elem_bytes"], EXTRAPOLATE_N
    mha = kv_cache_bytes(cfg["n_layers"], cfg["n_heads"], cfg["head_dim"], n, elem_bytes=elem)
    rows = []
    for v in data["variants"]:
        ours = kv_cache_bytes(cfg["n_layers"], v["n_kv_heads"], cfg["head_dim"], n, elem_bytes=elem)
        sizes = [f"`{v['name']}`", size(ours // n), f"{n:,}", size(ours), f"{mha / ours:g}×"]
        rows.append([f"the lab's MiniGPT, {data['dtype']}", *sizes])
    for name, layers, heads, kv_heads, d, context, window in PUBLISHED:
        tokens = context if window is None else min(context, window)
        cached = f"{tokens:,}" + (f" (window of a {context:,} context)" if window else "")
        for kv in sorted({heads, kv_heads, 1}, reverse=True):
            per_seq = kv_cache_bytes(layers, kv, d, tokens)
            label = f"`kv{kv}`" + (" (published)" if kv == kv_heads else "")
            smaller = f"{kv_cache_bytes(layers, heads, d, tokens) / per_seq:g}×"
            sizes = [size(per_seq // tokens), cached, size(per_seq)]
            rows.append([f"{name}, fp16", label, *sizes, smaller])
    header = "model | variant | per token | tokens cached per sequence | per sequence"
    return markdown_table(f"{header} | smaller than MHA by", rows)


def runs(data: dict, variant: str, kind: str, uptrain: int = 0) -> list[dict]:
    """The runs of one variant and kind (every seed)."""
    key = (variant, kind, uptrain)
    return [r for r in data["runs"] if (r["variant"], r["kind"], r["uptrain_steps"]) == key]


def columns(data: dict) -> list[tuple[str, int, str]]:
    """(kind, uptrain steps, label) of the quality tables' columns."""
    steps, ups = data["recipe"]["steps"], data["recipe"]["uptrain_steps"]
    columns = [("scratch", 0, f"from scratch ({steps} steps)")]
    columns.append(("converted", 0, "converted, no uptraining"))
    return columns + [("uptrained", u, f"uptrained {u} steps ({u / steps:.0%})") for u in ups]


def cell(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def variants(data: dict) -> list[str]:
    return sorted({r["variant"] for r in data["runs"]}, key=lambda v: -int(v[2:]))


def per_token(kv: dict) -> dict[str, int]:
    return {v["name"]: v["filled"] // kv["tokens"] for v in kv["variants"]}


def quality_table(data: dict, kv: dict, metric: str) -> str:
    rows = []
    for v in variants(data):
        cells = [cell([r[metric] for r in runs(data, v, kind, u)]) for kind, u, _ in columns(data)]
        rows.append([f"`{v}`", f"{per_token(kv)[v]:,}", *cells])
    header = ["variant", "KV bytes per token", *(label for _, _, label in columns(data))]
    return markdown_table(header, rows)


def compare(rs: list[dict], base: list[dict], metric: str) -> list[str]:
    """[difference of means, verdict]: a difference only where the ranges over seeds are apart."""
    vals, base = [r[metric] for r in rs], [r[metric] for r in base]
    diff = statistics.mean(vals) - statistics.mean(base)
    apart = min(vals) > max(base) or max(vals) < min(base)
    verdict = ("**higher**" if diff > 0 else "**lower**") if apart else "within the spread"
    return [f"{diff:+.3f}", verdict]


def differences(data: dict) -> str:
    """Each variant against the kv8 control of its column, held-out and training loss."""
    rows = []
    for kind, u, label in columns(data):
        # the converted runs against kv8 from scratch; u = 0 unless uptrained
        base = runs(data, "kv8", "scratch" if kind == "converted" else kind, u)
        for v in variants(data)[1:]:
            rs = runs(data, v, kind, u)
            diffs = [*compare(rs, base, "heldout_loss"), *compare(rs, base, "train_loss")]
            rows.append([label, f"`{v}` − `kv8`", *diffs])
    header = "runs | compared | held-out: difference (nats) | held-out: ranges"
    return markdown_table(f"{header} | training verbs: difference | training verbs: ranges", rows)


def stems_table(data: dict) -> str:
    """Held-out loss split: the characters that repeat the verb's stem, and the others."""
    u, rows = max(data["recipe"]["uptrain_steps"]), []
    for v in variants(data):
        row = [f"`{v}`"]
        for kind, steps in (("scratch", 0), ("uptrained", u)):
            rs = runs(data, v, kind, steps)
            row += [cell([r[f"heldout_{m}_loss"] for r in rs]) for m in ("stem", "rest")]
        rows.append(row)
    header = "variant | from scratch: stem characters | from scratch: the others"
    up = f"uptrained {u} steps"
    return markdown_table(f"{header} | {up}: stem characters | {up}: the others", rows)


def quality_figure(data: dict, kv: dict) -> bytes:
    bytes_per_token = per_token(kv)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = {"scratch": ("o", "C0"), "converted": ("x", "C3"), "uptrained": ("s", "C2")}
    ups = data["recipe"]["uptrain_steps"]
    shades = {0: 1.0} | {u: 0.55 + 0.45 * i / max(1, len(ups) - 1) for i, u in enumerate(ups)}
    for offset, (kind, u, label) in zip((-0.09, -0.03, 0.03, 0.09), columns(data), strict=False):
        losses = [[r["heldout_loss"] for r in runs(data, v, kind, u)] for v in variants(data)]
        xs = [bytes_per_token[v] * 2**offset for v in variants(data)]
        ys = [statistics.mean(ls) for ls in losses]
        lo = [y - min(ls) for y, ls in zip(ys, losses, strict=True)]
        hi = [max(ls) - y for y, ls in zip(ys, losses, strict=True)]
        marker, colour = styles[kind]
        style = dict(fmt=marker + "-", color=colour, alpha=shades[u], capsize=3, linewidth=1)
        ax.errorbar(xs, ys, yerr=[lo, hi], label=label, **style)
    ax.set_xscale("log", base=2)
    ticks = sorted(bytes_per_token.values())
    names = [f"{t:,}\n{name}" for t in ticks for name, b in bytes_per_token.items() if b == t]
    ax.set_xticks(ticks, names)
    ax.set_xlabel("KV cache bytes per token (measured, float32)")
    ax.set_ylabel("held-out loss, nats per character\n(mean; bars: min to max over seeds)")
    ax.set_title("Fewer kv heads, smaller cache: held-out loss on unseen verbs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return svg(fig)


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
    table: dict = {}
    shape = (64, 4096, 32, 128, "float16", None)
    for r in load("bench-paged-decode-h200.json")["decode"]:
        at = (r["b"], r["ctx"], r["hq"], r["d"], r["dtype"], r["window"]) == shape
        at = at and r["group"] in ("b64", "heads") and r["hkv"] in KV_HEADS
        if at and r["impl"] in PAGED_IMPLS:
            table.setdefault(r["impl"], {})[r["hkv"]] = r
    for r in load("gqa-decode-h200.json")["decode"]:
        table.setdefault(r["impl"], {})[r["hkv"]] = r
    return table


def decode_table() -> str:
    table = decode_rows()
    nbytes = {h: kv_cache_bytes(1, h, 128, 4096, batch=64) for h in KV_HEADS}
    ratios = [f"{nbytes[32] / nbytes[8]:g}×", f"{nbytes[32] / nbytes[1]:g}×"]
    rows = [["K/V bytes of the cache (the step's compulsory reads)", ""]]
    rows[0] += [*(size(nbytes[h]) for h in KV_HEADS), *ratios]
    for impl, name in {**PAGED_IMPLS, **LAB04_IMPLS}.items():
        recs = table.get(impl, {})
        ms = {h: recs[h]["graph_ms"] for h in KV_HEADS}
        cells = [f"{ms[h]:.3f} ms · {recs[h]['graph_gb_per_s']:,.0f} GB/s" for h in KV_HEADS]
        ratios = [f"{ms[32] / ms[8]:.2f}×", f"{ms[32] / ms[1]:.1f}×"]
        rows.append([name, "paged" if impl in PAGED_IMPLS else "lab 04", *cells, *ratios])
    header = "one decode step of attention | data | kv32 (MHA) | kv8 (GQA) | kv1 (MQA)"
    return markdown_table(f"{header} | kv32 / kv8 | kv32 / kv1", rows)


def outputs() -> dict[str, str | bytes]:
    kv, quality = load("kv-cache-verbs.json"), load("gqa-quality.json")
    return {
        "generated/lab04-kv-verbs.md": kv_table(kv),
        "generated/lab04-kv-extrapolated.md": extrapolated_table(kv),
        "generated/lab04-quality.md": quality_table(quality, kv, "heldout_loss"),
        "generated/lab04-quality-train.md": quality_table(quality, kv, "train_loss"),
        "generated/lab04-quality-differences.md": differences(quality),
        "generated/lab04-quality-stems.md": stems_table(quality),
        "figures/lab04-quality-vs-bytes.svg": quality_figure(quality, kv),
        "generated/lab04-decode.md": decode_table(),
    }

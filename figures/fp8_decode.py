"""Lab 03 part 2's tables and figure of the 8-bit cache: the prediction, the rounding's accuracy
(float64, PyTorch) and the H200 measurement (data/fp8-decode-h200.json)."""

import torch

from figures.core import copy_rate, h200_measured, load, markdown_table, roofline_svg, run_caption
from minimodel.ceilings import HARDWARE
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.paged_attention import dequantize_kv, quantize_kv
from minimodel.reference import attention_ref
from minimodel.roofline import attention_flops, kv_cache_bytes, scaled_kv_cache_bytes
from minimodel.roofline_plot import RooflinePoint
from minimodel.verbs import tokenizer, verb_sequence

B, N, HQ, HKV, D = 64, 4096, 32, 8, 128  # the shape: bench/fp8_decode.py's
VERB = {"max_seq_len": 64, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2}
VERB_CONFIG = MiniGPTConfig(vocab_size=tokenizer().vocab_size, **VERB)  # tests/test_paged_fp8.py's


def caches() -> list[dict]:
    """The two caches of one decode step at the issue's shape: bytes, FLOPs."""
    flops = attention_flops(B, HQ, 1, N, D, causal=True)
    caches = {"16-bit": kv_cache_bytes, "e4m3 + float32 scales": scaled_kv_cache_bytes}
    return [
        {"name": name, "token": f(1, HKV, D, 1), "step": f(1, HKV, D, N, batch=B), "flops": flops}
        for name, f in caches.items()
    ]


def prediction() -> str:
    bandwidth = h200_measured().bandwidth
    rows, base = [], None
    for c in caches():
        seconds = c["step"] / bandwidth
        base = base or seconds
        cells = [f"{c['token']:,}", f"{c['step'] / 2**20:,.0f}", f"{c['flops'] / 1e9:.2f}"]
        times = [f"{seconds * 1e6:.1f}", f"{B / seconds / 1e6:.3f}", f"{base / seconds:.2f}"]
        rows.append([c["name"], *cells, f"{c['flops'] / c['step']:.2f}", *times])
    header = "cache | bytes per token (one layer) | MiB per step | GFLOP per step"
    header += " | intensity (FLOP/B) | µs at the copy rate | M tokens/s at the copy rate"
    return markdown_table(f"{header} | vs 16-bit", rows, f"Copy rate: {bandwidth / 1e9:,.0f} GB/s.")


def rounded(x: torch.Tensor, how: str) -> torch.Tensor:
    """x as a cache of `how` stores it, in float64: 'e4m3' per token and kv head, 'float16'."""
    if how == "e4m3":
        return dequantize_kv(*quantize_kv(x), torch.float64)
    return x.half().double()


def verb_model() -> tuple[MiniGPT, torch.Tensor]:
    """MiniGPT of seed-0 weights in float64, and the verb sequence."""
    torch.manual_seed(0)
    return MiniGPT(VERB_CONFIG).double().eval(), torch.tensor([verb_sequence()])


def verb_qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each layer's last query of the verb sequence and its keys and values, a layer per row."""
    seen = []

    def record(q, k, v, **mask):
        seen.append((q[0, :, -1], k[0], v[0]))
        return attention_ref(q, k, v, **mask)

    model, tokens = verb_model()
    with torch.no_grad():
        model(tokens, attn=record)
    return tuple(torch.stack(layers) for layers in zip(*seen, strict=True))


def rms(t: torch.Tensor) -> float:
    return t.pow(2).mean().sqrt().item()


def accuracy() -> str:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(8, HQ, D, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(8, HKV, 1024, D, generator=gen).double() for _ in "kv")
    data = [
        ("random N(0, 1), 8 x 1,024 keys, GQA 32/8, d = 128", q, k, v),
        ("the verb sequence: MiniGPT's 2 layers, 64 keys, 4/2 heads, d = 16", *verb_qkv()),
    ]
    rows = []
    for name, q, k, v in data:
        out = lambda keys, values, q=q: attention_ref(q[:, :, None], keys, values)[:, :, 0]
        ref = out(k, v)  # one decode row per sequence
        e8, e16 = (out(rounded(k, how), rounded(v, how)) - ref for how in ("e4m3", "float16"))
        errors = [f"{rms(e8):.2e}", f"{rms(e16):.2e}", f"{rms(e8) / rms(e16):.0f}"]
        rows.append([name, *errors, *(f"{e.abs().max().item():.2e}" for e in (e8, e16))])
    header = "attention inputs | e4m3: RMS error | 16-bit: RMS error | ratio of RMS"
    table = markdown_table(f"{header} | e4m3: largest error | 16-bit: largest error", rows)
    model, tokens = verb_model()
    attn = lambda how: lambda q, k, v, **m: attention_ref(q, rounded(k, how), rounded(v, how), **m)
    with torch.no_grad():
        want = model(tokens)[0]
        logits = {how: model(tokens, attn=attn(how))[0] for how in ("float16", "e4m3")}
    rows = []
    for how, got in logits.items():
        same = (got.argmax(-1) == want.argmax(-1)).sum().item()
        name = "16-bit" if how == "float16" else "e4m3 + float32 scales"
        error = [f"{rms(got - want):.2e}", f"{(got - want).abs().max().item():.2e}"]
        rows.append([name, *error, f"{same} of {len(want)}"])
    top2 = want.topk(2, -1).values
    margin = f"smallest top-two margin {(top2[:, 0] - top2[:, 1]).min().item():.2f}"
    header = "cache | RMS logit error | largest logit error | next token as the float64 pass's"
    caption = f"The float64 pass's logits: RMS {rms(want):.1f}, {margin}."
    return f"{table}\n{markdown_table(header, rows, caption)}"


def measured(data: dict) -> str:
    copy, recs = copy_rate(data), {r["impl"]: r for r in data["records"]}
    base, batch, rows = recs["fp16_paged"], data["shape"]["b"], []
    for r in data["records"]:
        seconds = r["graph_ms"] * 1e-3
        cells = [f"`{r['impl']}`", f"{r['graph_ms'] * 1e3:.1f}", f"{r['kv_bytes'] / 2**20:,.0f}"]
        cells += [f"{r['graph_gb_per_s']:,.0f}", f"{r['graph_gb_per_s'] * 1e9 / copy:.0%}"]
        cells += [f"{batch / seconds / 1e6:.3f}", f"{base['graph_ms'] / r['graph_ms']:.2f}"]
        rows.append([*cells, f"{r['max_err_vs_float32_drawn']:.1e}"])
    rounds = len(recs["fp8_paged"]["graph_ms_runs"])
    header = "call | graph µs | MiB read | GB/s | of the copy rate | M tokens/s"
    header += " | tokens/s vs 16-bit paged | largest error vs float32"
    run = run_caption(data["environment"])
    caption = f"{run}; medians of {rounds}; copy rate {copy / 1e9:,.0f} GB/s."
    return markdown_table(header, rows, caption)


def roofline(data: dict) -> bytes:
    points = [RooflinePoint(f"{c['name']} (predicted)", c["flops"] / c["step"]) for c in caches()]
    names, f = {"fp16_paged": "16-bit paged", "fp8_paged": "e4m3 paged"}, data["flops"]
    for r in (r for r in data["records"] if r["impl"] in names):
        rate = f / (r["graph_ms"] * 1e-3)
        points.append(RooflinePoint(f"{names[r['impl']]} (H200)", f / r["kv_bytes"], rate))
    title = f"Decode attention, one layer, B={B}, N={N}, GQA {HQ}/{HKV}, d={D}"
    return roofline_svg([h200_measured(), HARDWARE["H200"]], points, title=title)


def outputs() -> dict[str, str | bytes]:
    data = load("fp8-decode-h200.json")
    return {
        "generated/fp8-decode-prediction.md": prediction(),
        "generated/fp8-accuracy.md": accuracy(),
        "generated/fp8-decode-measured.md": measured(data),
        "figures/fp8-decode-roofline.svg": roofline(data),
    }

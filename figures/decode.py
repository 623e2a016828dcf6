"""Theory 04's table and roofline of decode attention (MHA, GQA, MQA, MLA), compulsory bytes from
minimodel.roofline on the H200's measured roofs."""

from figures.core import h200_measured, markdown_table, roofline_svg
from minimodel import roofline as r
from minimodel.ceilings import HARDWARE
from minimodel.roofline_plot import RooflinePoint

BATCH, CONTEXT = 64, 4096


def layouts() -> list[tuple]:
    """(name, heads, layers, cache bytes per token, FLOPs, bytes) of one decode step, fp16."""
    flops = r.attention_flops(BATCH, 32, 1, CONTEXT, 128)
    rows = [
        (name, f"32 / {hkv}", 32, r.kv_cache_bytes(32, hkv, 128, 1), flops)
        + (r.attention_min_bytes(BATCH, 32, hkv, 1, CONTEXT, 128),)
        for name, hkv in (("MHA", 32), ("GQA, 8 kv heads", 8), ("MQA", 1))
    ]
    # DeepSeek-V2's sizes: 128 heads, d_c = 512, d_R = 64, 60 layers
    mla = [f(BATCH, 128, CONTEXT, 512, 64) for f in (r.mla_decode_flops, r.mla_decode_bytes)]
    mla_cache = r.mla_cache_bytes(60, 512, 64, 1)
    return [*rows, ("MLA (DeepSeek-V2 sizes)", "128 / latent", 60, mla_cache, *mla)]


def outputs() -> dict[str, str | bytes]:
    roof, rows = h200_measured(), []
    for name, heads, layers, per_token, flops, nbytes in layouts():
        i = flops / nbytes
        rate, bound = roof.attainable(i), "memory" if i < roof.ridge else "compute"
        cache = [f"{per_token / 1024:,.1f} ({layers})"]
        cache.append(f"{per_token * CONTEXT * BATCH / 2**30:,.1f}")
        rates = [f"{rate / 1e12:,.0f}", f"{flops / rate * 1e6:,.1f}"]
        rows.append([name, heads, *cache, f"{i:,.1f}", bound, *rates])
    header = "layout | heads (q / kv) | cache KiB per token (layers)"
    header += f" | cache GiB at B={BATCH}, N={CONTEXT} | decode I (FLOP/B)"
    header += f" | bound (ridge {roof.ridge:.0f}) | attainable TFLOP/s | floor µs per layer"
    points = [RooflinePoint(name, flops / nbytes) for name, _, _, _, flops, nbytes in layouts()]
    title = f"Decode attention, one layer, B={BATCH}, N={CONTEXT}, fp16"
    return {
        "generated/decode-layouts.md": markdown_table(header, rows),
        "figures/roofline-decode.svg": roofline_svg([roof, HARDWARE["H200"]], points, title=title),
    }

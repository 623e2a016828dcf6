"""Table and figure of Theory 04 (decode attention for MHA, GQA, MQA and MLA), computed by
minimodel.roofline, with the H200's measured ceilings from data/ceilings-h200.json.

Every row counts the same bytes, the compulsory ones: queries read, the cache read once, outputs
written (attention_min_bytes at N_q = 1; mla_decode_bytes for MLA's absorbed queries and latent
outputs).

    python -m figures.decode            # write docs/generated/decode-layouts.md and the figure
    python -m figures.decode --check    # fail if they are stale
"""

from figures.core import emit, h200_measured, markdown_table, roofline_svg
from minimodel.ceilings import HARDWARE, Ceilings
from minimodel.roofline import (
    attention_flops,
    attention_min_bytes,
    kv_cache_bytes,
    mla_cache_bytes,
    mla_decode_bytes,
    mla_decode_flops,
)
from minimodel.roofline_plot import RooflinePoint

BATCH, CONTEXT = 64, 4096


def layouts() -> list[dict]:
    """One decode step of one layer, batch 64 at a 4096-token context, fp16."""
    rows = []
    for name, hkv in (("MHA", 32), ("GQA, 8 kv heads", 8), ("MQA", 1)):
        rows.append(
            {
                "name": name,
                "heads": f"32 / {hkv}",
                "layers": 32,
                "cache_token": kv_cache_bytes(32, hkv, 128, 1),
                "flops": attention_flops(BATCH, 32, 1, CONTEXT, 128),
                "bytes": attention_min_bytes(BATCH, 32, hkv, 1, CONTEXT, 128),
            }
        )
    rows.append(
        {  # DeepSeek-V2's sizes: 128 heads, d_c = 512, d_R = 64, 60 layers
            "name": "MLA (DeepSeek-V2 sizes)",
            "heads": "128 / latent",
            "layers": 60,
            "cache_token": mla_cache_bytes(60, 512, 64, 1),
            "flops": mla_decode_flops(BATCH, 128, CONTEXT, 512, 64),
            "bytes": mla_decode_bytes(BATCH, 128, CONTEXT, 512, 64),
        }
    )
    return rows


def table(roof: Ceilings) -> str:
    out = []
    for r in layouts():
        intensity = r["flops"] / r["bytes"]
        rate = roof.attainable(intensity)
        out.append(
            [
                r["name"],
                r["heads"],
                f"{r['cache_token'] / 1024:,.1f} ({r['layers']})",
                f"{r['cache_token'] * CONTEXT * BATCH / 2**30:,.1f}",
                f"{intensity:,.1f}",
                "memory" if intensity < roof.ridge else "compute",
                f"{rate / 1e12:,.0f}",
                f"{r['flops'] / rate * 1e6:,.1f}",
            ]
        )
    header = [
        "layout",
        "heads (q / kv)",
        "cache KiB per token (layers)",
        f"cache GiB at B={BATCH}, N={CONTEXT}",
        "decode I (FLOP/B)",
        f"bound (ridge {roof.ridge:.0f})",
        "attainable TFLOP/s",
        "floor µs per layer",
    ]
    return markdown_table(header, out)


def outputs() -> dict[str, str | bytes]:
    roof = h200_measured()
    points = [RooflinePoint(r["name"], r["flops"] / r["bytes"]) for r in layouts()]
    return {
        "generated/decode-layouts.md": table(roof),
        "figures/roofline-decode.svg": roofline_svg(
            [roof, HARDWARE["H200"]],
            points,
            title=f"Decode attention, one layer, B={BATCH}, N={CONTEXT}, fp16",
        ),
    }


if __name__ == "__main__":
    emit(outputs())

"""Tables of Theory 03 (sliding windows, paged KV caches), computed by minimodel.roofline.

python -m figures.paged            # write docs/generated/window-work.md, paged-*.md
python -m figures.paged --check    # fail if they are stale
"""

import math

from figures.core import emit, markdown_table
from minimodel.roofline import attention_flops, flash_attention_bytes, kv_cache_bytes

W, H, D = 4096, 16, 128
# 16 sequences of a serving batch, of lengths up to the 4096-token limit (an example mix).
LENGTHS = [37, 112, 250, 401, 512, 640, 777, 1024, 1200, 1500, 1800, 2048, 2500, 3000, 3500, 4096]
MAX_LEN, LAYERS, KV_HEADS = 4096, 32, 8
GIB = 2**30


def window_table() -> str:
    rows = []
    for n in (4096, 16384, 65536):
        tiles = {"block_m": 128, "block_n": 64}
        f_causal = attention_flops(1, H, n, n, D, causal=True)
        f_win = attention_flops(1, H, n, n, D, causal=True, window=W)
        b_causal = flash_attention_bytes(1, H, H, n, n, D, causal=True, **tiles)
        b_win = flash_attention_bytes(1, H, H, n, n, D, causal=True, window=W, **tiles)
        rows.append(
            [
                f"{n:,}",
                f"{f_causal / 1e9:,.0f}",
                f"{f_win / 1e9:,.0f}",
                f"{f_win / f_causal:.2f}",
                f"{b_causal / 2**20:,.0f}",
                f"{b_win / 2**20:,.0f}",
                f"{b_win / b_causal:.2f}",
            ]
        )
    header = [
        "N",
        "causal GFLOP",
        f"window W={W:,} GFLOP",
        "FLOP ratio",
        "causal MiB (no reuse)",
        "window MiB (no reuse)",
        "byte ratio",
    ]
    return markdown_table(header, rows)


def reservation_table() -> str:
    used = sum(LENGTHS)
    layouts = [("contiguous, max_seq_len 4,096", len(LENGTHS) * MAX_LEN)]
    layouts += [(f"paged, b = {b}", sum(b * math.ceil(n / b) for n in LENGTHS)) for b in (16, 128)]
    layouts += [("tokens actually cached", used)]
    rows = []
    for name, slots in layouts:
        nbytes = kv_cache_bytes(LAYERS, KV_HEADS, D, slots)
        per_seq = nbytes / len(LENGTHS)
        rows.append(
            [
                name,
                f"{slots:,}",
                f"{nbytes / GIB:.2f}",
                f"{used / slots:.1%}",
                f"{int(40 * GIB // per_seq):,}",
            ]
        )
    header = [
        "layout",
        "token slots reserved",
        "GiB",
        "slots in use",
        "sequences of this mix in 40 GiB",
    ]
    return markdown_table(header, rows)


def outputs() -> dict[str, str | bytes]:
    return {
        "generated/window-work.md": window_table(),
        "generated/paged-reservation.md": reservation_table(),
    }


if __name__ == "__main__":
    emit(outputs())

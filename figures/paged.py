"""Theory 03's tables: what a sliding window saves and what each KV-cache layout reserves."""

import math

from figures.core import markdown_table
from minimodel.roofline import attention_flops, flash_attention_bytes, kv_cache_bytes

W, H, D = 4096, 16, 128
# 16 sequences of a serving batch, of lengths up to the 4096-token limit (an example mix).
LENGTHS = [37, 112, 250, 401, 512, 640, 777, 1024, 1200, 1500, 1800, 2048, 2500, 3000, 3500, 4096]
MAX_LEN, LAYERS, KV_HEADS = 4096, 32, 8
GIB = 2**30


def window_table() -> str:
    rows = []
    for n in (4096, 16384, 65536):
        tiles = {"causal": True, "block_m": 128, "block_n": 64}
        flops = [attention_flops(1, H, n, n, D, causal=True, window=w) for w in (None, W)]
        nbytes = [flash_attention_bytes(1, H, H, n, n, D, window=w, **tiles) for w in (None, W)]
        cells = [*(f"{f / 1e9:,.0f}" for f in flops), f"{flops[1] / flops[0]:.2f}"]
        cells += [*(f"{b / 2**20:,.0f}" for b in nbytes), f"{nbytes[1] / nbytes[0]:.2f}"]
        rows.append([f"{n:,}", *cells])
    header = f"N | causal GFLOP | window W={W:,} GFLOP | FLOP ratio | causal MiB (no reuse)"
    return markdown_table(f"{header} | window MiB (no reuse) | byte ratio", rows)


def reservation_table() -> str:
    used = sum(LENGTHS)
    layouts = [("contiguous, max_seq_len 4,096", len(LENGTHS) * MAX_LEN)]
    layouts += [(f"paged, b = {b}", sum(b * math.ceil(n / b) for n in LENGTHS)) for b in (16, 128)]
    layouts += [("tokens actually cached", used)]
    rows = []
    for name, slots in layouts:
        nbytes = kv_cache_bytes(LAYERS, KV_HEADS, D, slots)
        per_seq = nbytes / len(LENGTHS)
        fit = f"{int(40 * GIB // per_seq):,}"
        rows.append([name, f"{slots:,}", f"{nbytes / GIB:.2f}", f"{used / slots:.1%}", fit])
    header = "layout | token slots reserved | GiB | slots in use | sequences of this mix in 40 GiB"
    return markdown_table(header, rows)


def outputs() -> dict[str, str | bytes]:
    return {
        "generated/window-work.md": window_table(),
        "generated/paged-reservation.md": reservation_table(),
    }

# ~/~ begin <<docs/lab/05-exam.md#src/minimodel/predictions.py>>[init]
"""The exam's answers: the six variants of docs/lab/05-exam.md placed on the H200's roofline
before they run (FLOPs, bytes, intensity, roof, time), written as a learner writes them.

Tangled from docs/lab/05-exam.md; edit the page, not this file. The course's own predictions,
data/exam-predictions.json, are made independently from minimodel.roofline by
`python -m bench.exam --predict`; the lab's tests hold this module to them.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import minimodel
from minimodel.ceilings import Ceilings

__all__ = ["ROOF_NAMES", "Prediction", "cross_attention", "fp8_kv_decode", "h200_roofs",
           "mixed_batch", "mqa_decode", "sliding_window_prefill", "verification"]

# ~/~ begin <<docs/lab/05-exam.md#exam-prediction-type>>[init]
ROOF_NAMES = ("memory", "compute")


@dataclass(frozen=True)
class Prediction:
    """Where one call lands on the H200's roofline, predicted before it runs."""

    flops: int  # F: the matrix FLOPs of the call, 4 d Hq over its visible (query, key) pairs
    nbytes: int  # the compulsory bytes: every input read once, every output written once
    intensity: float  # I = F / nbytes, FLOP per byte
    roof: str  # "memory" or "compute": the roof that bounds the call at I
    time_us: float  # the predicted time of one call on the H200, in microseconds

    def __post_init__(self):
        if self.roof not in ROOF_NAMES:
            raise ValueError(f"roof must be one of {ROOF_NAMES}, got {self.roof!r}")
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-roofs>>[init]
DATA = Path(minimodel.__file__).resolve().parents[2] / "data"  # the repository's data/


def h200_roofs() -> Ceilings:
    """The H200's measured roofs, the ones the pages since Theory 02 predict with: pi, the fp16
    matmul rate, and beta, the copy rate, of data/ceilings-h200.json; R_exp, the exp2 rate of
    data/mufu-h200.json. attention_roof(d) of the result is attention's compute roof at head
    dim d, matrix products and exponentials taking turns."""
    c = json.loads((DATA / "ceilings-h200.json").read_text())["ceilings"]
    exp_rate = json.loads((DATA / "mufu-h200.json").read_text())["mufu"]["exp2_per_s"]
    return Ceilings(c["name"], c["peak_flops"], c["bandwidth"], l2_bytes=c.get("l2_bytes"),
                    smem_per_sm_bytes=c.get("smem_per_sm_bytes"), source=c.get("source", ""),
                    exp_rate=exp_rate, measured=True)
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-placed>>[init]
def _placed(flops: int, nbytes: int, head_dim: int) -> Prediction:
    """A call of `flops` FLOPs that moves `nbytes` bytes, on the H200's roofs: the slower of
    its compute time and its memory time."""
    roofs = h200_roofs()
    compute_s = flops / roofs.attention_roof(head_dim)  # products and exponentials take turns
    memory_s = nbytes / roofs.bandwidth
    roof = "memory" if memory_s >= compute_s else "compute"
    return Prediction(flops, nbytes, flops / nbytes, roof, 1e6 * max(compute_s, memory_s))
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-fp8>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-fp8-interface>>[init]
def fp8_kv_decode() -> dict[str, Prediction]:
    """Variant 1: one decode step, B = 16, 16,384 keys, 64 query heads on 8 kv heads, d = 128.
    Cases "fp8" (K and V in float8_e4m3fn with a float32 scale per token, kv head and tensor)
    and "fp16" (the 16-bit cache)."""
# ~/~ end
    b, hq, hkv, nk, d = 16, 64, 8, 16384, 128
    flops = 4 * b * hq * nk * d  # one query per sequence sees all nk keys
    q_and_o = 2 * (2 * b * hq * d)  # the fp16 queries read, the fp16 outputs written
    kv_fp8 = 2 * b * hkv * nk * d * 1  # K and V, one byte an element
    scales = 2 * b * hkv * nk * 4  # one float32 per token, kv head and tensor (K, V)
    kv_fp16 = 2 * b * hkv * nk * d * 2
    return {"fp8": _placed(flops, q_and_o + kv_fp8 + scales, d),
            "fp16": _placed(flops, q_and_o + kv_fp16, d)}
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-verification>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-verification-interface>>[init]
def verification() -> dict[str, Prediction]:
    """Variant 2: k new tokens per sequence, causal among themselves, the last k of 4,096 keys,
    B = 64, 32 query heads on 8 kv heads, d = 128. Cases "k2", "k4", "k8"."""
# ~/~ end
    b, hq, hkv, nk, d = 64, 32, 8, 4096, 128
    cache = 2 * (2 * b * hkv * nk * d)  # K and V, read once whatever k is
    out = {}
    for k in (2, 4, 8):
        pairs = k * nk - k * (k - 1) // 2  # token i of k sees nk - k + i + 1 keys
        rows = 2 * (2 * b * hq * k * d)  # k query rows read, k output rows written, per head
        out[f"k{k}"] = _placed(4 * b * hq * d * pairs, rows + cache, d)
    return out
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-mixed>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-mixed-interface>>[init]
def mixed_batch() -> dict[str, Prediction]:
    """Variant 3: an 8,192-token prompt (causal, no earlier cache) and one decode step of each of
    63 sequences of 4,096 keys, 32 query heads on 8 kv heads, d = 128. Cases "mixed" (one call),
    "prefill" (the prompt alone), "decode" (the 63 steps alone)."""
# ~/~ end
    hq, hkv, d = 32, 8, 128
    n, steps, ctx = 8192, 63, 4096  # the prompt's tokens, the decode steps, a step's keys
    prompt_pairs = n * (n + 1) // 2  # causal over its own tokens
    step_pairs = steps * ctx  # one query per sequence, every key visible

    def nbytes(rows: int, keys: int) -> int:  # rows read and written, keys read, all fp16
        return 2 * (2 * hq * rows * d) + 2 * (2 * hkv * keys * d)

    return {
        "mixed": _placed(4 * hq * d * (prompt_pairs + step_pairs),
                         nbytes(n + steps, n + steps * ctx), d),
        "prefill": _placed(4 * hq * d * prompt_pairs, nbytes(n, n), d),
        "decode": _placed(4 * hq * d * step_pairs, nbytes(steps, steps * ctx), d),
    }
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-window>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-window-interface>>[init]
def sliding_window_prefill() -> dict[str, Prediction]:
    """Variant 4: self-attention over N = 65,536 tokens, B = 1, 32 query heads on 4 kv heads,
    d = 64. Cases "window" (causal, W = 2,048) and "causal" (no window)."""
# ~/~ end
    n, w, hq, hkv, d = 65536, 2048, 32, 4, 64
    window_pairs = w * (w + 1) // 2 + (n - w) * w  # rows 0..w-1 see 1..w keys, the rest w
    causal_pairs = n * (n + 1) // 2
    nbytes = 2 * (2 * hq * n * d) + 2 * (2 * hkv * n * d)  # both read every key once
    return {"window": _placed(4 * hq * d * window_pairs, nbytes, d),
            "causal": _placed(4 * hq * d * causal_pairs, nbytes, d)}
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-cross>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-cross-interface>>[init]
def cross_attention() -> dict[str, Prediction]:
    """Variant 5: 64 queries against 4,096 encoder keys, no mask, B = 64, 32 heads (MHA),
    d = 128. Case "cross"."""
# ~/~ end
    b, h, nq, nk, d = 64, 32, 64, 4096, 128
    flops = 4 * b * h * nq * nk * d  # no mask: every pair
    nbytes = 2 * (2 * b * h * nq * d) + 2 * (2 * b * h * nk * d)
    return {"cross": _placed(flops, nbytes, d)}
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-mqa>>[init]
# ~/~ begin <<docs/lab/05-exam.md#exam-mqa-interface>>[init]
def mqa_decode() -> dict[str, Prediction]:
    """Variant 6: one decode step, B = 256, 2,048 keys, 64 query heads, d = 128. Cases "mqa"
    (one kv head) and "gqa8" (8 kv heads)."""
# ~/~ end
    b, hq, nk, d = 256, 64, 2048, 128
    flops = 4 * b * hq * nk * d

    def nbytes(hkv: int) -> int:  # the queries and outputs, then the cache of hkv heads
        return 2 * (2 * b * hq * d) + 2 * (2 * b * hkv * nk * d)

    return {"mqa": _placed(flops, nbytes(1), d), "gqa8": _placed(flops, nbytes(8), d)}
# ~/~ end
# ~/~ end

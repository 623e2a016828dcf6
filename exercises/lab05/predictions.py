# ~/~ begin <<docs/lab/05-exam.md#exercises/lab05/predictions.py>>[init]
"""Lab 05: the exam. Fill in every body that raises NotImplementedError.

Skeleton tangled from docs/lab/05-exam.md (`make exercise LAB=05` copies it to mywork/); check
it with `make check-mine LAB=05`. The counts you may call are in minimodel.roofline
(attention_flops, visible_pairs, attention_min_bytes); the roofs are h200_roofs() below.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import minimodel
from minimodel.ceilings import Ceilings

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


# ~/~ begin <<docs/lab/05-exam.md#exam-fp8-interface>>[init]
def fp8_kv_decode() -> dict[str, Prediction]:
    """Variant 1: one decode step, B = 16, 16,384 keys, 64 query heads on 8 kv heads, d = 128.
    Cases "fp8" (K and V in float8_e4m3fn with a float32 scale per token, kv head and tensor)
    and "fp16" (the 16-bit cache)."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: fp8_kv_decode: the step's FLOPs, and its bytes with one-byte keys and "
        "values plus their scales"
    )


# ~/~ begin <<docs/lab/05-exam.md#exam-verification-interface>>[init]
def verification() -> dict[str, Prediction]:
    """Variant 2: k new tokens per sequence, causal among themselves, the last k of 4,096 keys,
    B = 64, 32 query heads on 8 kv heads, d = 128. Cases "k2", "k4", "k8"."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: verification: the visible pairs of k tokens at the end of the keys"
    )


# ~/~ begin <<docs/lab/05-exam.md#exam-mixed-interface>>[init]
def mixed_batch() -> dict[str, Prediction]:
    """Variant 3: an 8,192-token prompt (causal, no earlier cache) and one decode step of each of
    63 sequences of 4,096 keys, 32 query heads on 8 kv heads, d = 128. Cases "mixed" (one call),
    "prefill" (the prompt alone), "decode" (the 63 steps alone)."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: mixed_batch: one call over sequences of two lengths, and each alone"
    )


# ~/~ begin <<docs/lab/05-exam.md#exam-window-interface>>[init]
def sliding_window_prefill() -> dict[str, Prediction]:
    """Variant 4: self-attention over N = 65,536 tokens, B = 1, 32 query heads on 4 kv heads,
    d = 64. Cases "window" (causal, W = 2,048) and "causal" (no window)."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: sliding_window_prefill: the pairs a window keeps, and the bytes"
    )


# ~/~ begin <<docs/lab/05-exam.md#exam-cross-interface>>[init]
def cross_attention() -> dict[str, Prediction]:
    """Variant 5: 64 queries against 4,096 encoder keys, no mask, B = 64, 32 heads (MHA),
    d = 128. Case "cross"."""
# ~/~ end
    raise NotImplementedError("not written yet: cross_attention: no mask, Nq != Nk")


# ~/~ begin <<docs/lab/05-exam.md#exam-mqa-interface>>[init]
def mqa_decode() -> dict[str, Prediction]:
    """Variant 6: one decode step, B = 256, 2,048 keys, 64 query heads, d = 128. Cases "mqa"
    (one kv head) and "gqa8" (8 kv heads)."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: mqa_decode: one step with one kv head, and with eight"
    )
# ~/~ end

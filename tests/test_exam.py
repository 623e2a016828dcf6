# ~/~ begin <<docs/lab/05-exam.md#tests/test_exam.py>>[init]
"""The course's side of the exam (tangled from docs/lab/05-exam.md): the counts the exam added
to minimodel.roofline, the roofs, and the committed predictions against the models."""

import json

import pytest

from bench import exam
from figures.core import h200_measured
from minimodel import predictions
from minimodel.predictions import h200_roofs
from minimodel.reference import visible_mask
from minimodel.roofline import (
    attention_flops,
    attention_min_bytes,
    varlen_attention_flops,
    varlen_attention_min_bytes,
)


# ~/~ begin <<docs/lab/05-exam.md#exam-check-varlen>>[init]
@pytest.mark.parametrize(("causal", "window"), [(False, None), (True, None), (True, 3)])
def test_varlen_flops_count_each_sequence_s_own_mask(causal, window):
    seqs = [(5, 9), (1, 4), (7, 7), (9, 5)]
    pairs = sum(int(visible_mask(nq, nk, causal=causal, window=window).sum()) for nq, nk in seqs)
    assert varlen_attention_flops(3, 16, seqs, causal=causal, window=window) == 4 * 3 * 16 * pairs


@pytest.mark.parametrize(("b", "hq", "hkv", "nq", "nk", "d"),
                         [(1, 1, 1, 1, 1, 8), (4, 8, 2, 3, 17, 64), (16, 64, 8, 1, 16384, 128)])
def test_varlen_equals_the_uniform_counts(b, hq, hkv, nq, nk, d):
    seqs = [(nq, nk)] * b
    assert varlen_attention_flops(hq, d, seqs, causal=True) == attention_flops(
        b, hq, nq, nk, d, causal=True)
    for e in (1, 2, 4):
        assert varlen_attention_min_bytes(hq, hkv, d, seqs, elem_bytes=e) == \
            attention_min_bytes(b, hq, hkv, nq, nk, d, elem_bytes=e)


def test_varlen_bytes_by_hand():
    # Hq = 2, Hkv = 1, d = 4: a prompt of 3 tokens and a decode step against 5 keys.
    # rows 3 + 1 = 4: 2 heads x 4 rows x 4 elements x 2 bytes, read and written = 128;
    # keys 3 + 5 = 8: K and V, 1 head x 8 tokens x 4 elements x 2 bytes each = 128.
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)]) == 128 + 128
    # the same cache in one byte an element with a 4-byte scale per token, head and tensor:
    # K and V, 1 head x 8 tokens x (4 x 1 + 4) bytes each = 128
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)], kv_elem_bytes=1,
                                      kv_scale_bytes=4) == 128 + 128
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)], kv_elem_bytes=1) == 128 + 64


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: varlen_attention_flops(2, 8, []), r"seqs must be a non-empty list"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4), (0, 4)]), r"seqs\[1\] nq must be"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4, 5)]), r"seqs\[0\] must be an \(nq, nk\)"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4)], window=2), r"window=2 needs causal"),
        (lambda: varlen_attention_min_bytes(3, 2, 8, [(1, 4)]), r"Hq=3 .* Hkv=2"),
        (lambda: varlen_attention_min_bytes(2, 1, 8, [(1, 4)], kv_elem_bytes=0),
         r"kv_elem_bytes must be a positive int, got 0"),
        (lambda: varlen_attention_min_bytes(2, 1, 8, [(1, 4)], kv_scale_bytes=-4),
         r"kv_scale_bytes must be a non-negative int, got -4"),
    ],
)
def test_varlen_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-check-course>>[init]
def test_the_roofs_are_the_figures_roofs():
    assert h200_roofs() == h200_measured()


def test_the_key_covers_every_variant_of_the_task():
    cases = {(c["function"], c["case"]) for c in json.loads(exam.PREDICTIONS.read_text())["cases"]}
    assert {f for f, _ in cases} == set(predictions.__all__) - {"ROOF_NAMES", "Prediction",
                                                                 "h200_roofs"}
    assert len(cases) == 13


def test_a_prediction_names_a_roof():
    with pytest.raises(ValueError, match="roof must be one of .*'bandwidth'"):
        predictions.Prediction(1, 1, 1.0, "bandwidth", 1.0)


def test_the_committed_key_is_the_models_today():
    committed = json.loads(exam.PREDICTIONS.read_text())
    fresh = json.loads(json.dumps(exam.predict()))  # tuples become lists, as committed
    assert committed["roofs"] == fresh["roofs"]
    assert committed["cases"] == fresh["cases"]
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/theory/00-motivation.md#tests/test_roofline.py>>[init]
"""Checks of the roofline model (tangled from docs/theory/00-motivation.md)."""

import pytest

from minimodel.reference import visible_mask
from minimodel.roofline import (
    HARDWARE,
    Ceilings,
    RooflinePoint,
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    decoder_layer_costs,
    measure_ceilings,
    naive_attention_bytes,
    plot_roofline,
    visible_pairs,
)


# ~/~ begin <<docs/theory/00-motivation.md#roofline-check>>[init]
@pytest.mark.parametrize(
    ("nq", "nk", "causal", "window"),
    [(1, 1, False, None), (7, 7, True, None), (5, 9, True, None), (9, 5, True, None),
     (64, 64, True, 8), (17, 100, True, 30), (100, 17, True, 3), (13, 13, True, 50)],
)
def test_visible_pairs_matches_the_reference_mask(nq, nk, causal, window):
    mask = visible_mask(nq, nk, causal=causal, window=window)
    assert visible_pairs(nq, nk, causal=causal, window=window) == int(mask.sum())


def test_causal_square_is_n_times_n_plus_one_over_two():
    assert visible_pairs(2048, 2048, causal=True) == 2048 * 2049 // 2
    assert attention_flops(1, 1, 2048, 2048, 64) == 4 * 2048 * 2048 * 64


def test_intensity_limits():
    n, d = 1 << 15, 64
    flops = attention_flops(1, 1, n, n, d)
    naive = arithmetic_intensity(flops, naive_attention_bytes(1, 1, 1, n, n, d))
    best = arithmetic_intensity(flops, attention_min_bytes(1, 1, 1, n, n, d))
    assert naive == pytest.approx(n * d / (2 * (n + d)))  # -> d / e
    assert best == pytest.approx(n / 2)  # N / e


def test_gqa_shrinks_only_the_kv_bytes():
    mha = attention_min_bytes(1, 32, 32, 1, 4096, 128)
    gqa = attention_min_bytes(1, 32, 8, 1, 4096, 128)
    kv_mha = 2 * 2 * 32 * 4096 * 128
    assert mha - gqa == kv_mha * 3 // 4


def test_attainable_and_ridge():
    h200 = HARDWARE["H200"]
    assert h200.ridge == pytest.approx(989.4e12 / 4.8e12)
    assert h200.attainable(1.0) == pytest.approx(4.8e12)
    assert h200.attainable(1e6) == h200.peak_flops


def test_decoder_layer_costs_ratio():
    costs = decoder_layer_costs(4096, 32, 32, context=24576)
    assert costs.attn_flops == pytest.approx(costs.proj_flops)  # N / (6 D) = 1
    gqa = decoder_layer_costs(4096, 32, 8, context=24576)
    assert gqa.kv_bytes * 4 == costs.kv_bytes


def test_measure_ceilings_on_this_machine():
    c = measure_ceilings("cpu", matmul_n=128, copy_bytes=1 << 20, reps=3)
    assert c.peak_flops > 1e6 and c.bandwidth > 1e6 and "measured" in c.name


def test_plot_writes_a_figure(tmp_path):
    path = tmp_path / "roof.svg"
    plot_roofline([HARDWARE["H200"]], [RooflinePoint("naive", 30.0), RooflinePoint("x", 500, 3e14)],
                  path)
    assert path.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: visible_pairs(0, 4), r"nq must be a positive int, got 0"),
        (lambda: visible_pairs(4, 4, window=2), r"window=2 needs causal=True"),
        (lambda: attention_flops(1, 1, 4, 4, 0), r"d must be a positive int, got 0"),
        (lambda: naive_attention_bytes(1, 2, 1, 4, 4, 8, elem_bytes=0), r"elem_bytes must be"),
        (lambda: arithmetic_intensity(1.0, 0), r"nbytes > 0"),
        (lambda: HARDWARE["H200"].attainable(-1), r"intensity must be positive"),
        (lambda: decoder_layer_costs(100, 3, 1, 10), r"n_heads \| d_model"),
        (lambda: Ceilings("bad", 0, 1), r"ceilings must be positive"),
        (lambda: measure_ceilings("cpu", matmul_n=0), r"need matmul_n >= 1.*got 0"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/theory/00-motivation.md#tests/test_roofline.py>>[init]
"""Checks of the roofline's counts (tangled from docs/theory/00-motivation.md)."""

import math

import pytest

from minimodel.minigpt import Block, MiniGPTConfig
from minimodel.reference import visible_mask
from minimodel.roofline import (
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    decoder_layer_costs,
    naive_attention_bytes,
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
    assert visible_pairs(10**7, 10**7, causal=True) == 10**7 * (10**7 + 1) // 2  # no loop
    assert visible_pairs(10**7, 10**7, causal=True, window=3) == 3 * 10**7 - 3
    assert attention_flops(1, 1, 2048, 2048, 64) == 4 * 2048 * 2048 * 64


def test_intensity_limits():
    n, d = 1 << 15, 64
    flops = attention_flops(1, 1, n, n, d)
    naive = arithmetic_intensity(flops, naive_attention_bytes(1, 1, 1, n, n, d))
    best = arithmetic_intensity(flops, attention_min_bytes(1, 1, 1, n, n, d))
    assert naive == pytest.approx(n * d / (2 * (n + d)))  # -> d / E, E = 2 bytes
    assert best == pytest.approx(n / 2)  # N / E


def test_gqa_shrinks_only_the_kv_bytes():
    mha = attention_min_bytes(1, 32, 32, 1, 4096, 128)
    gqa = attention_min_bytes(1, 32, 8, 1, 4096, 128)
    kv_mha = 2 * 2 * 32 * 4096 * 128
    assert mha - gqa == kv_mha * 3 // 4


def test_decoder_layer_costs_ratio():
    costs = decoder_layer_costs(4096, 32, 32, context=24576)
    assert costs.attn_flops == pytest.approx(costs.proj_flops)  # N / (6 D) = 1
    gqa = decoder_layer_costs(4096, 32, 8, context=24576)
    assert gqa.kv_bytes * 4 == costs.kv_bytes


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: visible_pairs(0, 4), r"nq must be an int >= 1, got 0"),
        (lambda: visible_pairs(4, 4, window=2), r"window=2 needs causal=True"),
        (lambda: attention_flops(1, 1, 4, 4, 0), r"d must be an int >= 1, got 0"),
        (lambda: naive_attention_bytes(1, 2, 1, 4, 4, 8, elem_bytes=0), r"elem_bytes must be"),
        (lambda: arithmetic_intensity(1.0, 0), r"nbytes > 0"),
        (lambda: decoder_layer_costs(100, 3, 1, 10), r"n_heads \| d_model"),
        (lambda: arithmetic_intensity(math.inf, 1), r"flops=inf"),
        (lambda: arithmetic_intensity(1, math.inf), r"nbytes=inf"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_layer_weights_are_the_model_s_own_matrices():
    # MiniGPT's block holds W_q, W_kv (2 Hkv d columns: GQA shrinks it), W_o and the MLP's two
    # matrices; a decode step reads each once.
    config = MiniGPTConfig(vocab_size=10, d_model=64, n_heads=8, n_kv_heads=2)
    matrices = sum(p.numel() for p in Block(config, 0).parameters() if p.dim() == 2)
    assert decoder_layer_costs(64, 8, 2, 16, elem_bytes=2).weight_bytes == 2 * matrices
# ~/~ end
# ~/~ end

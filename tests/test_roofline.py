# ~/~ begin <<docs/theory/00-motivation.md#tests/test_roofline.py>>[init]
"""Checks of the roofline model (tangled from docs/theory/00-motivation.md)."""

import math

import pytest

from minimodel import roofline
from minimodel.minigpt import Block, MiniGPTConfig
from minimodel.reference import visible_mask
from minimodel.roofline import (
    HARDWARE,
    Ceilings,
    RooflinePoint,
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    decoder_layer_costs,
    exp_roof,
    measure_ceilings,
    mufu_rate,
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
    assert c.peak_flops > 1e6 and c.bandwidth > 1e6 and "measured" in c.name and c.measured


def test_exp_roof_by_hand():
    # d = 64: 256 FLOPs per exp2. pi = 1000 TFLOP/s, R_exp = 4e12/s: 0.256 ps + 0.25 ps a score
    assert exp_roof(64, 1e15, 4e12) == pytest.approx(256 / (0.256e-12 + 0.25e-12))
    assert exp_roof(64, 1e15, 4e12, overlapped=True) == 1e15  # 256 * 4e12 > pi: matmul binds
    assert exp_roof(32, 1e15, 4e12, overlapped=True) == pytest.approx(128 * 4e12)  # exp2 binds
    assert mufu_rate(132, 1.98e9) == pytest.approx(132 * 16 * 1.98e9)
    assert mufu_rate(108, 1.41e9, per_clock=32) == pytest.approx(108 * 32 * 1.41e9)


@pytest.mark.parametrize("d", [16, 64, 128, 256])
def test_exp_roof_closed_form_and_order(d):
    pi, r = 762e12, 4.16e12
    cap = exp_roof(d, pi, r)
    assert cap / pi == pytest.approx(1 / (1 + pi / (4 * d * r)))
    assert cap < exp_roof(d, pi, r, overlapped=True) <= pi  # overlap always pays
    assert cap < exp_roof(2 * d, pi, r)  # a smaller head dim pays more for its exponentials


def test_attainable_with_the_exponential_roof():
    h200 = HARDWARE["H200"]
    assert h200.exp_rate == pytest.approx(132 * 16 * 1.83e9)
    for gpu, flops_per_clock in (("H200", 4096), ("H100", 4096), ("A100", 2048)):
        c = HARDWARE[gpu]  # the tensor rate and the exp2 rate assume the same clock
        assert c.peak_flops == pytest.approx(c.sm_count * flops_per_clock * c.clock_hz, rel=1e-3)
    roof = h200.attention_roof(128)
    assert roof == exp_roof(128, h200.peak_flops, h200.exp_rate)
    assert h200.attainable(1e6, head_dim=128) == roof < h200.peak_flops
    assert h200.attainable(1.0, head_dim=128) == pytest.approx(4.8e12)  # memory-bound: unchanged
    assert h200.attainable(1e6, head_dim=128, overlapped=True) == h200.peak_flops


def test_plot_writes_a_figure(tmp_path):
    path = tmp_path / "roof.svg"
    plot_roofline([HARDWARE["H200"]], [RooflinePoint("naive", 30.0), RooflinePoint("x", 500, 3e14)],
                  path, head_dim=64)
    assert path.read_text().lstrip().startswith("<?xml")


def test_plot_places_labels_apart(tmp_path):
    # Three points on one spot and one nearby: their labels must not cover each other.
    points = [RooflinePoint(f"point {i}", 31.0 + i / 10) for i in range(3)]
    points += [RooflinePoint("measured", 31.0, 1e13)]
    boxes = plot_roofline([HARDWARE["H200"]], points, tmp_path / "roof.svg")
    assert [label for label, _ in boxes] == [p.label for p in points]
    for i, (_, a) in enumerate(boxes):
        for _, b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


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
        (lambda: Ceilings("bad", math.inf, 1), r"peak_flops.*inf"),
        (lambda: Ceilings("bad", 1, math.nan), r"bandwidth.*nan"),
        (lambda: Ceilings("bad", "1", 1), r"peak_flops.*'1'"),
        (lambda: Ceilings("bad", 1, 1, l2_bytes=-5), r"l2_bytes.*-5"),
        (lambda: Ceilings("bad", 1, 1, clock_hz=math.inf), r"clock_hz.*inf"),
        (lambda: arithmetic_intensity(math.inf, 1), r"flops=inf"),
        (lambda: arithmetic_intensity(1, math.inf), r"nbytes=inf"),
        (lambda: plot_roofline([HARDWARE["H200"]], [RooflinePoint("zero", 0.0)], "x.svg"),
         r"'zero'.*intensity.*0\.0"),
        (lambda: Ceilings("bad", 1, 1, exp_rate=0), r"exp_rate must be positive or None, got 0"),
        (lambda: Ceilings("bad", 1, 1, sm_count=0), r"sm_count must be a positive int, got 0"),
        (lambda: Ceilings("no exp", 1, 1).attention_roof(64), r"'no exp' has no exponential"),
        (lambda: exp_roof(0, 1e15, 4e12), r"head_dim must be a positive int, got 0"),
        (lambda: exp_roof(64, 1e15, -1.0), r"exp_rate > 0.*exp_rate=-1.0"),
        (lambda: mufu_rate(132, 0.0), r"clock_hz must be positive, got 0.0"),
        (lambda: mufu_rate(0, 1e9), r"sm_count must be a positive int, got 0"),
        (lambda: plot_roofline([HARDWARE["H200"]], [], "x.svg", head_dim=0), r"head_dim must"),
        (lambda: measure_ceilings("cpu", matmul_n=0), r"need matmul_n >= 1.*got 0"),
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


def test_measured_bandwidth_counts_reads_and_writes(monkeypatch):
    monkeypatch.setattr(roofline, "_median_seconds", lambda fn, device, reps: 0.5)
    ceilings = measure_ceilings("cpu", matmul_n=32, copy_bytes=4096, reps=1)
    assert ceilings.bandwidth == 2 * 4096 / 0.5  # a copy reads every byte and writes it
    assert ceilings.peak_flops == 2 * 32**3 / 0.5
# ~/~ end
# ~/~ end

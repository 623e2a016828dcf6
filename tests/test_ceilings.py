# ~/~ begin <<docs/theory/00-motivation.md#tests/test_ceilings.py>>[init]
"""Checks of the roofs (tangled from docs/theory/00-motivation.md)."""

import math

import pytest

from minimodel import ceilings
from minimodel.ceilings import HARDWARE, Ceilings, exp_roof, measure_ceilings, mufu_rate


# ~/~ begin <<docs/theory/00-motivation.md#ceilings-check>>[init]
def test_attainable_and_ridge():
    h200 = HARDWARE["H200"]
    assert h200.ridge == pytest.approx(989.4e12 / 4.8e12)
    assert h200.attainable(1.0) == pytest.approx(4.8e12)
    assert h200.attainable(1e6) == h200.peak_flops


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


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: HARDWARE["H200"].attainable(-1), r"intensity must be positive"),
        (lambda: Ceilings("bad", 0, 1), r"ceilings must be positive"),
        (lambda: Ceilings("bad", math.inf, 1), r"peak_flops.*inf"),
        (lambda: Ceilings("bad", 1, math.nan), r"bandwidth.*nan"),
        (lambda: Ceilings("bad", "1", 1), r"peak_flops.*'1'"),
        (lambda: Ceilings("bad", 1, 1, l2_bytes=-5), r"l2_bytes.*-5"),
        (lambda: Ceilings("bad", 1, 1, clock_hz=math.inf), r"clock_hz.*inf"),
        (lambda: Ceilings("bad", 1, 1, exp_rate=0), r"exp_rate must be positive or None, got 0"),
        (lambda: Ceilings("bad", 1, 1, sm_count=0), r"sm_count must be an int >= 1, got 0"),
        (lambda: Ceilings("no exp", 1, 1).attention_roof(64), r"'no exp' has no exponential"),
        (lambda: exp_roof(0, 1e15, 4e12), r"head_dim must be an int >= 1, got 0"),
        (lambda: exp_roof(64, 1e15, -1.0), r"exp_rate > 0.*exp_rate=-1.0"),
        (lambda: mufu_rate(132, 0.0), r"clock_hz must be positive, got 0.0"),
        (lambda: mufu_rate(0, 1e9), r"sm_count must be an int >= 1, got 0"),
        (lambda: measure_ceilings("cpu", matmul_n=0), r"need matmul_n >= 1.*got 0"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_measured_bandwidth_counts_reads_and_writes(monkeypatch):
    monkeypatch.setattr(ceilings, "_median_seconds", lambda fn, device, reps: 0.5)
    measured = measure_ceilings("cpu", matmul_n=32, copy_bytes=4096, reps=1)
    assert measured.bandwidth == 2 * 4096 / 0.5  # a copy reads every byte and writes it
    assert measured.peak_flops == 2 * 32**3 / 0.5
# ~/~ end
# ~/~ end

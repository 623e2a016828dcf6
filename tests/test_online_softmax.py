# ~/~ begin <<docs/lab/00-online-softmax.md#tests/test_online_softmax.py>>[init]
"""Checks of the online softmax (tangled from docs/lab/00-online-softmax.md)."""

import math
import random
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minimodel.online_softmax import (
    SoftmaxState,
    online_attention_row,
    online_softmax,
    online_softmax_chunked,
    rescale_factor,
    softmax,
    softmax_state,
)
from minimodel.reference import attention_ref, visible_mask

pytestmark = pytest.mark.lab("00")  # the task's tests: `make check-mine LAB=00` runs them

# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-edge-cases>>[init]
SOFTMAXES = {
    "softmax": softmax,
    "online_softmax": online_softmax,
    "online_softmax_chunked": lambda xs: online_softmax_chunked(xs, 2),
}
each_softmax = pytest.mark.parametrize("f", SOFTMAXES.values(), ids=SOFTMAXES.keys())
INF = math.inf


def named(value: str, message: str) -> bool:
    """Whether the message names value as a whole word or number, case aside: `1` is named by
    `logit 1`, `s_1` or `[1]`, not by `10`, `1.5` or `x1`; `m` by `state.m`, not by `m_new`."""
    before = r"(?<![a-z0-9_])" if value[0].isalpha() else r"(?<![a-z0-9.])"
    return re.search(before + re.escape(value) + r"(?![a-z0-9_]|\.\d)", message, re.I) is not None


def raises_naming(call, *values):
    """call() raises ValueError whose message names every value (the wording is not checked)."""
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    missing = [value for value in values if not named(str(value), message)]
    assert not missing, f"{message!r} should name {missing}"


def assert_lists_close(got, expected, tol=1e-12):
    assert len(got) == len(expected)
    worst = max((abs(a - b) for a, b in zip(got, expected, strict=True)), default=0.0)
    assert worst <= tol, f"max abs difference {worst:.3e} > {tol:.0e}"


@each_softmax
def test_by_hand(f):
    assert f([0.0, 0.0]) == [0.5, 0.5]
    assert_lists_close(f([0.0, math.log(3.0)]), [0.25, 0.75])
    assert_lists_close(f([1, 2, 3]), [math.exp(i) / (math.e + math.e**2 + math.e**3)
                                      for i in (1, 2, 3)])


@each_softmax
@pytest.mark.parametrize("x", [0.0, -7.5, 1e300, -1e300, 3])
def test_a_single_element_gives_one(f, x):
    assert f([x]) == [1.0]


@each_softmax
@pytest.mark.parametrize(
    ("xs", "expected"),
    [
        ([1e4, -1e4, 0.0], [1.0, 0.0, 0.0]),
        ([1e4, 1e4], [0.5, 0.5]),
        ([-1e4, -1e4, -1e4, -1e4], [0.25] * 4),
        ([1e300, -1e300, 1e300], [0.5, 0.0, 0.5]),
        ([-1e300, -1e300], [0.5, 0.5]),
        ([1.7e308, -1.7e308], [1.0, 0.0]),  # x - m rounds to -inf: e^(-inf) = 0, not NaN
        ([1e4, 1e4 + math.log(3.0)], [0.25, 0.75]),
    ],
)
def test_huge_logits_neither_overflow_nor_give_nan(f, xs, expected):
    got = f(xs)
    assert all(math.isfinite(p) for p in got)
    assert_lists_close(got, expected)


@each_softmax
def test_minus_inf_entries_get_probability_zero(f):
    got = f([0.0, -INF, 0.0, -INF])
    assert got[1] == 0.0 and got[3] == 0.0
    assert_lists_close(got, [0.5, 0.0, 0.5, 0.0])
    assert f([-INF, 5.0]) == [0.0, 1.0]  # the first entry is masked: m starts at -inf


@each_softmax
@pytest.mark.parametrize(
    ("xs", "names"),
    [
        ([], []),
        ([-INF], ["-inf"]),
        ([-INF, -INF, -INF], ["-inf"]),
        ([0.0, math.nan], ["1", "nan"]),
        ([INF, 0.0], ["0", "inf"]),
        ([0.0, True], ["1", "True"]),
        (["1.0"], ["0", "1.0"]),
        ([10**400], ["0"]),
    ],
)
def test_undefined_rows_raise(f, xs, names):
    raises_naming(lambda: f(xs), *names)


@pytest.mark.parametrize("chunk", [0, -1, 2.0, True, None])
def test_bad_chunk_raises(chunk):
    raises_naming(lambda: online_softmax_chunked([1.0, 2.0], chunk), "chunk", chunk)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-agreement>>[init]
def random_row(n, scale, seed, masked=0.0):
    rng = random.Random(seed)
    return [-INF if rng.random() < masked else rng.gauss(0.0, 1.0) * scale for _ in range(n)]


ROWS = [
    pytest.param(n, scale, masked, id=f"n={n}-scale={scale:g}-masked={masked}")
    for n in (2, 7, 113, 1023)
    for scale in (1.0, 30.0, 1e4, 1e300)
    for masked in (0.0, 0.3)
]


@pytest.mark.parametrize(("n", "scale", "masked"), ROWS)
def test_reference_matches_torch(n, scale, masked):
    xs = random_row(n, scale, seed=n, masked=masked)
    xs[0] = 0.0  # never fully masked
    expected = torch.softmax(torch.tensor(xs, dtype=torch.float64), dim=0).tolist()
    assert_lists_close(softmax(xs), expected)


@pytest.mark.parametrize(("n", "scale", "masked"), ROWS)
@pytest.mark.parametrize("chunk", [1, 3, 64, 1000])
def test_online_forms_match_the_reference(n, scale, masked, chunk):
    xs = random_row(n, scale, seed=n + 1, masked=masked)
    xs[-1] = 1.0
    expected = softmax(xs)
    assert_lists_close(online_softmax(xs), expected)
    assert_lists_close(online_softmax_chunked(xs, chunk), expected)


class OnlyOnce:
    """An iterable that refuses to be read twice: it proves a function makes one pass."""

    def __init__(self, xs):
        self.xs, self.reads = xs, 0

    def __iter__(self):
        self.reads += 1
        assert self.reads == 1, "the input was read a second time"
        return iter(self.xs)


def test_online_softmax_reads_its_input_once():
    xs = random_row(50, 3.0, seed=0)
    source = OnlyOnce(xs)
    assert_lists_close(online_softmax(source), softmax(xs))
    assert source.reads == 1
    assert_lists_close(online_softmax(x for x in xs), softmax(xs))  # a generator works
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-state>>[init]
def test_push_by_hand():
    # The stream 1, 3, 2: the maximum moves at the second element and l is rescaled by e^(1-3).
    s1 = SoftmaxState().push(1.0)
    s2 = s1.push(3.0)
    s3 = s2.push(2.0)
    assert s1 == SoftmaxState(1.0, 1.0)
    assert s2.m == 3.0 and s2.l == pytest.approx(math.exp(-2) + 1, rel=1e-15)
    assert s3.m == 3.0 and s3.l == pytest.approx(math.exp(-2) + 1 + math.exp(-1), rel=1e-15)
    assert s3.lse == pytest.approx(math.log(math.exp(1) + math.exp(3) + math.exp(2)), rel=1e-15)
    assert softmax_state([1.0, 3.0, 2.0]) == s3


def test_identity_and_masked_entries():
    s = softmax_state([0.5, -2.0, 4.0])
    assert SoftmaxState().merge(s) == s == s.merge(SoftmaxState())
    assert s.push(-INF) == s  # a masked entry changes nothing
    assert softmax_state([-INF, -INF]) == SoftmaxState() == softmax_state([])
    assert SoftmaxState().lse == -INF


def test_rescale_factor_cases():
    assert rescale_factor(-INF, -INF) == 1.0  # not e^NaN
    assert rescale_factor(-INF, 0.0) == 0.0
    assert rescale_factor(2.5, 2.5) == 1.0
    assert rescale_factor(0.0, 1.0) == pytest.approx(math.exp(-1), rel=1e-15)
    assert rescale_factor(-1e308, 1e308) == 0.0  # the difference rounds to -inf
    raises_naming(lambda: rescale_factor(2.0, 1.0), "2.0", "1.0")
    for m_old, m_new in [(math.nan, 1.0), (1.0, math.nan)]:  # e^NaN would be returned
        raises_naming(lambda m_old=m_old, m_new=m_new: rescale_factor(m_old, m_new), "nan", "1.0")


@pytest.mark.parametrize(
    ("m_value", "l_value", "names"),
    [
        (math.nan, 1.0, ["m", "nan"]),
        (INF, 1.0, ["m", "inf"]),
        (0.0, -1.0, ["l", "-1.0"]),
        (0.0, 0.0, ["m", "l", "0.0"]),
        (-INF, 1.0, ["m", "l", "-inf", "1.0"]),
        ("0", 1.0, ["m", "0"]),
        (True, 1.0, ["m", "True"]),
        (0.0, True, ["l", "True"]),
    ],
)
def test_impossible_states_raise(m_value, l_value, names):
    raises_naming(lambda: SoftmaxState(m_value, l_value), *names)


def test_probability_and_merge_validate():
    raises_naming(lambda: SoftmaxState().probability(0.0))
    raises_naming(lambda: SoftmaxState().merge((1.0, 2.0)), "SoftmaxState")
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-properties>>[init]
PROPERTY = settings(max_examples=200, deadline=None)
logits = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.just(-INF))
rows = st.lists(logits, min_size=1, max_size=60).filter(lambda xs: max(xs) > -INF)
states = st.lists(logits, max_size=20).map(softmax_state)


def assert_states_close(a, b, rel=1e-12):
    assert a.m == b.m  # a maximum does not round
    assert a.l == pytest.approx(b.l, rel=rel)


@PROPERTY
@given(xs=rows, chunk=st.integers(min_value=1, max_value=64))
def test_any_chunking_equals_softmax(xs, chunk):
    expected = softmax(xs)
    assert_lists_close(online_softmax_chunked(xs, chunk), expected)
    assert_lists_close(online_softmax(iter(xs)), expected)


@PROPERTY
@given(a=states, b=states, c=states)
def test_merge_is_commutative_and_associative(a, b, c):
    assert a.merge(b) == b.merge(a)  # exactly: l_a a_a + l_b a_b == l_b a_b + l_a a_a
    assert_states_close(a.merge(b).merge(c), a.merge(b.merge(c)))


@PROPERTY
@given(xs=rows, chunk=st.integers(min_value=1, max_value=16), rng=st.randoms(use_true_random=False))
def test_merging_chunks_in_any_order_gives_the_whole_state(xs, chunk, rng):
    parts = [softmax_state(xs[s : s + chunk]) for s in range(0, len(xs), chunk)]
    rng.shuffle(parts)
    total = SoftmaxState()
    for part in parts:
        total = total.merge(part)
    assert_states_close(total, softmax_state(xs))
    assert total.lse == pytest.approx(math.log(math.fsum(math.exp(x - max(xs)) for x in xs))
                                      + max(xs), rel=1e-12, abs=1e-12)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-attention-property>>[init]
entries = st.floats(min_value=-100, max_value=100, allow_nan=False)


@st.composite
def attention_rows(draw):
    d = draw(st.integers(1, 6))
    dv = draw(st.integers(1, 6))
    n = draw(st.integers(1, 24))
    q = draw(st.lists(entries, min_size=d, max_size=d))
    keys = draw(st.lists(st.lists(entries, min_size=d, max_size=d), min_size=n, max_size=n))
    values = draw(st.lists(st.lists(entries, min_size=dv, max_size=dv), min_size=n, max_size=n))
    visible = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    scale = draw(st.sampled_from([None, 1.0, 0.05, 2.5]))
    return q, keys, values, visible, scale


def naive_attention_row(q, keys, values, visible, scale):
    # The scores are summed in the same order as in the module, so only the softmax is compared.
    tau = len(q) ** -0.5 if scale is None else scale
    s = [tau * sum(a * b for a, b in zip(q, k, strict=True)) if seen else -INF
         for k, seen in zip(keys, visible, strict=True)]
    if max(s) == -INF:
        return [0.0] * len(values[0]), -INF
    p = softmax(s)
    o = [math.fsum(pj * v[i] for pj, v in zip(p, values, strict=True))
         for i in range(len(values[0]))]
    m = max(s)
    return o, m + math.log(math.fsum(math.exp(sj - m) for sj in s))


@PROPERTY
@given(case=attention_rows())
def test_attention_row_equals_the_naive_weighted_sum(case):
    q, keys, values, visible, scale = case
    o, lse = online_attention_row(q, iter(keys), iter(values), scale, visible=iter(visible))
    o_ref, lse_ref = naive_attention_row(q, keys, values, visible, scale)
    assert_lists_close(o, o_ref, tol=1e-12 * 100)  # |v| <= 100
    if lse_ref == -INF:
        assert lse == -INF and o == [0.0] * len(o)
    else:
        assert lse == pytest.approx(lse_ref, rel=1e-12, abs=1e-12)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-reference>>[init]
@pytest.mark.parametrize("nk", [1, 7, 63, 97])
@pytest.mark.parametrize(("d", "dv"), [(1, 1), (8, 8), (48, 48), (5, 3)])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_matches_attention_ref(nk, d, dv, scale):
    gen = torch.Generator().manual_seed(nk * 100 + d)
    q = torch.randn(1, 1, 1, d, dtype=torch.float64, generator=gen)
    k = torch.randn(1, 1, nk, d, dtype=torch.float64, generator=gen)
    v = torch.randn(1, 1, nk, dv, dtype=torch.float64, generator=gen)
    if d == dv:
        out_ref, lse_ref = attention_ref(q, k, v, scale=scale, return_lse=True)
    else:  # attention_ref wants k and v of one shape: pad v with zeros, then drop the padding
        v_pad = torch.nn.functional.pad(v, (0, d - dv))
        out_ref, lse_ref = attention_ref(q, k, v_pad, scale=scale, return_lse=True)
        out_ref = out_ref[..., :dv]
    o, lse = online_attention_row(q[0, 0, 0].tolist(), k[0, 0].tolist(), v[0, 0].tolist(), scale)
    assert_lists_close(o, out_ref[0, 0, 0].tolist())
    assert lse == pytest.approx(lse_ref[0, 0, 0].item(), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("nq", "nk", "window"), [(5, 5, None), (3, 9, 4), (4, 2, None), (6, 3, 2)])
def test_masked_queries_match_attention_ref(nq, nk, window):
    gen = torch.Generator().manual_seed(nq * 10 + nk)
    q, k, v = (torch.randn(1, 1, n, 16, dtype=torch.float64, generator=gen) for n in (nq, nk, nk))
    out_ref, lse_ref = attention_ref(q, k, v, causal=True, window=window, return_lse=True)
    mask = visible_mask(nq, nk, causal=True, window=window)
    for i in range(nq):  # queries with pos_i = i + nk - nq < 0 see no key at all
        o, lse = online_attention_row(q[0, 0, i].tolist(), k[0, 0].tolist(), v[0, 0].tolist(),
                                      visible=mask[i].tolist())
        assert_lists_close(o, out_ref[0, 0, i].tolist())
        if lse_ref[0, 0, i] == -INF:
            assert lse == -INF and o == [0.0] * 16
        else:
            assert lse == pytest.approx(lse_ref[0, 0, i].item(), rel=1e-12, abs=1e-12)


def test_single_key_returns_its_value():
    o, lse = online_attention_row([1.0, 2.0], [[3.0, -1.0]], [[7.0, 8.0, 9.0]], 0.5)
    assert o == [7.0, 8.0, 9.0] and lse == 0.5


def test_huge_scores_stay_finite():
    # Scores of +-1e4 and 1e300 would overflow e^s; the running maximum keeps every e^(s - m) <= 1.
    o, lse = online_attention_row([1.0], [[1e4], [-1e4], [1e4]], [[1.0], [5.0], [3.0]], 1.0)
    assert o == [2.0] and lse == pytest.approx(1e4 + math.log(2.0), rel=1e-15)
    o, lse = online_attention_row([1e150], [[1e150], [-1e150]], [[1.0], [2.0]], 1.0)
    assert o == [1.0] and lse == pytest.approx(1e300, rel=1e-15)


def test_huge_values_stay_finite():
    # acc = sum_j p~_j v_j would overflow; the average of the values does not.
    o, _ = online_attention_row([0.0], [[0.0], [0.0]], [[1e308], [1e308]])
    assert o == [1e308]
    top = 1.7976931348623157e308  # the largest float
    o, _ = online_attention_row([0.0], [[0.0]] * 3, [[top, -top]] * 3)
    assert o == pytest.approx([top, -top], rel=1e-15)  # finite, within rounding
    keys = [[-1.1391145840840042], [1.3789904895607723], [2.393029727807961]]
    o, _ = online_attention_row([1.0], keys, [[top]] * 3, 1.0)  # weights that round past one
    assert o == pytest.approx([top], rel=1e-15)
    o, _ = online_attention_row([1.0], [[0.5], [0.0]], [[top], [-top]], 1.0)
    weight = 1 / (1 + math.exp(-0.5))  # softmax of (0.5, 0)
    assert o[0] == pytest.approx(top * weight - top * (1 - weight), rel=1e-12)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-attention-errors>>[init]
Q, K, V = [1.0, 0.0], [[1.0, 2.0], [3.0, 4.0]], [[1.0], [2.0]]


@pytest.mark.parametrize(
    ("args", "kwargs", "names"),
    [
        (([], K, V), {}, ["q"]),
        ((Q, [], []), {}, ["keys"]),
        ((Q, K, V[:1]), {}, ["values", "1"]),
        ((Q, K[:1], V), {}, ["keys", "1"]),
        ((Q, [[1.0, 2.0], [3.0]], V), {}, ["keys[1]", "1", "2"]),
        ((Q, K, [[1.0], [2.0, 3.0]]), {}, ["values[1]", "2", "1"]),
        ((Q, K, [[], []]), {}, ["values[0]"]),
        (([1.0, math.nan], K, V), {}, ["q[1]", "nan"]),
        ((Q, [[1.0, 2.0], [INF, 0.0]], V), {}, ["keys[1][0]", "inf"]),
        ((Q, K, [[1.0], [-INF]]), {}, ["values[1][0]", "-inf"]),
        ((Q, K, [1.0, 2.0]), {}, ["values[0]", "1.0"]),
        ((Q, K, V, math.nan), {}, ["scale", "nan"]),
        ((Q, K, V, 0.0), {}, ["scale", "0.0"]),
        ((Q, K, V, -0.5), {}, ["scale", "-0.5"]),
        ((Q, K, V, INF), {}, ["scale", "inf"]),
        ((Q, K, V, "1"), {}, ["scale", "1"]),
        ((Q, K, V), {"visible": [True]}, ["visible", "1"]),
        ((Q, K, V), {"visible": [True, True, False]}, ["visible", "2"]),
        ((Q, K, V), {"visible": [1, 0]}, ["visible[0]", "1"]),
        (([1e200], [[1e200]], [[1.0]], 1.0), {}, ["0", "inf"]),
        (([1e200], [[-1e200], [-2e200]], [[1.0], [2.0]], 1.0), {}, ["0", "-inf"]),
    ],
)
def test_bad_attention_input_raises(args, kwargs, names):
    raises_naming(lambda: online_attention_row(*args, **kwargs), *names)


def test_probability_refuses_a_logit_above_the_state():
    state = softmax_state([0.0, -1.0])
    assert state.probability(0.0) == pytest.approx(1 / (1 + math.exp(-1.0)))
    raises_naming(lambda: state.probability(5.0), "5.0", "0.0")


def test_masked_keys_are_still_validated():
    raises_naming(lambda: online_attention_row(Q, [[1.0, 2.0], [3.0]], V, visible=[True, False]),
                  "keys[1]", "1", "2")
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-base2-float32>>[init]
def test_base2_form_gives_the_same_weights_and_lse():
    rng = random.Random(2)
    q = [rng.gauss(0, 1) for _ in range(16)]
    keys = [[rng.gauss(0, 1) for _ in range(16)] for _ in range(50)]
    values = [[rng.gauss(0, 1) for _ in range(4)] for _ in range(50)]
    tau2 = 16**-0.5 * math.log2(math.e)  # tau' = tau log2(e), folded into one constant
    m2, l2, acc = -INF, 0.0, [0.0] * 4  # m2 = m', the maximum in base-2 units: m' = m log2(e)
    for k, v in zip(keys, values, strict=True):
        s2 = tau2 * sum(a * b for a, b in zip(q, k, strict=True))  # s'_j = s_j log2(e)
        m_new = max(m2, s2)
        alpha = math.exp2(m2 - m_new)  # 2^(m'^(j-1) - m'^(j)) = e^(m^(j-1) - m^(j))
        p_tilde = math.exp2(s2 - m_new)  # 2^(s'_j - m'^(j)) = e^(s_j - m^(j))
        l2 = alpha * l2 + p_tilde
        acc = [alpha * a + p_tilde * vi for a, vi in zip(acc, v, strict=True)]
        m2 = m_new
    o, lse = online_attention_row(q, keys, values)
    assert_lists_close([a / l2 for a in acc], o)
    assert (m2 + math.log2(l2)) * math.log(2.0) == pytest.approx(lse, rel=1e-13)


def test_a_float32_state_is_enough():
    rng = random.Random(32)
    xs = [30.0 * math.sin(0.37 * i) + rng.gauss(0.0, 1.0) for i in range(4096)]
    m, l = np.float32(-np.inf), np.float32(0.0)  # noqa: E741
    for x in np.asarray(xs, dtype=np.float32):
        m_new = max(m, x)
        l = l * np.exp(m - m_new) + np.exp(x - m_new)  # noqa: E741  all float32
        m = m_new
    assert l.dtype == np.float32
    expected = softmax_state(np.asarray(xs, dtype=np.float32).astype(np.float64).tolist())
    assert float(m) == expected.m
    assert float(l) == pytest.approx(expected.l, rel=1e-5)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/00-online-softmax.md#tests/test_online_softmax_solution.py>>[init]
"""The solution's own error messages, word for word (tangled from docs/lab/00-online-softmax.md;
not run by `make check-mine`: a learner's wording may differ)."""

import math

import pytest
from test_online_softmax import INF, K, Q, V, each_softmax

from minimodel.online_softmax import (
    SoftmaxState,
    online_attention_row,
    online_softmax_chunked,
    rescale_factor,
    softmax_state,
)


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-check-solution-messages>>[init]
@each_softmax
@pytest.mark.parametrize(
    ("xs", "match"),
    [
        ([], r"empty row"),
        ([-INF], r"all 1 logits are -inf"),
        ([-INF, -INF, -INF], r"all 3 logits are -inf"),
        ([0.0, math.nan], r"logit 1 is NaN"),
        ([INF, 0.0], r"logit 0 is \+inf"),
        ([0.0, True], r"logit 1 must be a real number, got True"),
        (["1.0"], r"logit 0 must be a real number, got '1.0'"),
        ([10**400], r"logit 0 = 1000.* does not fit in a float"),
    ],
)
def test_the_solutions_row_messages(f, xs, match):
    with pytest.raises(ValueError, match=match):
        f(xs)


@pytest.mark.parametrize("chunk", [0, -1, 2.0, True, None])
def test_the_solutions_chunk_message(chunk):
    with pytest.raises(ValueError, match=rf"chunk must be an int >= 1, got {chunk!r}"):
        online_softmax_chunked([1.0, 2.0], chunk)


def test_the_solutions_rescale_messages():
    with pytest.raises(ValueError, match=r"m_new >= m_old.*m_old=2.0, m_new=1.0"):
        rescale_factor(2.0, 1.0)
    for m_old, m_new in [(math.nan, 1.0), (1.0, math.nan)]:
        with pytest.raises(ValueError, match=r"m_new >= m_old"):
            rescale_factor(m_old, m_new)


@pytest.mark.parametrize(
    ("m_value", "l_value", "match"),
    [
        (math.nan, 1.0, r"m must be a float below \+inf, got nan"),
        (INF, 1.0, r"m must be a float below \+inf, got inf"),
        (0.0, -1.0, r"l must be finite and >= 0, got -1.0"),
        (0.0, 0.0, r"l == 0 exactly when m == -inf.*m=0.0, l=0.0"),
        (-INF, 1.0, r"l == 0 exactly when m == -inf.*m=-inf, l=1.0"),
        ("0", 1.0, r"SoftmaxState.m must be a real number"),
        (True, 1.0, r"SoftmaxState.m must be a real number, got True"),
        (0.0, True, r"SoftmaxState.l must be a real number, got True"),
    ],
)
def test_the_solutions_state_messages(m_value, l_value, match):
    with pytest.raises(ValueError, match=match):
        SoftmaxState(m_value, l_value)


def test_the_solutions_probability_and_merge_messages():
    with pytest.raises(ValueError, match=r"empty state"):
        SoftmaxState().probability(0.0)
    with pytest.raises(ValueError, match=r"can only merge a SoftmaxState, got \(1.0, 2.0\)"):
        SoftmaxState().merge((1.0, 2.0))
    with pytest.raises(ValueError, match=r"x = 5.0 exceeds the running maximum m = 0.0"):
        softmax_state([0.0, -1.0]).probability(5.0)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([], K, V), {}, r"q must not be empty"),
        ((Q, [], []), {}, r"attention over no keys"),
        ((Q, K, V[:1]), {}, r"same number of rows: values ended after 1 rows"),
        ((Q, K[:1], V), {}, r"same number of rows: keys ended after 1 rows"),
        ((Q, [[1.0, 2.0], [3.0]], V), {}, r"keys\[1\] has length 1, but q has length 2"),
        ((Q, K, [[1.0], [2.0, 3.0]]), {}, r"values\[1\] has length 2, but values\[0\] has"),
        ((Q, K, [[], []]), {}, r"values\[0\] must not be empty"),
        (([1.0, math.nan], K, V), {}, r"q\[1\] must be a finite real number, got nan"),
        ((Q, [[1.0, 2.0], [INF, 0.0]], V), {}, r"keys\[1\]\[0\] must be a finite real number"),
        ((Q, K, [[1.0], [-INF]]), {}, r"values\[1\]\[0\] must be a finite real number"),
        ((Q, K, [1.0, 2.0]), {}, r"values\[0\] must be a sequence of numbers, got 1.0"),
        ((Q, K, V, math.nan), {}, r"scale must be finite and positive, got nan"),
        ((Q, K, V, 0.0), {}, r"scale must be finite and positive, got 0.0"),
        ((Q, K, V, -0.5), {}, r"scale must be finite and positive, got -0.5"),
        ((Q, K, V, INF), {}, r"scale must be finite and positive, got inf"),
        ((Q, K, V, "1"), {}, r"scale must be a number or None, got '1'"),
        ((Q, K, V), {"visible": [True]}, r"visible ended after 1 entries"),
        ((Q, K, V), {"visible": [True, True, False]}, r"visible has more entries than the 2 keys"),
        ((Q, K, V), {"visible": [1, 0]}, r"visible\[0\] must be a bool, got 1"),
        (([1e200], [[1e200]], [[1.0]], 1.0), {}, r"score s_0 = tau \* q.k_0 is \+inf"),
        (([1e200], [[-1e200], [-2e200]], [[1.0], [2.0]], 1.0), {},
         r"score s_0 = tau \* q.k_0 overflows to -inf; pass visible=False"),
    ],
)
def test_the_solutions_attention_messages(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        online_attention_row(*args, **kwargs)
    with pytest.raises(ValueError, match=r"keys\[1\] has length 1"):
        online_attention_row(Q, [[1.0, 2.0], [3.0]], V, visible=[True, False])
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/00-online-softmax.md#exercises/lab00/online_softmax.py>>[init]
"""Lab 00: the online softmax, in pure Python. Fill in every body that raises NotImplementedError.

Skeleton tangled from docs/lab/00-online-softmax.md (`make exercise LAB=00` copies it to mywork/);
check it with `make check-mine LAB=00`.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-softmax-interface>>[init]
def softmax(xs: Iterable[float]) -> list[float]:
    """Safe softmax: p_j = e^(x_j - m) / l with m = max_j x_j and l = sum_j e^(x_j - m).

    Three passes over the row (max, sum, normalise); the reference for every other function
    here. Entries of -inf get probability 0. Raises ValueError on an empty row, a row that is
    all -inf, and any NaN or +inf.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: softmax: the three passes: the maximum, the sum of e^(x_j - m), the "
        "division"
    )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-rescale-factor-interface>>[init]
def rescale_factor(m_old: float, m_new: float) -> float:
    """alpha = e^(m_old - m_new): moves a sum kept relative to m_old onto the new maximum m_new.

    A running maximum only grows, so m_new >= m_old is required. When it does not move the
    factor is exactly 1, which also covers m_old = m_new = -inf (where e^(-inf - -inf) would be
    NaN); from m_old = -inf to a finite m_new it is e^(-inf) = 0.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: rescale_factor: alpha = e^(m_old - m_new), with the cases where the "
        "maximum does not move or leaves -inf"
    )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-interface>>[init]
@dataclass(frozen=True)
class SoftmaxState:
    """The running state (m, l) of an online softmax over a set of logits X.

    m = max X and l = sum_{x in X} e^(x - m). SoftmaxState() = (-inf, 0) is the state of the
    empty set and the identity of `merge`. Invariant, checked on construction: l == 0 exactly
    when m == -inf. States built by push and merge also have l >= 1 otherwise, because the
    maximum itself contributes e^0 = 1.
    """

    m: float = -math.inf
    l: float = 0.0  # noqa: E741  (the theory's symbol)
# ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-post-init-interface>>[init]
    def __post_init__(self) -> None:
        """Refuse an impossible state: m NaN or +inf, l negative or not finite, or l == 0 and
        m == -inf not holding together; a bool is not a number here."""
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.__post_init__: validate m and l: the rules for odd "
            "inputs, and l == 0 exactly when m == -inf"
        )

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of-interface>>[init]
    @classmethod
    def of(cls, x: float) -> "SoftmaxState":
        """The state of the single logit x: (x, 1), or the identity when x = -inf."""
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.of: the state of one logit: (x, 1), or the empty state"
            " for -inf"
        )

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-merge-interface>>[init]
    def merge(self, other: "SoftmaxState") -> "SoftmaxState":
        """(m_X, l_X) + (m_Y, l_Y) = (m, l_X e^(m_X - m) + l_Y e^(m_Y - m)) with m = max(m_X, m_Y).

        Associative and commutative (Theory 01), so chunks can be merged in any grouping and
        any order; in floating point m is exact and l agrees up to rounding.
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.merge: take the larger maximum and move both sums onto"
            " it with rescale_factor"
        )

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-push-interface>>[init]
    def push(self, x: float) -> "SoftmaxState":
        """One step: m^(j) = max(m^(j-1), x_j), l^(j) = l^(j-1) alpha^(j) + e^(x_j - m^(j))."""
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.push: the merge with the state of the single logit x"
        )

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-lse-interface>>[init]
    @property
    def lse(self) -> float:
        """log sum_{x in X} e^x = m + log l; -inf for the empty state."""
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.lse: m + log l, or -inf for the empty state"
        )

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-probability-interface>>[init]
    def probability(self, x: float) -> float:
        """p = e^(x - m) / l: the write pass, once the state covers the whole row."""
    # ~/~ end
        raise NotImplementedError(
            "not written yet: SoftmaxState.probability: e^(x - m) / l, refusing the empty state "
            "and an x above m"
        )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of-stream-interface>>[init]
def softmax_state(xs: Iterable[float]) -> SoftmaxState:
    """The state (m, l) of a whole stream: SoftmaxState() pushed with every x_j in turn."""
# ~/~ end
    raise NotImplementedError(
        "not written yet: softmax_state: push every logit into SoftmaxState() in turn"
    )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-online-interface>>[init]
def online_softmax(xs: Iterable[float]) -> list[float]:
    """Softmax in one pass over `xs` for the normaliser (m, l), then the write pass.

    `xs` is consumed once, so any iterable works, a generator included. Equal to `softmax(xs)`
    up to rounding, with the same errors for the same inputs.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: online_softmax: one pass that pushes each logit into a SoftmaxState, "
        "then the write pass"
    )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-chunked-interface>>[init]
def online_softmax_chunked(xs: Iterable[float], chunk: int) -> list[float]:
    """Softmax from chunks of `chunk` entries, each reduced to a SoftmaxState on its own, merged.

    Any chunk size >= 1 gives softmax(xs) up to rounding; the last chunk may be shorter.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: online_softmax_chunked: reduce each chunk to a SoftmaxState on its own,"
        " merge the states, then write"
    )


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-attention-row-interface>>[init]
def online_attention_row(
    q: Sequence[float],
    keys: Iterable[Sequence[float]],
    values: Iterable[Sequence[float]],
    scale: float | None = None,
    *,
    visible: Iterable[bool] | None = None,
) -> tuple[list[float], float]:
    """One query against a stream of key/value rows, in one pass: (o, lse).

    q: (d,); keys: N rows of (d,); values: N rows of (d_v,); visible: N bools, True where the
    query sees key j (all True when None). scale is tau > 0, d ** -0.5 when None.
    With s_j = tau * q.k_j over the visible keys: o = sum_j softmax(s)_j v_j, a list of d_v
    floats, and lse = log sum_j e^(s_j) (natural log, as attention_ref's return_lse).
    o is a weighted average of the values, finite for any finite values up to the largest
    float. A row with no visible key returns ([0.0] * d_v, -inf). Raises ValueError on no keys,
    mismatched lengths, a non-finite input, a scale that is not finite and positive, and a
    score that overflows to +inf or -inf.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: online_attention_row: m, l and o (a running weighted average of the "
        "values) updated key by key"
    )
# ~/~ end

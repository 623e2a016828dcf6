# ~/~ begin <<docs/lab/00-online-softmax.md#src/minimodel/online_softmax.py>>[init]
"""Online softmax in pure Python: the running maximum m, the running sum l, and their merge.

softmax is the safe three-pass reference; online_softmax finds the normaliser (m, l) in one pass;
SoftmaxState carries (m, l) with push and merge; online_softmax_chunked merges independent
chunks; online_attention_row runs one query against a stream of key/value rows, the inner loop of
FlashAttention. Every number is a Python float (float64); no numpy, no torch.

Tangled from docs/lab/00-online-softmax.md; edit the page, not this file.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from numbers import Real

from minimodel.checks import check_int

__all__ = [
    "SoftmaxState",
    "online_attention_row",
    "online_softmax",
    "online_softmax_chunked",
    "rescale_factor",
    "softmax",
    "softmax_state",
]

# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-validate>>[init]
def _logit(x: object, name: str) -> float:
    """`x` as a float: -inf is allowed (a masked entry), NaN and +inf are refused."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise ValueError(f"{name} must be a real number, got {x!r}")
    try:
        x = float(x)
    except OverflowError:
        raise ValueError(f"{name} = {x!r} does not fit in a float") from None
    if math.isnan(x):
        raise ValueError(f"{name} is NaN: the softmax of a row holding NaN is undefined")
    if x == math.inf:
        raise ValueError(f"{name} is +inf: e^(+inf) / e^(+inf) is undefined")
    return x


def _finite_row(row: object, name: str) -> list[float]:
    """A row of q, K or V as a list of finite floats (no -inf here: masking is `visible`)."""
    try:
        items = list(row)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of numbers, got {row!r}") from None
    out = []
    for i, x in enumerate(items):
        if isinstance(x, bool) or not isinstance(x, Real) or not math.isfinite(x):
            raise ValueError(f"{name}[{i}] must be a finite real number, got {x!r}")
        out.append(float(x))
    return out


def _check_defined(n: int, m: float) -> None:
    """A softmax needs at least one entry and at least one entry above -inf."""
    if n == 0:
        raise ValueError("softmax of an empty row is undefined: got no logits")
    if m == -math.inf:
        raise ValueError(
            f"all {n} logits are -inf: the softmax of a fully masked row is undefined (0/0)"
        )
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-batch>>[init]
# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-softmax-interface>>[init]
def softmax(xs: Iterable[float]) -> list[float]:
    """Safe softmax: p_j = e^(x_j - m) / l with m = max_j x_j and l = sum_j e^(x_j - m).

    Three passes over the row (max, sum, normalise); the reference for every other function
    here. Entries of -inf get probability 0. Raises ValueError on an empty row, a row that is
    all -inf, and any NaN or +inf.
    """
# ~/~ end
    row = [_logit(x, f"logit {j}") for j, x in enumerate(xs)]
    m = max(row, default=-math.inf)  # pass 1: m = max_j x_j
    _check_defined(len(row), m)
    e = [math.exp(x - m) for x in row]  # pass 2: e^(x_j - m) <= 1, never overflows ...
    l = math.fsum(e)  # noqa: E741  ... and l = sum_j e^(x_j - m) >= 1
    return [ej / l for ej in e]  # pass 3: p_j = e^(x_j - m) / l
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-rescale>>[init]
# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-rescale-factor-interface>>[init]
def rescale_factor(m_old: float, m_new: float) -> float:
    """alpha = e^(m_old - m_new): moves a sum kept relative to m_old onto the new maximum m_new.

    A running maximum only grows, so m_new >= m_old is required. When it does not move the
    factor is exactly 1, which also covers m_old = m_new = -inf (where e^(-inf - -inf) would be
    NaN); from m_old = -inf to a finite m_new it is e^(-inf) = 0.
    """
# ~/~ end
    if math.isnan(m_old) or math.isnan(m_new) or m_new < m_old:
        raise ValueError(
            f"need m_new >= m_old (a running maximum only grows), got m_old={m_old}, m_new={m_new}"
        )
    if m_new == m_old:
        return 1.0
    return math.exp(m_old - m_new)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state>>[init]
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

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-post-init>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-post-init-interface>>[init]
    def __post_init__(self) -> None:
        """Refuse an impossible state: m NaN or +inf, l negative or not finite, or l == 0 and
        m == -inf not holding together; a bool is not a number here."""
    # ~/~ end
        for name, value in (("m", self.m), ("l", self.l)):
            if isinstance(value, bool) or not isinstance(value, Real):
                raise ValueError(f"SoftmaxState.{name} must be a real number, got {value!r}")
        if math.isnan(self.m) or self.m == math.inf:
            raise ValueError(f"SoftmaxState.m must be a float below +inf, got {self.m}")
        if not (math.isfinite(self.l) and self.l >= 0):
            raise ValueError(f"SoftmaxState.l must be finite and >= 0, got {self.l}")
        if (self.m == -math.inf) != (self.l == 0):
            raise ValueError(
                f"SoftmaxState needs l == 0 exactly when m == -inf (the empty state), "
                f"got m={self.m}, l={self.l}"
            )
    # ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of-interface>>[init]
    @classmethod
    def of(cls, x: float) -> "SoftmaxState":
        """The state of the single logit x: (x, 1), or the identity when x = -inf."""
    # ~/~ end
        x = _logit(x, "x")
        return cls() if x == -math.inf else cls(x, 1.0)
    # ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-merge>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-merge-interface>>[init]
    def merge(self, other: "SoftmaxState") -> "SoftmaxState":
        """(m_X, l_X) + (m_Y, l_Y) = (m, l_X e^(m_X - m) + l_Y e^(m_Y - m)) with m = max(m_X, m_Y).

        Associative and commutative (Theory 01), so chunks can be merged in any grouping and
        any order; in floating point m is exact and l agrees up to rounding.
        """
    # ~/~ end
        if not isinstance(other, SoftmaxState):
            raise ValueError(f"can only merge a SoftmaxState, got {other!r}")
        m = max(self.m, other.m)  # m = max(m_X, m_Y)
        l = (  # noqa: E741  l = l_X e^(m_X - m) + l_Y e^(m_Y - m)
            self.l * rescale_factor(self.m, m) + other.l * rescale_factor(other.m, m)
        )
        return SoftmaxState(m, l)
    # ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-push>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-push-interface>>[init]
    def push(self, x: float) -> "SoftmaxState":
        """One step: m^(j) = max(m^(j-1), x_j), l^(j) = l^(j-1) alpha^(j) + e^(x_j - m^(j))."""
    # ~/~ end
        return self.merge(SoftmaxState.of(x))
    # ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-lse>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-lse-interface>>[init]
    @property
    def lse(self) -> float:
        """log sum_{x in X} e^x = m + log l; -inf for the empty state."""
    # ~/~ end
        return self.m + math.log(self.l) if self.l > 0 else -math.inf
    # ~/~ end

    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-probability>>[init]
    # ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-probability-interface>>[init]
    def probability(self, x: float) -> float:
        """p = e^(x - m) / l: the write pass, once the state covers the whole row."""
    # ~/~ end
        if self.l == 0:
            raise ValueError("the empty state (every logit -inf) has no probabilities")
        x = _logit(x, "x")
        if x > self.m:
            raise ValueError(f"x = {x} exceeds the running maximum m = {self.m}: the state does "
                             "not cover it")
        return math.exp(x - self.m) / self.l
    # ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of-stream>>[init]
# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-state-of-stream-interface>>[init]
def softmax_state(xs: Iterable[float]) -> SoftmaxState:
    """The state (m, l) of a whole stream: SoftmaxState() pushed with every x_j in turn."""
# ~/~ end
    state = SoftmaxState()  # (m^(0), l^(0)) = (-inf, 0)
    for x in xs:
        state = state.push(x)  # (m^(j), l^(j)) from (m^(j-1), l^(j-1)) and x_j
    return state
# ~/~ end
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-one-pass>>[init]
# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-online-interface>>[init]
def online_softmax(xs: Iterable[float]) -> list[float]:
    """Softmax in one pass over `xs` for the normaliser (m, l), then the write pass.

    `xs` is consumed once, so any iterable works, a generator included. Equal to `softmax(xs)`
    up to rounding, with the same errors for the same inputs.
    """
# ~/~ end
    row: list[float] = []  # the entries, kept for the write pass
    state = SoftmaxState()  # (m^(0), l^(0)) = (-inf, 0)
    for j, x in enumerate(xs):
        row.append(_logit(x, f"logit {j}"))
        state = state.push(row[-1])  # (m^(j), l^(j)) from (m^(j-1), l^(j-1)) and x_j
    _check_defined(len(row), state.m)
    return [math.exp(x - state.m) / state.l for x in row]  # p_j = e^(x_j - m^(N)) / l^(N)
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-chunked>>[init]
# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-chunked-interface>>[init]
def online_softmax_chunked(xs: Iterable[float], chunk: int) -> list[float]:
    """Softmax from chunks of `chunk` entries, each reduced to a SoftmaxState on its own, merged.

    Any chunk size >= 1 gives softmax(xs) up to rounding; the last chunk may be shorter.
    """
# ~/~ end
    check_int("chunk", chunk, 1)
    row = [_logit(x, f"logit {j}") for j, x in enumerate(xs)]
    states = [softmax_state(row[s : s + chunk]) for s in range(0, len(row), chunk)]
    total = SoftmaxState()  # the identity: merging it changes nothing
    for state in states:
        total = total.merge(state)  # (m, l) = (m, l) + (m_c, l_c)
    _check_defined(len(row), total.m)
    return [total.probability(x) for x in row]
# ~/~ end


# ~/~ begin <<docs/lab/00-online-softmax.md#online-softmax-attention-row>>[init]
_MISSING = object()  # marks the end of a stream that ran out before the others


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
    q = _finite_row(q, "q")
    d = len(q)
    if d == 0:
        raise ValueError("q must not be empty")
    if scale is None:
        tau = d**-0.5
    elif isinstance(scale, bool) or not isinstance(scale, Real):
        raise ValueError(f"scale must be a number or None, got {scale!r}")
    elif not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and positive, got {scale}")
    else:
        tau = float(scale)
    flags = iter(visible) if visible is not None else None

    m, l, o = -math.inf, 0.0, []  # noqa: E741  m^(0) = -inf, l^(0) = 0, o^(0) = 0 (d_v long)
    n = 0
    for j, (k, v) in enumerate(zip_longest(keys, values, fillvalue=_MISSING)):
        if k is _MISSING or v is _MISSING:
            short = "keys" if k is _MISSING else "values"
            raise ValueError(f"keys and values must have the same number of rows: "
                             f"{short} ended after {j} rows, the other did not")
        k, v = _finite_row(k, f"keys[{j}]"), _finite_row(v, f"values[{j}]")
        if len(k) != d:
            raise ValueError(f"keys[{j}] has length {len(k)}, but q has length {d}")
        if j == 0:
            if not v:
                raise ValueError("values[0] must not be empty")
            o = [0.0] * len(v)
        elif len(v) != len(o):
            raise ValueError(
                f"values[{j}] has length {len(v)}, but values[0] has length {len(o)}"
            )
        seen = True if flags is None else next(flags, _MISSING)
        if seen is _MISSING:
            raise ValueError(f"visible ended after {j} entries, but there are more keys")
        if not isinstance(seen, bool):
            raise ValueError(f"visible[{j}] must be a bool, got {seen!r}")
        n = j + 1
        if not seen:
            continue  # s_j = -inf: m, l and o stay as they are

        s = tau * sum(a * b for a, b in zip(q, k, strict=True))  # s_j = tau q.k_j
        s = _logit(s, f"score s_{j} = tau * q.k_{j}")  # an overflow to +inf or NaN is refused
        if s == -math.inf:  # finite q and k: the product overflowed, it is not a mask
            raise ValueError(f"score s_{j} = tau * q.k_{j} overflows to -inf; pass "
                             "visible=False to mask a key")
        m_new = max(m, s)  # m^(j) = max(m^(j-1), s_j)
        alpha = rescale_factor(m, m_new)  # alpha^(j) = e^(m^(j-1) - m^(j))
        p_tilde = math.exp(s - m_new)  # p~_j = e^(s_j - m^(j)), not yet normalised
        l_new = alpha * l + p_tilde  # l^(j) = alpha^(j) l^(j-1) + p~_j
        # o^(j) = (alpha^(j) l^(j-1) / l^(j)) o^(j-1) + (p~_j / l^(j)) v_j: acc^(j) / l^(j)
        keep, take = alpha * l / l_new, p_tilde / l_new
        o = [_average(keep, a, take, vi) for a, vi in zip(o, v, strict=True)]
        m, l = m_new, l_new  # noqa: E741

    if n == 0:
        raise ValueError("attention over no keys: keys and values are empty")
    if flags is not None and next(flags, _MISSING) is not _MISSING:
        raise ValueError(f"visible has more entries than the {n} keys")
    if l == 0:
        return o, -math.inf  # no visible key: o = 0, lse = -inf
    return o, m + math.log(l)  # o = o^(N), lse = m^(N) + log l^(N)


def _average(keep: float, a: float, take: float, v: float) -> float:
    """keep * a + take * v for weights that add up to one: within the larger of |a| and |v|.
    The clamp only undoes a rounding step past the largest float (two values near 1.8e308)."""
    bound = max(abs(a), abs(v))
    return min(max(keep * a + take * v, -bound), bound)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/foundations.md#src/minimodel/reference.py>>[init]
"""The reference attention: the specification every kernel in minimodel is tested against,
and beside it the naive three-kernel implementation that Lab 01 counts and measures.

Tangled from docs/foundations.md (naive_attention from docs/lab/01-flash-bytes.md); edit the
pages, not this file.
"""

import math

import torch

from minimodel.checks import check_int

__all__ = [
    "attention_ref",
    "check_attention_inputs",
    "check_mask_args",
    "naive_attention",
    "resolve_scale",
    "visible_mask",
]

# ~/~ begin <<docs/foundations.md#reference-check-inputs>>[init]
def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Validate `q: (B, Hq, Nq, d)` and `k, v: (B, Hkv, Nk, d)`; return `(B, Hq, Hkv, Nq, Nk, d)`.

    Raises ValueError naming the offending shape, dtype or device.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have rank 4 (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    (b, hq, nq, d), (bk, hkv, nk, dk) = q.shape, k.shape
    if b != bk:
        raise ValueError(
            f"batch mismatch: q {tuple(q.shape)} has B={b}, k {tuple(k.shape)} has B={bk}"
        )
    if d != dk:
        raise ValueError(
            f"head_dim mismatch: q {tuple(q.shape)} has d={d}, k {tuple(k.shape)} has d={dk}"
        )
    if hq % hkv != 0:
        raise ValueError(
            f"query heads Hq={hq} must be a multiple of kv heads Hkv={hkv} "
            f"(q {tuple(q.shape)}, k {tuple(k.shape)})"
        )
    return b, hq, hkv, nq, nk, d
# ~/~ end


# ~/~ begin <<docs/foundations.md#reference-check-mask>>[init]
def check_mask_args(causal: bool, window: int | None) -> None:
    """`window=W` needs `causal=True` and an integer W >= 1."""
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    if window is None:
        return
    check_int("window", window)
    if not causal:
        raise ValueError(f"window={window} needs causal=True (a sliding window looks back only)")
    if window < 1:
        raise ValueError(f"window must be >= 1 (a query always sees itself), got {window}")


def resolve_scale(scale: float | None, head_dim: int) -> float:
    """The softmax scale tau: `head_dim ** -0.5` unless given; a finite, positive number."""
    if scale is None:
        return head_dim**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a number or None, got {scale!r}")
    if not (math.isfinite(scale) and scale > 0):  # a softmax temperature is positive
        raise ValueError(f"scale must be finite and positive, got {scale}")
    return float(scale)
# ~/~ end


# ~/~ begin <<docs/foundations.md#reference-visible-mask>>[init]
def visible_mask(
    nq: int, nk: int, *, causal: bool = False, window: int | None = None, device=None
) -> torch.Tensor:
    """Boolean `(nq, nk)`: True where query i sees key j (bottom-right causal alignment).

    Query i stands at key position pos_i = i + nk - nq; it sees j <= pos_i, and with a window
    also j > pos_i - window.
    """
    check_mask_args(causal, window)
    if nq < 1 or nk < 1:
        raise ValueError(f"nq and nk must be >= 1, got nq={nq}, nk={nk}")
    if not causal:
        return torch.ones(nq, nk, dtype=torch.bool, device=device)
    pos = torch.arange(nq, device=device)[:, None] + (nk - nq)  # pos_i
    j = torch.arange(nk, device=device)[None, :]
    mask = j <= pos
    if window is not None:
        mask &= j > pos - window
    return mask
# ~/~ end


# ~/~ begin <<docs/foundations.md#reference-attention>>[init]
def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention as the phase defines it; the specification every kernel is tested against.

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d) with Hq % Hkv == 0 (query head h reads kv head
    h // (Hq // Hkv)). causal aligns bottom-right; window=W (causal only) keeps the W most recent
    keys, the query's own position included. scale defaults to d ** -0.5.

    Returns O: (B, Hq, Nq, d) in float32 (float64 for float64 inputs), and with return_lse the
    natural-log log-sum-exp (B, Hq, Nq) of the scaled scores. A row with no visible key gives
    O = 0 and lse = -inf.
    """
    _, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    kv_head = torch.arange(hq, device=q.device) // (hq // hkv)  # query head h -> kv head
    qf, kf, vf = q.to(compute), k.to(compute)[:, kv_head], v.to(compute)[:, kv_head]

    s = tau * (qf @ kf.transpose(-1, -2))  # S: (B, Hq, Nq, Nk)
    mask = visible_mask(nq, nk, causal=causal, window=window, device=q.device)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf on rows that see nothing
    empty = lse[..., None] == float("-inf")
    p = torch.where(empty, 0.0, torch.exp(s - lse[..., None]))  # only empty rows are zeroed:
    out = p @ vf  # a NaN or an overflow anywhere else still shows in the output
    return (out, lse) if return_lse else out
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#reference-naive-attention>>[init]
def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, hidden: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention as three kernels that write S and P to device memory (four with a mask): the
    implementation naive_attention_bytes_per_kernel counts, and Lab 01 measures.

    q: (B, Hq, Nq, d), k, v: (B, Hkv, Nk, d), contiguous. hidden: (Nq, Nk) bool, True where a
    query does NOT see a key (`~visible_mask(...)`), made once by the caller as a model keeps
    its causal mask. A row with no visible key gives NaN here (eager PyTorch's softmax), not the
    reference's zeros.
    """
    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    tau = resolve_scale(scale, d)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    if hidden is not None and (hidden.shape != (nq, nk) or hidden.dtype != torch.bool
                               or hidden.device != q.device):
        raise ValueError(f"hidden must be a bool ({nq}, {nk}) tensor on {q.device}, got "
                         f"{hidden.dtype} {tuple(hidden.shape)} on {hidden.device}")
    g = hq // hkv
    q3 = q.view(b * hkv, g * nq, d)  # the g query heads of a kv head, stacked: a view
    k3, v3 = k.view(b * hkv, nk, d), v.view(b * hkv, nk, d)
    s = torch.baddbmm(q.new_empty(()), q3, k3.mT, beta=0.0, alpha=tau)  # S = tau Q K^T
    if hidden is not None:  # in place: one kernel that reads S and the mask and writes S
        s.view(b * hkv, g, nq, nk).masked_fill_(hidden, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.bmm(p, v3).view(b, hq, nq, d)  # O = P V
# ~/~ end
# ~/~ end

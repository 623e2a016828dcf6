# ~/~ begin <<docs/theory/00-motivation.md#src/minimodel/roofline.py>>[init]
"""FLOP and byte counts of attention: the roofline's horizontal axis, I = F / bytes.

Every FLOP and byte figure in minimodel comes from this module. Tangled from
docs/theory/00-motivation.md (the Flash byte model from docs/theory/02-flash-attention.md, the
MLA counts from docs/theory/04-gqa-mqa-mla.md, the per-kernel counts from
docs/lab/01-flash-bytes.md, the batches of sequences of their own lengths from
docs/lab/05-exam.md, the 8-bit cache from docs/lab/03b-paged-kernels.md); edit the pages, not
this file. The roofs are in minimodel.ceilings, the figure in minimodel.roofline_plot.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from minimodel.checks import check_int
from minimodel.reference import check_mask_args

__all__ = [
    "LayerCosts", "arithmetic_intensity", "attention_flops", "attention_min_bytes",
    "decode_bytes", "decoder_layer_costs", "flash_attention_bytes", "flash_forward_bytes",
    "key_range", "kv_cache_bytes", "mla_cache_bytes", "mla_decode_bytes", "mla_decode_flops",
    "naive_attention_bytes", "naive_attention_bytes_per_kernel", "paged_decode_bytes",
    "scaled_kv_cache_bytes", "varlen_attention_flops", "varlen_attention_min_bytes",
    "visible_pairs",
]

# ~/~ begin <<docs/theory/00-motivation.md#roofline-flops>>[init]
def visible_pairs(nq: int, nk: int, *, causal: bool = False, window: int | None = None) -> int:
    """|V| = sum_i |V(i)|: the visible (query, key) pairs, masks aligned bottom-right."""
    check_mask_args(causal, window)
    _check_positive(nq=nq, nk=nk)
    if not causal:
        return nq * nk
    # Query i stands at key position pos_i = i + nk - nq <= nk - 1 and sees min(pos_i + 1, W)
    # keys (none when pos_i < 0). Over pos = a ... nk - 1, with a = max(0, nk - nq), that is
    # S(nk) - S(a), S(n) = sum_{t=1}^{n} min(t, W): a closed form, O(1) for any size.
    def s(n: int) -> int:
        if window is None or n <= window:
            return n * (n + 1) // 2
        return window * (window + 1) // 2 + (n - window) * window

    return s(nk) - s(max(0, nk - nq))


def attention_flops(
    b: int, hq: int, nq: int, nk: int, d: int, *, causal: bool = False, window: int | None = None
) -> int:
    """F = 4 * B * Hq * d * |V|: the matmul FLOPs of the forward pass (QK^T and PV)."""
    _check_positive(b=b, hq=hq, d=d)
    return 4 * b * hq * d * visible_pairs(nq, nk, causal=causal, window=window)
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-bytes>>[init]
def naive_attention_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2
) -> int:
    """HBM bytes of three-kernel attention that writes and re-reads S and P."""
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    per_batch = hq * (2 * nq * d + 4 * nq * nk) + hkv * 2 * nk * d
    return elem_bytes * b * per_batch


def attention_min_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2
) -> int:
    """Compulsory HBM bytes: read Q, K, V once and write O once (the fused kernel's floor)."""
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    return elem_bytes * b * (2 * hq * nq * d + 2 * hkv * nk * d)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """I = F / bytes moved, in FLOP per byte: finite flops >= 0 over finite nbytes > 0."""
    if not ((flops == 0 or _is_finite_positive(flops)) and _is_finite_positive(nbytes)):
        raise ValueError(f"need finite flops >= 0 and nbytes > 0, got flops={flops!r}, "
                         f"nbytes={nbytes!r}")
    return flops / nbytes


def _is_finite_positive(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value) and value > 0)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        check_int(name, value, 1)


def _check_nonnegative(**values: int) -> None:
    for name, value in values.items():
        check_int(name, value, 0)
# ~/~ end


# ~/~ begin <<docs/theory/02-flash-attention.md#roofline-flash-bytes>>[init]
def flash_attention_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, block_m: int,
    block_n: int | None = None, elem_bytes: int = 2, causal: bool = False,
    window: int | None = None, lse: bool = True,
) -> int:
    """HBM bytes of Lab 02's Flash forward if no tile is ever served from a cache: an upper bound.

    One program per (batch, query head, tile of block_m queries) reads its Q tile once, writes
    its O tile once and, with lse=True (Lab 02 always does), one float32 log-sum-exp per row. It
    reads every K and V tile of block_n keys in its key range [lo, hi): all of them without a
    mask; with causal/window only the whole tiles Lab 02 visits (bottom-right alignment). Rows
    past nq or nk are zero-filled by the TMA, not read. block_n matters only under a mask and is
    required there. Hkv changes nothing: every query head's programs read their kv head's tiles
    themselves, so GQA's saving shows in attention_min_bytes and, on a GPU, in the L2 cache.
    """
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, block_m=block_m,
                    elem_bytes=elem_bytes)
    check_mask_args(causal, window)
    if hq % hkv:
        raise ValueError(f"query heads Hq={hq} must be a multiple of kv heads Hkv={hkv}")
    if not isinstance(lse, bool):
        raise ValueError(f"lse must be a bool, got {lse!r}")
    if block_n is not None:
        _check_positive(block_n=block_n)
    elif causal:
        raise ValueError("causal=True needs block_n: which key tiles are visited depends on it")
    kv_rows = sum(_flash_key_rows(i0, nq, nk, block_m, block_n, causal, window)
                  for i0 in range(0, nq, block_m))  # summed over the query tiles of one head
    per_head = elem_bytes * (2 * nq * d + 2 * kv_rows * d) + (4 * nq if lse else 0)
    return b * hq * per_head


def _flash_key_rows(i0: int, nq: int, nk: int, block_m: int, block_n: int | None, causal: bool,
                    window: int | None) -> int:
    """Key rows that the query tile starting at row i0 loads: Lab 02's [lo, hi), in whole tiles."""
    if not causal:
        return nk
    _, lo, _, _, hi = key_range(i0, nq, nk, window, block_m, block_n, causal=True)
    if hi <= lo:
        return 0  # every row of the tile sees nothing (Nq > Nk): Q read, zeros written
    tiles = -(-(hi - lo) // block_n)  # the last tile is loaded whole, cut only at nk
    return min(lo + tiles * block_n, nk) - lo


def key_range(i0: int, nq: int, nk: int, window: int | None, block_m: int, block_n: int, *,
              causal: bool) -> tuple[int, int, int, int, int]:
    """The Python twin of the kernels' key range (minimodel.kernels.key_range): for query rows
    [i0, i0 + block_m), (lo_seen, lo, full_lo, full_hi, hi), masks aligned bottom-right."""
    shift = nk - nq  # query i stands at key position pos_i = i + shift
    lo_seen = lo = full_lo = 0
    hi = nk
    full_hi = nk // block_n * block_n
    if causal:
        pos_first, pos_last = i0 + shift, i0 + block_m - 1 + shift
        hi = max(min(nk, pos_last + 1), 0)  # keys past pos_last: invisible to the whole tile
        if window is not None:
            lo_seen = max(0, pos_first - window + 1)
            lo = lo_seen // block_n * block_n
            full_lo = max(0, pos_last - window + 1)
            full_lo = min((full_lo + block_n - 1) // block_n * block_n, max(hi, lo))
        full_hi = max(min(nk, pos_first + 1), 0) // block_n * block_n
        full_hi = min(max(full_hi, full_lo), max(hi, full_lo))
    return lo_seen, lo, full_lo, full_hi, hi
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-decoder>>[init]
@dataclass(frozen=True)
class LayerCosts:
    """One decoder layer, one decode step (one new token per sequence)."""

    proj_flops: int  # projections + MLP, whole batch
    attn_flops: int  # QK^T and PV against the context, whole batch
    weight_bytes: int  # every weight read once, shared by the batch
    kv_bytes: int  # every sequence's K and V cache read once


def decoder_layer_costs(
    d_model: int, n_heads: int, n_kv_heads: int, context: int, *, batch: int = 1,
    mlp_ratio: int = 4, elem_bytes: int = 2,
) -> LayerCosts:
    """FLOPs and bytes of one decode step of one layer (the counts on Theory 00)."""
    _check_positive(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, context=context,
                    batch=batch, mlp_ratio=mlp_ratio, elem_bytes=elem_bytes)
    if d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError(
            f"need n_heads | d_model and n_kv_heads | n_heads, got d_model={d_model}, "
            f"n_heads={n_heads}, n_kv_heads={n_kv_heads}"
        )
    head_dim = d_model // n_heads
    d_kv = n_kv_heads * head_dim
    weights = 2 * d_model * d_model + 2 * d_model * d_kv + 2 * mlp_ratio * d_model**2
    return LayerCosts(
        proj_flops=2 * batch * weights,
        attn_flops=4 * batch * context * d_model,
        weight_bytes=elem_bytes * weights,
        kv_bytes=kv_cache_bytes(1, n_kv_heads, head_dim, context, batch=batch,
                                elem_bytes=elem_bytes),
    )


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, *, batch: int = 1,
    elem_bytes: int = 2,
) -> int:
    """A KV cache of `tokens` tokens per sequence: K and V, 2 * L * Hkv * d * E bytes a token."""
    _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, batch=batch,
                    elem_bytes=elem_bytes)
    _check_nonnegative(tokens=tokens)
    return 2 * n_layers * n_kv_heads * head_dim * elem_bytes * tokens * batch
# ~/~ end


# ~/~ begin <<docs/theory/04-gqa-mqa-mla.md#roofline-mla>>[init]
def mla_cache_bytes(
    n_layers: int, latent_dim: int, rope_dim: int, tokens: int, *, batch: int = 1,
    elem_bytes: int = 2,
) -> int:
    """MLA's cache: one latent c_j (latent_dim) and one shared RoPE key (rope_dim) a token/layer."""
    _check_positive(n_layers=n_layers, latent_dim=latent_dim, batch=batch, elem_bytes=elem_bytes)
    _check_nonnegative(rope_dim=rope_dim, tokens=tokens)
    return n_layers * (latent_dim + rope_dim) * elem_bytes * tokens * batch


def mla_decode_flops(b: int, n_heads: int, nk: int, latent_dim: int, rope_dim: int) -> int:
    """One new token per sequence over nk cached latents, up-projections folded into q and out:
    2 (d_c + d_R) FLOPs per key and head for the scores, 2 d_c for the values."""
    _check_positive(b=b, n_heads=n_heads, nk=nk, latent_dim=latent_dim)
    _check_nonnegative(rope_dim=rope_dim)
    return b * n_heads * nk * (2 * (latent_dim + rope_dim) + 2 * latent_dim)


def mla_decode_bytes(
    b: int, n_heads: int, nk: int, latent_dim: int, rope_dim: int, *, elem_bytes: int = 2
) -> int:
    """Compulsory bytes of one MLA decode step of one layer, on attention_min_bytes' basis:
    every head's absorbed query (d_c + d_R) read once, the nk cached latents and RoPE keys read
    once, every head's output in latent space (d_c, before W^UV) written once."""
    _check_positive(b=b, n_heads=n_heads, nk=nk, latent_dim=latent_dim, elem_bytes=elem_bytes)
    _check_nonnegative(rope_dim=rope_dim)
    queries, outputs = n_heads * (latent_dim + rope_dim), n_heads * latent_dim
    return elem_bytes * b * (queries + nk * (latent_dim + rope_dim) + outputs)
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-lab01>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-naive-per-kernel>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-naive-per-kernel-interface>>[init]
def naive_attention_bytes_per_kernel(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2,
    causal: bool = False, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """Device-memory bytes of each kernel of `naive_attention`, in launch order.

    Keys "scores" (S = tau Q K^T), "mask" (only when causal: S where the mask is True, else
    -inf), "softmax" (P) and "output" (O = P V); each value {"read": r, "write": w}, every
    input of the kernel read once and every output written once. q: (B, Hq, Nq, d); k, v:
    (B, Hkv, Nk, d); S and P: (B, Hq, Nq, Nk); all elem_bytes per element, except the mask: one
    bool (1 byte) per (query, key) pair, shared by every batch and head. A window changes the
    mask's values, not its bytes.
    """
# ~/~ end
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    check_mask_args(causal, window)
    _check_heads(hq, hkv)
    e = elem_bytes
    q, o, kv = e * b * hq * nq * d, e * b * hq * nq * d, e * b * hkv * nk * d  # K or V
    s = e * b * hq * nq * nk  # S or P
    kernels = {"scores": {"read": q + kv, "write": s}}
    if causal:
        kernels["mask"] = {"read": s + nq * nk, "write": s}  # the bool mask: 1 byte a pair
    kernels["softmax"] = {"read": s, "write": s}
    kernels["output"] = {"read": s + kv, "write": o}
    return kernels


def _check_heads(hq: int, hkv: int) -> None:
    if hq % hkv:
        raise ValueError(f"query heads Hq={hq} must be a multiple of kv heads Hkv={hkv}")
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-flash-forward-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-flash-forward-bytes-interface>>[init]
def flash_forward_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, block_m: int,
    block_n: int | None = None, elem_bytes: int = 2, causal: bool = False,
    window: int | None = None,
) -> dict[str, int]:
    """{"read", "read_tiled", "write"} of Lab 02's `flash_attention` with tiles block_m x block_n.

    read: Q once, and once per kv head every K and V row that some query tile loads.
    read_tiled: every program's loads, the Q tile once and its K/V tiles [lo, hi) (rows past nk
    are zero-filled by the TMA, not read). write: O (elem_bytes) and the float32 lse, once.
    block_n is required with causal=True (which key tiles are visited depends on it).
    """
# ~/~ end
    tiled = flash_attention_bytes(b, hq, hkv, nq, nk, d, block_m=block_m, block_n=block_n,
                                  elem_bytes=elem_bytes, causal=causal, window=window)
    write = b * hq * nq * (elem_bytes * d + 4)  # O and the float32 lse
    first = 0  # the first key row the first query tile loads: a window's start, in whole tiles
    if window is not None:
        first = max(0, nk - nq - window + 1) // block_n * block_n
    read = elem_bytes * b * (hq * nq * d + 2 * hkv * (nk - first) * d)
    return {"read": read, "read_tiled": tiled - write, "write": write}
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-decode-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-decode-bytes-interface>>[init]
def decode_bytes(
    b: int, hq: int, hkv: int, context: int, d: int, *, num_splits: int = 1,
    elem_bytes: int = 2, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """Bytes of one decode step on a contiguous cache, per kernel: {"decode": {...}} and, when
    num_splits > 1, {"merge": {...}}, each {"read", "read_tiled", "write"}.

    The decode kernel runs one program per (sequence, kv head, split): it loads the g = Hq / Hkv
    query rows of its group (elem_bytes each), the K and V rows of its share of the visible keys
    (the last `window` keys, or all), and writes O (elem_bytes) and a float32 lse per query head;
    split, it writes float32 partial outputs and lse per split instead, which the merge kernel
    reads (the lse twice) and combines into O and lse.
    """
# ~/~ end
    _check_positive(b=b, hq=hq, hkv=hkv, context=context, d=d, num_splits=num_splits,
                    elem_bytes=elem_bytes)
    _check_heads(hq, hkv)
    check_mask_args(True, window)
    keys = context if window is None else min(context, window)
    q, kv = elem_bytes * b * hq * d, 2 * elem_bytes * b * hkv * keys * d
    out = b * hq * (elem_bytes * d + 4)  # O and the float32 lse
    if num_splits == 1:
        return {"decode": {"read": q + kv, "read_tiled": q + kv, "write": out}}
    partial = 4 * b * hq * num_splits * (d + 1)  # float32 O_u and lse_u of every split
    return {
        "decode": {"read": q + kv, "read_tiled": num_splits * q + kv, "write": partial},
        "merge": {"read": partial, "read_tiled": partial + 4 * b * hq * num_splits,
                  "write": out},
    }
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-paged-decode-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-paged-decode-bytes-interface>>[init]
def paged_decode_bytes(
    b: int, hq: int, hkv: int, context: int, d: int, *, block_size: int, block_n: int,
    num_splits: int = 1, elem_bytes: int = 2, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """decode_bytes plus what paging adds to the decode kernel: each program loads its
    sequence's int32 context length and, for every key tile it visits, the block-table entries
    of the tile's visible keys (one entry per tile when block_size >= block_n, since the tile
    lies in one block)."""
# ~/~ end
    _check_positive(block_size=block_size, block_n=block_n)
    step = decode_bytes(b, hq, hkv, context, d, num_splits=num_splits, elem_bytes=elem_bytes,
                        window=window)
    lo = 0 if window is None else max(0, context - window)  # the first visible key
    blocks = -(-context // block_size) - lo // block_size  # blocks the visible keys fall in
    entries = 0  # table entries one program loads, tile by tile
    for start in range(lo // block_n * block_n, context, block_n):
        first, last = max(start, lo), min(start + block_n, context) - 1
        entries += 1 if block_size >= block_n else last // block_size - first // block_size + 1
    kernel = step["decode"]
    kernel["read"] += 4 * b * blocks + 4 * b  # the table and the lengths, once per sequence
    kernel["read_tiled"] += 4 * b * hkv * entries + 4 * b * hkv * num_splits
    return step
# ~/~ end
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#roofline-varlen>>[init]
def varlen_attention_flops(
    hq: int, d: int, seqs: Sequence[tuple[int, int]], *, causal: bool = False,
    window: int | None = None,
) -> int:
    """F of one call over sequences of their own lengths: seqs holds (nq, nk) per sequence, its
    query rows and its keys, masks aligned bottom-right within each. The sum over the
    sequences of attention_flops(1, hq, nq, nk, d)."""
    _check_positive(hq=hq, d=d)
    return sum(attention_flops(1, hq, nq, nk, d, causal=causal, window=window)
               for nq, nk in _check_seqs(seqs))


def varlen_attention_min_bytes(
    hq: int, hkv: int, d: int, seqs: Sequence[tuple[int, int]], *, elem_bytes: int = 2,
    kv_elem_bytes: int | None = None, kv_scale_bytes: int = 0,
) -> int:
    """Compulsory bytes of one call over sequences of their own lengths (seqs as for
    varlen_attention_flops): every query row read and every output row written once, elem_bytes
    an element; every sequence's K and V read once, kv_elem_bytes an element (elem_bytes unless
    told), plus kv_scale_bytes per token, kv head and tensor: a quantised cache with one scale
    per token and kv head for K and one for V. Equal sequences and no scales give
    attention_min_bytes."""
    _check_positive(hq=hq, hkv=hkv, d=d, elem_bytes=elem_bytes)
    kv_elem = elem_bytes if kv_elem_bytes is None else kv_elem_bytes
    _check_positive(kv_elem_bytes=kv_elem)
    _check_nonnegative(kv_scale_bytes=kv_scale_bytes)
    _check_heads(hq, hkv)
    pairs = _check_seqs(seqs)
    rows, keys = sum(nq for nq, _ in pairs), sum(nk for _, nk in pairs)
    return 2 * elem_bytes * hq * rows * d + 2 * hkv * keys * (kv_elem * d + kv_scale_bytes)


def _check_seqs(seqs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """seqs as a list of (nq, nk) pairs of positive ints, at least one; ValueError otherwise."""
    pairs = list(seqs) if isinstance(seqs, list | tuple) else None
    if not pairs:
        raise ValueError(f"seqs must be a non-empty list of (nq, nk) pairs, got {seqs!r}")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise ValueError(f"seqs[{i}] must be an (nq, nk) pair, got {pair!r}")
        _check_positive(**{f"seqs[{i}] nq": pair[0], f"seqs[{i}] nk": pair[1]})
    return [tuple(p) for p in pairs]
# ~/~ end
# ~/~ begin <<docs/lab/03b-paged-kernels.md#roofline-fp8>>[init]
def scaled_kv_cache_bytes(
    n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, *, batch: int = 1,
    elem_bytes: int = 1, scale_bytes: int = 4,
) -> int:
    """A KV cache of `elem_bytes` per element with one scale of `scale_bytes` per token and kv
    head, for K and for V: 2 * L * Hkv * (d * E + S) bytes a token (E = 1, S = 4: e4m3 with
    float32 scales; S = 0 is kv_cache_bytes)."""
    _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, batch=batch,
                    elem_bytes=elem_bytes)
    _check_nonnegative(tokens=tokens, scale_bytes=scale_bytes)
    return 2 * n_layers * n_kv_heads * (head_dim * elem_bytes + scale_bytes) * tokens * batch
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/01-flash-bytes.md#exercises/lab01/roofline.py>>[init]
"""Lab 01: the bytes each kernel moves. Write the four functions below.

Skeleton tangled from docs/lab/01-flash-bytes.md (`make exercise LAB=01` copies it to
mywork/roofline.py); check it with `make check-mine LAB=01`. Every other name of
minimodel.roofline (attention_min_bytes, flash_attention_bytes, _check_positive, ...) is the
solution's: call them freely. naive_attention, which the first function counts, is
minimodel.reference's.
"""

from minimodel.reference import check_mask_args  # noqa: F401
from minimodel.roofline import _check_positive, flash_attention_bytes  # noqa: F401


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
    raise NotImplementedError(
        "not written yet: naive_attention_bytes_per_kernel: read and write of each kernel"
    )


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
    raise NotImplementedError(
        "not written yet: flash_forward_bytes: distinct reads, tiled reads and writes"
    )


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
    raise NotImplementedError(
        "not written yet: decode_bytes: the decode kernel and, when split, the merge"
    )


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
    raise NotImplementedError(
        "not written yet: paged_decode_bytes: decode_bytes plus block-table and length reads"
    )
# ~/~ end

# ~/~ begin <<docs/lab/03b-paged-kernels.md#exercises/lab03/paged_attention.py>>[init]
"""Lab 03, part 2: paged attention in Triton. Write the decode kernel and the prefill kernel
and fill in `paged_decode` and `paged_prefill`.

Skeleton tangled from docs/lab/03b-paged-kernels.md (`make exercise LAB=03` copies it to
mywork/); check it with `make check-mine LAB=03`. Set TRITON_INTERPRET=1 before importing
triton to run the kernels on a CPU (the tests do).
"""

import torch
import triton  # noqa: F401  (your kernels: @triton.jit)
import triton.language as tl  # noqa: F401

from minimodel.reference import check_mask_args, resolve_scale  # noqa: F401


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-interface>>[init]
def paged_decode(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    max_context_len: int | None = None,
    num_splits: int | None = None,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    error_flags: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Decode attention: one new query token per sequence against its paged KV cache.

    q: (B, Hq, d), the token at key position context_lens[b] - 1 (its own K/V already written).
    k_pool, v_pool: (num_blocks, block_size, Hkv, d), block_size a power of two in [8, 128].
    block_tables: (B, max_blocks) int32, the physical block of each logical block; entries past a
    context (or before a window) are never read and may be -1. context_lens: (B,) int32, from 0
    to max_blocks * block_size. num_splits overrides the split of each context across programs.
    window=W keeps the W latest keys. float16 / bfloat16 / float32 (no bfloat16 under the
    interpreter); d a multiple of 8 in [16, 256]. Index tensors are read through their strides.

    8-bit pools (an extension, not part of the lab's task): k_pool and v_pool both
    torch.float8_e4m3fn, with k_scale and v_scale (num_blocks, block_size, Hkv) float32 (any
    strides), one scale per slot and kv head: the key in slot s of block blk, head h, is
    k_pool[blk, s, h, :] * k_scale[blk, s, h] (quantize_kv makes both); the same for V. Scales
    go with 8-bit pools and only with them. The checked path also checks that every scale a
    sequence reads is finite and positive (a second sync); the fast path trusts them.

    Checked path (max_context_len omitted): one device sync checks the lengths and every table
    entry a sequence reads against the pool, and raises ValueError naming the first bad one.
    Fast path (max_context_len given, a host int >= max(context_lens) that sets the split): no
    sync, as CUDA-graph capture needs. The kernel then never follows an entry outside
    [0, num_blocks) (its keys count as no key) nor reads past a sequence's own table row (a
    length past it is cut to it); it ORs into error_flags[b] (int32 (B,), zeroed by the caller,
    optional) ERR_BAD_ENTRY = 1 or ERR_BAD_LENGTH = 2; a flagged sequence's output is not its
    attention. An in-range entry naming another sequence's block is the caller's business.

    Returns O: (B, Hq, d) in q's dtype and, with return_lse, the natural-log lse (B, Hq) in
    float32: the last query row of attention_ref(causal=True, window=W). A context of length 0
    gives zeros and lse = -inf.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: paged_decode: validate, split each context, launch your decode kernel "
        "(and the merge)"
    )


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-prefill-interface>>[init]
def paged_prefill(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    max_query_len: int | None = None,
    causal: bool = True,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    error_flags: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Prefill attention: a chunk of new tokens per sequence against its paged KV cache.

    q: (total_q, Hq, d), the new tokens of all sequences packed along dim 0: sequence b's are
    rows query_start_loc[b] to query_start_loc[b + 1] - 1 (query_start_loc: (B + 1,) int32,
    rising from 0 to total_q; a sequence may have none). Their K/V are already in the pools:
    new token i of sequence b stands at key position context_lens[b] - n_b + i (n_b its count),
    attention_ref's bottom-right alignment. k_pool, v_pool, block_tables, context_lens,
    error_flags, k_scale and v_scale as for paged_decode. causal and window=W as attention_ref
    has them.

    Checked path (max_query_len omitted): one device sync checks the offsets, the lengths and
    the table entries the rows read, as paged_decode does. Fast path (max_query_len given, a
    host int, the longest chunk, that sizes the grid; a smaller one costs speed, not
    correctness): no sync; the kernel stays inside the pool and each sequence's row as
    paged_decode's does, and a sequence whose rows leave q, run backwards or leave a gap at
    either end computes nothing and is flagged ERR_BAD_QUERY_START = 4.

    Returns O: (total_q, Hq, d) in q's dtype and, with return_lse, the natural-log lse
    (total_q, Hq) in float32. A row that sees no key (more new tokens than keys, an empty
    context) gives zeros and lse = -inf.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: paged_prefill: validate, launch your Flash kernel over the block table"
    )
# ~/~ end

# ~/~ begin <<docs/lab/03b-paged-kernels.md#src/minimodel/paged_attention.py>>[init]
"""Paged attention in Triton: a decode kernel (one new token per sequence, Flash-Decoding splits
merged with the log-sum-exp rule) and a prefill kernel (a chunk of new tokens per sequence), both
reading K and V through a block table.

Tangled from docs/lab/03b-paged-kernels.md; edit the page, not this file.
"""

import threading
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from minimodel import paged_attention_hopper
from minimodel.kernels import (
    INTERPRET,
    LN2,
    LOG2E,
    MAX_GRID_X,
    MAX_GRID_Y,
    SUPPORTED_DTYPES,
    Prepared,
    capability,
    cdiv,
    check_forward_only,
    check_int,
    keep,
    key_range,
    launch,
    next_power_of_2,
    num_sms,
    planned,
    signature,
)
from minimodel.reference import check_mask_args, resolve_scale

__all__ = ["ERR_BAD_ENTRY", "ERR_BAD_LENGTH", "ERR_BAD_QUERY_START", "FP8_DTYPE", "FP8_MAX",
           "choose_num_splits", "dequantize_kv", "paged_decode", "paged_prefill", "quantize_kv"]

# The bits of the fast path's error flags (see `paged_decode`), and the kernels' copies of them.
ERR_BAD_ENTRY = 1  # a table entry a sequence reads lies outside the pool
ERR_BAD_LENGTH = 2  # a context length outside [0, max_blocks * block_size]
ERR_BAD_QUERY_START = 4  # prefill: a chunk's rows outside q, backwards, or a gap at either end
_BAD_ENTRY = tl.constexpr(ERR_BAD_ENTRY)
_BAD_LENGTH = tl.constexpr(ERR_BAD_LENGTH)
_BAD_QUERY_START = tl.constexpr(ERR_BAD_QUERY_START)

# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-scaled-pv>>[init]
@triton.jit
def _scaled_pv(acc, p, v, v_scale, DOT_PRECISION: tl.constexpr):
    """acc + P~ diag(s) V^ for a tile of values stored in 8 bits: V^ (BLOCK_N, HEAD_DIM) already
    in the compute dtype, row j standing for s_j V^_j (v_scale: (BLOCK_N,) float32, 0 for a key
    not visible). The scales fold into P~'s columns (BLOCK_G x BLOCK_N products, not
    BLOCK_N x HEAD_DIM), the tile's largest taken out first: P~_hj s_j / s_max lies in [0, 1] as
    P~_hj does, where P~_hj s_j itself (s_j = amax_j / 448) can fall below float16's normal
    range and lose its bits on the way to the tensor cores."""
    s_max = tl.max(v_scale, 0)
    s_max = tl.where(s_max > 0.0, s_max, 1.0)  # no visible key in the tile: every s_j is 0
    pv = tl.dot((p * (v_scale / s_max)[None, :]).to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc + s_max * pv
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-longest-first>>[init]
@triton.jit
def _longest_first(lens_ptr, stride_len, rank, batch, BLOCK_B: tl.constexpr):
    """The index of the sequence that is rank-th by context length, longest first, ties by
    batch index: the sort key is the length (as read: a bad one is ordered too, and cut by the
    kernel later) then the index reversed, and the padding past the batch sorts last."""
    ib = tl.arange(0, BLOCK_B)
    n = tl.load(lens_ptr + ib.to(tl.int64) * stride_len, mask=ib < batch, other=0)
    key = (n.to(tl.int64) + 2**31) * BLOCK_B + (BLOCK_B - 1 - ib)  # >= 0 for any int32 length
    key = tl.sort(tl.where(ib < batch, key, -1), descending=True)
    mine = tl.max(tl.where(ib == rank, key, -1), 0)  # rank < batch: a real sequence's key
    return BLOCK_B - 1 - mine % BLOCK_B
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-kernel>>[init]
@triton.jit(do_not_specialize=["n_k", "window", "split_len", "n_kv_heads", "group", "num_blocks",
                               "capacity"])
def _paged_decode_fwd(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr,
    qk_scale, n_k, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_qd,
    stride_kblk, stride_kslot, stride_kh, stride_kd,
    stride_vblk, stride_vslot, stride_vh, stride_vd,
    stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_od,
    stride_lb, stride_lh, stride_ls,
    ks_ptr, vs_ptr, stride_ksblk, stride_ksslot, stride_ksh, stride_vsblk, stride_vsslot,
    stride_vsh,
    fo_ptr, flse_ptr, count_ptr, stride_fob, stride_foh, stride_fod, stride_flb, stride_flh,
    D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, PAGED: tl.constexpr, WINDOWED: tl.constexpr,
    HAS_ERR: tl.constexpr, DOT_PRECISION: tl.constexpr, FP8: tl.constexpr,
    FOLD: tl.constexpr, BLOCK_S: tl.constexpr, STORE_LSE: tl.constexpr, LSE: tl.constexpr,
    LONGEST_FIRST: tl.constexpr,
):
    # A group of more than BLOCK_G query heads is cut into chunks of BLOCK_G, one program each.
    # The chunks of one (sequence, kv head) are neighbours on the first axis, so they are
    # scheduled together and read the same K/V tiles at about the same time.
    chunks = (group + BLOCK_G - 1) // BLOCK_G  # as group_rows counts them
    off_bh = tl.program_id(0) // chunks
    chunk = tl.program_id(0) % chunks
    split = tl.program_id(1)
    off_b = off_bh // n_kv_heads
    if LONGEST_FIRST > 0:  # programs start longest sequence first (see "How many splits")
        off_b = _longest_first(lens_ptr, stride_len, off_b,
                               tl.num_programs(0) // (n_kv_heads * chunks), LONGEST_FIRST)
    # Every index that multiplies a stride is int64: a cache past 2^31 elements is addressed
    # exactly (off_hkv * stride_kh alone passes 2^31 at 32 heads of 589,824 keys of 128).
    off_hkv = (off_bh % n_kv_heads).to(tl.int64)
    b64 = off_b.to(tl.int64)
    bad_len = False
    if PAGED:
        ctx = tl.load(lens_ptr + b64 * stride_len)  # this sequence's context length
        # The fast path's guard: a length outside [0, max_blocks * block_size] is flagged and
        # cut to its own table row, so no key past the row (another sequence's) is ever read.
        bad_len = (ctx < 0) | (ctx > capacity)
        ctx = tl.minimum(tl.maximum(ctx, 0), capacity)
    else:
        ctx = n_k  # a contiguous cache: every sequence holds n_k keys
    lo = 0  # the first visible key: the query stands at position ctx - 1
    if WINDOWED:
        lo = tl.maximum(ctx - window, 0)
    # This program's share of the keys: [start, end), tile-aligned, split_len keys per split; the
    # last split runs to the end of the context whatever split_len says.
    start = lo // BLOCK_N * BLOCK_N + split * split_len
    end = tl.where(split == tl.num_programs(1) - 1, ctx, tl.minimum(start + split_len, ctx))

    # this chunk's query heads, numbered within the kv head's group, padded past the group's end
    offs_g = chunk * BLOCK_G + tl.arange(0, BLOCK_G)
    heads = off_hkv * group + offs_g  # int64
    g_ok = offs_g < group
    cols = tl.arange(0, HEAD_DIM)
    cols64 = cols.to(tl.int64)
    row_mask = g_ok[:, None]
    if D != HEAD_DIM:  # a head dim that is not a power of two: mask the padding columns
        row_mask = row_mask & (cols[None, :] < D)
    q = tl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + cols64[None, :] * stride_qd,
                mask=row_mask, other=0.0)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)  # running max m_i (log2 units)
    l_i = tl.zeros([BLOCK_G], tl.float32)  # running sum l_i
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)  # running sum of P~ V
    offs_n = tl.arange(0, BLOCK_N)
    bad_keys = tl.zeros([BLOCK_N], tl.int32)  # keys whose table entry lies outside the pool
    k_head = k_ptr + off_hkv * stride_kh
    v_head = v_ptr + off_hkv * stride_vh
    k_cols = cols64[None, :] * stride_kd
    v_cols = cols64[None, :] * stride_vd
    if FP8:  # 8-bit pools (paged only): one float32 scale per (block, slot) of this kv head
        ks_head = ks_ptr + off_hkv * stride_ksh
        vs_head = vs_ptr + off_hkv * stride_vsh
    for start_n in tl.range(start, end, BLOCK_N):
        j = start_n + offs_n  # key positions of this tile
        visible = (j >= lo) & (j < end)
        if PAGED:
            # Every entry read is of a block holding a key j with 0 <= j < end <= ctx <= capacity:
            # it lies in this row.
            table = table_ptr + b64 * stride_tb  # this sequence's row
            if BLOCK_SIZE >= BLOCK_N:  # the tile lies in one block: one table entry
                phys = tl.load(table + (start_n // BLOCK_SIZE) * stride_tc).to(tl.int64)
            else:  # the tile spans BLOCK_N / BLOCK_SIZE blocks: one entry per block, each
                # given to its BLOCK_SIZE keys (not one load per key: fewer, wider loads).
                blk = start_n // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
                entry = tl.load(table + blk * stride_tc, mask=blk * BLOCK_SIZE < end, other=0)
                per_key = tl.broadcast_to(entry[:, None], [BLOCK_N // BLOCK_SIZE, BLOCK_SIZE])
                phys = tl.reshape(per_key, [BLOCK_N]).to(tl.int64)
            # An entry outside [0, num_blocks) is never followed: its keys are not loaded, they
            # count as no key, and the sequence is flagged.
            in_pool = (phys >= 0) & (phys < num_blocks)
            bad_keys |= (visible & ~in_pool).to(tl.int32)
            visible &= in_pool
            slot = (j % BLOCK_SIZE).to(tl.int64)
            k_rows = phys * stride_kblk + slot * stride_kslot
            v_rows = phys * stride_vblk + slot * stride_vslot
        else:  # contiguous: sequence off_b is "block" off_b, key j its slot j
            k_rows = b64 * stride_kblk + j.to(tl.int64) * stride_kslot
            v_rows = b64 * stride_vblk + j.to(tl.int64) * stride_vslot
        kv_mask = visible[:, None]
        if D != HEAD_DIM:
            kv_mask = kv_mask & (cols[None, :] < D)
        k = tl.load(k_head + k_rows[:, None] + k_cols, mask=kv_mask, other=0.0)
        # q_h.k_j, all g heads at once (an 8-bit K converted to q's dtype, exactly)
        qk = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION)
        if FP8:  # q.(s_j k^_j) = s_j (q.k^_j): key j's scale multiplies its column of scores
            qk = qk * tl.load(ks_head + phys * stride_ksblk + slot * stride_ksslot, mask=visible,
                              other=0.0)[None, :]
        s = tl.where(visible[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A tile whose every entry was refused has no visible key: m_new may still be -inf.
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])  # P~_hj = 2^(tau' q_h.k_j - m_h^new)
        alpha = tl.math.exp2(m_i - m_use)  # alpha_h = 2^(m_h - m_h^new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_head + v_rows[:, None] + v_cols, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None]
        if FP8:  # acc += P~ diag(s) V^, the scales folded into P~'s columns
            v_sc = tl.load(vs_head + phys * stride_vsblk + slot * stride_vsslot, mask=visible,
                           other=0.0)
            acc = _scaled_pv(acc, p, v.to(q.dtype), v_sc, DOT_PRECISION)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # acc += P~ V
        m_i = m_new

    empty = l_i == 0.0  # no key in this split (or a context of length 0): O = 0, lse = -inf
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    split64 = split.to(tl.int64)
    o_ptrs = (o_ptr + b64 * stride_ob + heads[:, None] * stride_oh + split64 * stride_os
              + cols64[None, :] * stride_od)
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_mask)
    if STORE_LSE:  # a split's lse_u, or the final lse when the caller asked for it
        tl.store(lse_ptr + b64 * stride_lb + heads * stride_lh + split64 * stride_ls, lse,
                 mask=g_ok)
    if HAS_ERR:  # the caller's flags: bits OR-ed in, never cleared here, one atomic per bit
        # (one atomic of the OR-ed bits lost a bit on the H200 when the fold followed: see
        # "Merging the splits")
        tl.atomic_or(err_ptr + b64 * stride_err, _BAD_ENTRY, mask=tl.max(bad_keys, 0) > 0)
        tl.atomic_or(err_ptr + b64 * stride_err, _BAD_LENGTH, mask=bad_len)
    if FOLD:  # the last of this (sequence, kv head, chunk)'s splits to finish merges its rows
        # Ordering, in the PTX memory model's terms (PTX ISA, "Memory Consistency Model":
        # 8.8 Release and Acquire Patterns, 8.9.4 Memory synchronization). The partials above
        # are weak stores (st.global) by every thread of this program; the counter's add is
        # done by one thread (Triton predicates a scalar atomic to one thread and broadcasts
        # the old value through shared memory: see the PTX it emits for sm_90, checked by
        # test_the_fold_compiles_to_barrier_release_acquire_barrier).
        # 1. tl.debug_barrier() is bar.sync 0: a bar.sync synchronizes with the bar.sync of
        #    every other thread of the CTA (8.9.4, rule 2), so each thread's stores precede,
        #    in causality order, whatever the adding thread does after the barrier.
        # 2. The add is atom.acq_rel.gpu, a release pattern on the counter (8.8): the stores
        #    that step 1 orders before it reach every thread whose acquire pattern it
        #    synchronizes with. The adds of one call form a chain of read-modify-writes on one
        #    location, each reading the one before, so the last program's add follows every
        #    earlier program's add in observation order: each earlier release synchronizes
        #    with the last program's acquire (8.9.4, rule 4), both morally strong (atomics of
        #    scope gpu on one location).
        # 3. In the last program the add is also an acquire pattern; the second barrier carries
        #    it to every thread of the program (rule 2 again), before any of them loads.
        # So every partial store of every split precedes, in causality order, every load of
        # the merge, and the loads read those values (the loads are ld.global, inside the
        # model: it leaves out ld.global.nc, which Triton emits only on request).
        # The reset to 0 needs no ordering within the call: every add of the call is done
        # (the last one read them all). The next call is a later kernel on the same stream,
        # and completion of a kernel synchronizes with the start of the next task in its
        # stream (8.9.4, API synchronization), so it starts from 0; so does every replay of a
        # CUDA graph, whose nodes are ordered likewise. Under the interpreter the programs run
        # one after another, so no race can show there.
        tl.debug_barrier()
        done = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
        if done == tl.num_programs(1) - 1:
            tl.debug_barrier()
            for g in tl.range(chunk * BLOCK_G, tl.minimum(group, chunk * BLOCK_G + BLOCK_G)):
                h = off_hkv * group + g  # int64
                _merge_row(o_ptr + b64 * stride_ob + h * stride_oh,
                           lse_ptr + b64 * stride_lb + h * stride_lh,
                           fo_ptr + b64 * stride_fob + h * stride_foh,
                           flse_ptr + b64 * stride_flb + h * stride_flh,
                           tl.num_programs(1), stride_os, stride_od, stride_ls, stride_fod, D,
                           HEAD_DIM, BLOCK_S, LSE)
            tl.store(count_ptr + tl.program_id(0), 0)  # zero for the next call (or replay)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-merge>>[init]
@triton.jit
def _merge_row(o_rows, lse_row, o_out, lse_out, num_splits, stride_ps, stride_pd, stride_lps,
               stride_od, D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
               LSE: tl.constexpr):
    """One (sequence, query head) row: o = sum_u e^(lse_u - lse) o_u, lse = log sum_u e^(lse_u),
    Theory 01's merge of partials, from the partials O_u (split u at o_rows + u * stride_ps) and
    lse_u (at lse_row + u * stride_lps) into o_out and (if LSE) lse_out. Called by _merge_splits
    and by the decode kernel's last program (FOLD): one merge, whichever kernel runs it."""
    offs_s = tl.arange(0, BLOCK_S)
    cols = tl.arange(0, HEAD_DIM)
    m = tl.full([], float("-inf"), tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        lse_u = tl.load(lse_row + (s0 + offs_s) * stride_lps, mask=s0 + offs_s < num_splits,
                        other=float("-inf"))
        m = tl.maximum(m, tl.max(lse_u, 0))
    m_use = tl.where(m == float("-inf"), 0.0, m)  # every split empty: weights e^-inf = 0
    denom = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        in_range = s0 + offs_s < num_splits
        lse_u = tl.load(lse_row + (s0 + offs_s) * stride_lps, mask=in_range, other=float("-inf"))
        w = tl.exp(lse_u - m_use)  # e^(lse_u - m); 0 for an empty split
        o_mask = in_range[:, None]
        if D != HEAD_DIM:
            o_mask = o_mask & (cols[None, :] < D)
        o_u = tl.load(o_rows + (s0 + offs_s)[:, None] * stride_ps + cols[None, :] * stride_pd,
                      mask=o_mask, other=0.0)
        acc += tl.sum(w[:, None] * o_u, 0)
        denom += tl.sum(w, 0)
    empty = denom == 0.0
    out = acc / tl.where(empty, 1.0, denom)
    lse = m_use + tl.log(denom)  # every split empty: log 0 = -inf
    tl.store(o_out + cols * stride_od, out.to(o_out.dtype.element_ty), mask=cols < D)
    if LSE:
        tl.store(lse_out, lse)


@triton.jit(do_not_specialize=["num_splits", "n_heads"])
def _merge_splits(
    o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, num_splits, n_heads,
    stride_pb, stride_ph, stride_ps, stride_pd,
    stride_lpb, stride_lph, stride_lps,
    stride_ob, stride_oh, stride_od,
    stride_lb, stride_lh,
    D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, LSE: tl.constexpr,
):
    """The merge as a kernel of its own (FOLD=False): one program per (sequence, query head)."""
    off_bh = tl.program_id(0)
    off_b = (off_bh // n_heads).to(tl.int64)
    off_h = (off_bh % n_heads).to(tl.int64)
    _merge_row(o_part_ptr + off_b * stride_pb + off_h * stride_ph,
               lse_part_ptr + off_b * stride_lpb + off_h * stride_lph,
               o_ptr + off_b * stride_ob + off_h * stride_oh,
               lse_ptr + off_b * stride_lb + off_h * stride_lh,
               num_splits, stride_ps, stride_pd, stride_lps, stride_od, D, HEAD_DIM, BLOCK_S, LSE)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-prefill-inner-loop>>[init]
@triton.jit
def _paged_prefill_inner(
    acc, l_i, m_i, n_bad, q, k_head, v_head, table, p_i, lo, hi, lo_seen, hi_seen, window,
    qk_scale, num_blocks, stride_tc, stride_kblk, stride_kslot, stride_kd, stride_vblk,
    stride_vslot, stride_vd, ks_head, vs_head, stride_ksblk, stride_ksslot, stride_vsblk,
    stride_vsslot,
    BLOCK_N: tl.constexpr, D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    DOT_PRECISION: tl.constexpr, FP8: tl.constexpr,
):
    """Stream key tiles [lo, hi) of one kv head, gathered through the block table, past one Q
    tile. Only keys in [lo_seen, hi_seen) (seen by some row of the tile) are ever loaded; a
    masked run also refuses keys whose table entry lies outside the pool (counted in n_bad), an
    interior run is only given entries checked beforehand."""
    offs_n = tl.arange(0, BLOCK_N)
    cols64 = tl.arange(0, HEAD_DIM).to(tl.int64)
    for start_n in tl.range(lo, hi, BLOCK_N):
        j = start_n + offs_n
        if MASKED:
            seen = (j >= lo_seen) & (j < hi_seen)
            phys = tl.load(table + (j // BLOCK_SIZE) * stride_tc, mask=seen, other=0).to(tl.int64)
            in_pool = (phys >= 0) & (phys < num_blocks)
            n_bad += tl.sum((seen & ~in_pool).to(tl.int32), 0)
            seen &= in_pool
            kv_mask = seen[:, None]
        else:  # interior: every key of the tile is seen by every row
            if BLOCK_SIZE >= BLOCK_N:
                phys = tl.load(table + (start_n // BLOCK_SIZE) * stride_tc).to(tl.int64)
            else:
                phys = tl.load(table + (j // BLOCK_SIZE) * stride_tc).to(tl.int64)
            kv_mask = tl.full([BLOCK_N, 1], 1, tl.int1)
        if D != HEAD_DIM:
            kv_mask = kv_mask & (cols64[None, :] < D)
        slot = (j % BLOCK_SIZE).to(tl.int64)
        k = tl.load(k_head + (phys * stride_kblk + slot * stride_kslot)[:, None]
                    + cols64[None, :] * stride_kd, mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION)
        if FP8:  # as in the decode kernel: key j's scale multiplies its column of scores
            if MASKED:
                k_sc = tl.load(ks_head + phys * stride_ksblk + slot * stride_ksslot, mask=seen,
                               other=0.0)
            else:
                k_sc = tl.load(ks_head + phys * stride_ksblk + slot * stride_ksslot)
            qk = qk * k_sc[None, :]
        if MASKED:
            visible = seen[None, :]
            if CAUSAL:
                visible &= j[None, :] <= p_i[:, None]
            if WINDOWED:
                visible &= j[None, :] > p_i[:, None] - window
            s = tl.where(visible, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing
            p = tl.math.exp2(s - m_use[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_use = m_new
            p = tl.math.exp2(qk * qk_scale - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_head + (phys * stride_vblk + slot * stride_vslot)[:, None]
                    + cols64[None, :] * stride_vd, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None]
        if FP8:
            if MASKED:
                v_sc = tl.load(vs_head + phys * stride_vsblk + slot * stride_vsslot, mask=seen,
                               other=0.0)
            else:
                v_sc = tl.load(vs_head + phys * stride_vsblk + slot * stride_vsslot)
            acc = _scaled_pv(acc, p, v.to(q.dtype), v_sc, DOT_PRECISION)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i, n_bad


@triton.jit
def _entries_in_pool(table, stride_tc, lo, hi, num_blocks, BLOCK_SIZE: tl.constexpr,
                     BLOCK_E: tl.constexpr):
    """How many table entries of the keys [lo, hi) lie outside the pool [0, num_blocks): run once
    per program before an interior run, which loads without masks."""
    offs = tl.arange(0, BLOCK_E)
    last = (hi + BLOCK_SIZE - 1) // BLOCK_SIZE  # one past the last logical block
    n_bad = tl.zeros([], tl.int32)
    for b0 in tl.range(lo // BLOCK_SIZE, last, BLOCK_E):
        blk = b0 + offs
        in_range = blk < last
        phys = tl.load(table + blk * stride_tc, mask=in_range, other=0)
        n_bad += tl.sum((in_range & ((phys < 0) | (phys >= num_blocks))).to(tl.int32), 0)
    return n_bad
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-prefill-kernel>>[init]
@triton.jit
def _paged_prefill_tile(
    q_ptr, k_head, v_head, table, o_ptr, lse_ptr, m0, q_start, n_q, n_k, off_h, qk_scale, window,
    num_blocks, stride_tc, stride_qt, stride_qh, stride_qd,
    stride_kblk, stride_kslot, stride_kd, stride_vblk, stride_vslot, stride_vd,
    stride_ot, stride_oh, stride_od, stride_lt, stride_lh,
    ks_head, vs_head, stride_ksblk, stride_ksslot, stride_vsblk, stride_vsslot,
    D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    DOT_PRECISION: tl.constexpr, FP8: tl.constexpr,
):
    """Rows [m0, m0 + BLOCK_M) of one sequence's chunk, one query head; returns how many keys
    it refused for a table entry outside the pool."""
    shift = n_k - n_q  # new token i stands at key position p_i = i + shift
    offs_m = m0 + tl.arange(0, BLOCK_M)
    p_i = offs_m + shift

    # The key range [lo, hi) this tile visits, the interior [full_lo, full_hi) where every pair is
    # visible, and [lo_seen, hi_seen): keys some row of the tile sees (the only ones loaded). The
    # same bounds as Lab 02's kernel: one helper, minimodel.kernels.key_range.
    lo_seen, lo, full_lo, full_hi, hi = key_range(m0, n_q, n_k, window, BLOCK_M, BLOCK_N, CAUSAL,
                                                  WINDOWED)
    hi_seen = hi
    # The interior loads without masks: its entries are checked first. If one lies outside the
    # pool, the whole range goes through the masked run, which refuses it key by key.
    interior_ok = _entries_in_pool(table, stride_tc, full_lo, full_hi, num_blocks, BLOCK_SIZE,
                                   64) == 0
    full_lo = tl.where(interior_ok, full_lo, hi)
    full_hi = tl.where(interior_ok, full_hi, hi)

    cols = tl.arange(0, HEAD_DIM)
    cols64 = cols.to(tl.int64)
    row_ok = offs_m < n_q
    q_mask = row_ok[:, None]
    if D != HEAD_DIM:
        q_mask = q_mask & (cols[None, :] < D)
    rows64 = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows64[:, None] * stride_qt + off_h * stride_qh
                + cols64[None, :] * stride_qd, mask=q_mask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    n_bad = tl.zeros([], tl.int32)

    acc, l_i, m_i, n_bad = _paged_prefill_inner(  # the window's edge: masked
        acc, l_i, m_i, n_bad, q, k_head, v_head, table, p_i, lo, full_lo, lo_seen, hi_seen,
        window, qk_scale, num_blocks, stride_tc, stride_kblk, stride_kslot, stride_kd,
        stride_vblk, stride_vslot, stride_vd, ks_head, vs_head, stride_ksblk, stride_ksslot,
        stride_vsblk, stride_vsslot,
        BLOCK_N, D, HEAD_DIM, BLOCK_SIZE, True, CAUSAL, WINDOWED, DOT_PRECISION, FP8)
    acc, l_i, m_i, n_bad = _paged_prefill_inner(  # the interior: no mask at all
        acc, l_i, m_i, n_bad, q, k_head, v_head, table, p_i, full_lo, full_hi, lo_seen, hi_seen,
        window, qk_scale, num_blocks, stride_tc, stride_kblk, stride_kslot, stride_kd,
        stride_vblk, stride_vslot, stride_vd, ks_head, vs_head, stride_ksblk, stride_ksslot,
        stride_vsblk, stride_vsslot,
        BLOCK_N, D, HEAD_DIM, BLOCK_SIZE, False, CAUSAL, WINDOWED, DOT_PRECISION, FP8)
    acc, l_i, m_i, n_bad = _paged_prefill_inner(  # the diagonal and the ragged end: masked
        acc, l_i, m_i, n_bad, q, k_head, v_head, table, p_i, full_hi, hi, lo_seen, hi_seen,
        window, qk_scale, num_blocks, stride_tc, stride_kblk, stride_kslot, stride_kd,
        stride_vblk, stride_vslot, stride_vd, ks_head, vs_head, stride_ksblk, stride_ksslot,
        stride_vsblk, stride_vsslot,
        BLOCK_N, D, HEAD_DIM, BLOCK_SIZE, True, CAUSAL, WINDOWED, DOT_PRECISION, FP8)

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    tl.store(o_ptr + rows64[:, None] * stride_ot + off_h * stride_oh + cols64[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=q_mask)
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    tl.store(lse_ptr + rows64 * stride_lt + off_h * stride_lh, lse, mask=row_ok)
    return n_bad


@triton.jit(do_not_specialize=["window", "n_heads", "group", "total_q", "num_blocks",
                               "capacity"])
def _paged_prefill_fwd(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, starts_ptr, o_ptr, lse_ptr, err_ptr,
    qk_scale, window, n_heads, group, total_q, num_blocks, capacity,
    stride_qt, stride_qh, stride_qd,
    stride_kblk, stride_kslot, stride_kh, stride_kd,
    stride_vblk, stride_vslot, stride_vh, stride_vd,
    stride_tb, stride_tc, stride_len, stride_start, stride_err,
    stride_ot, stride_oh, stride_od,
    stride_lt, stride_lh,
    ks_ptr, vs_ptr, stride_ksblk, stride_ksslot, stride_ksh, stride_vsblk, stride_vsslot,
    stride_vsh,
    D: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    HAS_ERR: tl.constexpr, DOT_PRECISION: tl.constexpr, FP8: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // n_heads
    b64 = off_b.to(tl.int64)
    off_h = (off_bh % n_heads).to(tl.int64)  # int64: every index that multiplies a stride
    off_hkv = off_h // group
    q_start = tl.load(starts_ptr + b64 * stride_start)
    q_end = tl.load(starts_ptr + (b64 + 1) * stride_start)
    # The fast path's guards. A chunk whose rows leave q (or run backwards, or leave a gap at
    # either end) is flagged and computes nothing: no row of o outside its own is written.
    n_seqs = tl.num_programs(1) // n_heads
    bad_rows = (q_start < 0) | (q_end < q_start) | (q_end > total_q)
    bad_rows |= ((off_b == 0) & (q_start != 0)) | ((off_b == n_seqs - 1) & (q_end != total_q))
    n_q = tl.where(bad_rows, 0, q_end - q_start)  # this sequence's new tokens
    # A length outside [0, max_blocks * block_size] is flagged and cut to its own table row.
    n_k = tl.load(lens_ptr + b64 * stride_len)  # keys in the cache, the new tokens' own included
    bad_len = (n_k < 0) | (n_k > capacity)
    n_k = tl.minimum(tl.maximum(n_k, 0), capacity)

    table = table_ptr + b64 * stride_tb
    k_head = k_ptr + off_hkv * stride_kh
    v_head = v_ptr + off_hkv * stride_vh
    ks_head = ks_ptr + off_hkv * stride_ksh  # 8-bit pools: this kv head's scales (else unused)
    vs_head = vs_ptr + off_hkv * stride_vsh
    n_bad = tl.zeros([], tl.int32)
    # The grid covers max_query_len rows; a longer chunk (max_query_len too small) has its
    # later tiles done by the same programs, one grid's height apart: slower, never wrong.
    for m0 in tl.range(start_m * BLOCK_M, n_q, tl.num_programs(0) * BLOCK_M):
        n_bad += _paged_prefill_tile(
            q_ptr, k_head, v_head, table, o_ptr, lse_ptr, m0, q_start, n_q, n_k, off_h,
            qk_scale, window, num_blocks, stride_tc, stride_qt, stride_qh, stride_qd,
            stride_kblk, stride_kslot, stride_kd, stride_vblk, stride_vslot, stride_vd,
            stride_ot, stride_oh, stride_od, stride_lt, stride_lh,
            ks_head, vs_head, stride_ksblk, stride_ksslot, stride_vsblk, stride_vsslot,
            D, HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_SIZE, CAUSAL, WINDOWED, DOT_PRECISION, FP8)
    if HAS_ERR:  # the caller's flags: bits OR-ed in, never cleared here, one atomic per bit
        # (as the decode kernel's)
        err = err_ptr + b64 * stride_err
        tl.atomic_or(err, _BAD_ENTRY, mask=n_bad > 0)
        tl.atomic_or(err, _BAD_LENGTH, mask=bad_len & (start_m == 0))
        tl.atomic_or(err, _BAD_QUERY_START, mask=bad_rows & (start_m == 0))
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-configs>>[init]
class DecodeConfig(NamedTuple):
    block_n: int
    num_warps: int
    num_stages: int


class PrefillConfig(NamedTuple):
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


DECODE_TILE_BYTES = 16 * 1024  # one K tile: BLOCK_N keys of HEAD_DIM elements
FP8_DECODE_TILE_BYTES = 4 * 1024  # an 8-bit pool's K tile, at one warp per 16 query rows


def decode_config(head_dim: int, elem_bytes: int, block_g: int = 16) -> DecodeConfig:
    """The decode kernel's tile for K tiles of head_dim (padded, a power of two) elements of
    elem_bytes (the pools'), and query tiles of block_g rows (group_rows).

    16-bit pools: BLOCK_N keys of 16 KiB per K tile (16 to 128 keys), 4 warps, 3 stages; a query
    tile of 32 or 64 rows gets one warp per 16 rows. 8-bit pools: 4 KiB K tiles, one warp per 16
    query rows, 2 stages. A warp then holds 16 query rows, tl.dot's least, and repeats no other
    warp's work of a key (data/warps-probe-h200.json, at d = 128: 8-bit 16-row tiles, 16-bit
    32-row tiles)."""
    if INTERPRET:
        return DecodeConfig(16, 4, 1)
    if elem_bytes == 1:
        block_n = max(16, min(128, FP8_DECODE_TILE_BYTES // head_dim))
        return DecodeConfig(block_n, block_g // 16, 2)
    block_n = max(16, min(128, DECODE_TILE_BYTES // (head_dim * elem_bytes)))
    return DecodeConfig(block_n, 4 if block_g == 16 else block_g // 16, 3)


def prefill_config(head_dim: int, elem_bytes: int) -> PrefillConfig:
    """The prefill kernel's tiles, by padded head dim and element size (from the H200 sweep at
    d = 128, fp16; float32 is there for checking, not for speed)."""
    if INTERPRET:
        return PrefillConfig(16, 16, 4, 1)
    if elem_bytes == 2 and head_dim <= 64:
        return PrefillConfig(128, 64, 4, 3)
    if elem_bytes == 2 and head_dim == 128:
        return PrefillConfig(64, 64, 4, 3)
    return PrefillConfig(64, 32, 8, 2)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-split-choice>>[init]
PROGRAMS_PER_SM = 4  # aim for this many decode programs per SM (latency hiding, even waves)
MIN_TILES_PER_SPLIT = 4  # a split shorter than this costs more to merge than it gains
MAX_SPLITS = 256
LONGEST_FIRST_BATCH = (64, 512)  # split calls of this many sequences start the longest first
# G_max, the most query heads of a group that one decode program holds. A group of g heads is cut
# into ceil(g / G_max) chunks of BLOCK_G = min(max(16, 2^ceil(log2 g)), G_max) rows, one program
# each, so that a tile and its G_max x d float32 accumulator stay within one program's registers.
# Cutting MQA groups of 32 and 64 smaller was slower at both shapes bench.mqa_decode times on
# the kernel that read one table entry per key (data/mqa-decode-perkey-h200.json): each chunk
# reads its kv head's tiles again. With one entry per block and four warps a program, 16-row
# chunks were faster at B = 64 through the table only (data/mqa-decode-4warps-h200.json); with a
# warp per 16 rows (decode_config), uncut is faster at both (data/mqa-decode-h200.json). A power
# of two, at least 16 (tl.dot's smallest tile); a module constant a benchmark may set for a call.
DECODE_MAX_GROUP_ROWS = 64


def group_rows(group: int) -> tuple[int, int]:
    """(BLOCK_G, chunks): the rows of a decode program's query tile for a group of `group`
    query heads per kv head (a power of two, 16 to DECODE_MAX_GROUP_ROWS), and the number of
    programs the group is cut into."""
    g_max = check_int("DECODE_MAX_GROUP_ROWS", DECODE_MAX_GROUP_ROWS, 16)
    if g_max & (g_max - 1):
        raise ValueError(f"DECODE_MAX_GROUP_ROWS must be a power of two >= 16, got {g_max}")
    block_g = min(max(16, next_power_of_2(group)), g_max)
    return block_g, cdiv(group, block_g)


def choose_num_splits(batch: int, n_kv_heads: int, context_len: int, block_n: int,
                      num_sms: int, chunks: int = 1) -> int:
    """Splits of the context per (sequence, kv head, chunk of its group) so that the grid fills
    the GPU.

    batch * n_kv_heads * chunks programs already fill `PROGRAMS_PER_SM` per SM: no split.
    Otherwise as many splits as bring the grid there, but none shorter than
    `MIN_TILES_PER_SPLIT` tiles.
    """
    programs = batch * n_kv_heads * chunks
    target = PROGRAMS_PER_SM * num_sms
    if programs >= target:
        return 1
    tiles = cdiv(max(context_len, 1), block_n)
    return max(1, min(cdiv(target, programs), tiles // MIN_TILES_PER_SPLIT, MAX_SPLITS))
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-validate>>[init]
def _check_tensor(name: str, t: object, rank: int, shape_doc: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} {shape_doc}, got shape {tuple(t.shape)}")
    return t


def _check_device_and_dtype(q: torch.Tensor, *others: torch.Tensor) -> None:
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported: use float16, bfloat16 or float32")
    if any(t.device != q.device for t in others):
        raise ValueError("q, the pools, block_tables and context_lens must be on one device, got "
                         + ", ".join(str(t.device) for t in (q, *others)))
    check_forward_only("paged attention", q, *others, why="q or a pool requires grad")
    if INTERPRET:
        if q.dtype == torch.bfloat16:
            raise ValueError("bfloat16 is refused under TRITON_INTERPRET=1: Triton's interpreter "
                             "computes it wrongly. Use float16 or float32 on the CPU")
        if q.device.type != "cpu":
            raise ValueError(f"under TRITON_INTERPRET=1 the kernels take CPU tensors, got device "
                             f"{q.device}")
    elif q.device.type != "cuda":
        raise ValueError(f"paged attention needs CUDA tensors, got device {q.device}. Without a "
                         "GPU, set TRITON_INTERPRET=1 before triton is imported")


def _check_head_dim(d: int) -> None:
    if not (16 <= d <= 256 and d % 8 == 0):
        raise ValueError(f"head_dim must be a multiple of 8 in [16, 256], got d={d}")


def _check_pools(q_heads: int, d: int, dtype: torch.dtype, k_pool: torch.Tensor,
                 v_pool: torch.Tensor) -> tuple[int, int]:
    """Pools (num_blocks, block_size, Hkv, d); return (Hkv, block_size)."""
    for name, t in (("k_pool", k_pool), ("v_pool", v_pool)):
        _check_tensor(name, t, 4, "(num_blocks, block_size, Hkv, d)")
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"k_pool and v_pool must have the same shape, got "
                         f"{tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    if FP8_DTYPE not in (k_pool.dtype, v_pool.dtype) and not (
            k_pool.dtype == v_pool.dtype == dtype):  # 8-bit pools: _check_kv_scales
        raise ValueError(f"q and the pools must share one dtype, got {dtype}, {k_pool.dtype}, "
                         f"{v_pool.dtype}")
    num_blocks, block_size, hkv, dk = k_pool.shape
    if hkv < 1:
        raise ValueError(f"the pools hold no kv head: Hkv=0 (pools {tuple(k_pool.shape)})")
    if dk != d:
        raise ValueError(f"head_dim mismatch: q has d={d}, the pools "
                         f"{tuple(k_pool.shape)} have d={dk}")
    if num_blocks < 1:
        raise ValueError(f"the pools hold no block: shape {tuple(k_pool.shape)}")
    if block_size not in (8, 16, 32, 64, 128):
        raise ValueError(f"block_size must be a power of two in [8, 128], got {block_size} "
                         f"(pools {tuple(k_pool.shape)})")
    if q_heads % hkv:
        raise ValueError(f"query heads Hq={q_heads} must be a multiple of kv heads Hkv={hkv} "
                         f"(pools {tuple(k_pool.shape)})")
    return hkv, block_size


def _check_table(block_tables: torch.Tensor, context_lens: torch.Tensor, batch: int) -> None:
    _check_tensor("block_tables", block_tables, 2, "(B, max_blocks)")
    _check_tensor("context_lens", context_lens, 1, "(B,)")
    for name, t in (("block_tables", block_tables), ("context_lens", context_lens)):
        if t.dtype != torch.int32:
            raise ValueError(f"{name} must be int32, got {t.dtype}")
    if block_tables.shape[0] != batch or context_lens.shape[0] != batch:
        raise ValueError(f"batch mismatch: B={batch}, block_tables {tuple(block_tables.shape)}, "
                         f"context_lens {tuple(context_lens.shape)}")
    if block_tables.shape[1] < 1:
        raise ValueError(f"block_tables has no column: shape {tuple(block_tables.shape)}")


def _check_error_flags(error_flags: torch.Tensor | None, batch: int, device: torch.device) -> None:
    if error_flags is None:
        return
    _check_tensor("error_flags", error_flags, 1, "(B,)")
    if error_flags.dtype != torch.int32 or error_flags.shape[0] != batch:
        raise ValueError(f"error_flags must be int32 of shape ({batch},) (one per sequence), got "
                         f"{error_flags.dtype} of shape {tuple(error_flags.shape)}")
    if error_flags.device != device:
        raise ValueError(f"error_flags must be on {device}, got {error_flags.device}")


def _check_data(block_tables: torch.Tensor, context_lens: torch.Tensor, num_blocks: int,
                block_size: int, window: int | None,
                query_start_loc: torch.Tensor | None = None, total_q: int = 0) -> int:
    """The checked path's data checks, with one device sync: the lengths fit the table rows, the
    query offsets (prefill) rise from 0 to total_q, and every table entry a sequence reads (from
    its window's first block to its last) names a block of the pool. Returns the longest context
    (decode) or the longest chunk (prefill)."""
    capacity = block_tables.shape[1] * block_size
    lens = context_lens.long()
    table = block_tables.long()
    if query_start_loc is None:  # decode: one new token per sequence
        n_new = torch.ones_like(lens)
        starts = torch.zeros(2, dtype=torch.long, device=lens.device)
        starts[1] = total_q
    else:
        starts = query_start_loc.long()
        n_new = starts[1:] - starts[:-1]
    # The keys the rows of sequence b see: [first, ctx), first = ctx - n_b - W + 1 with a window
    # (the first new token's window), 0 without; nothing when it has no new token.
    first = (lens - n_new - window + 1).clamp(min=0) if window is not None else 0 * lens
    cols = torch.arange(block_tables.shape[1], device=lens.device)
    reads = ((n_new > 0) & (lens > 0))[:, None] & (cols >= (first // block_size)[:, None]) & (
        cols < ((lens + block_size - 1) // block_size)[:, None])
    bad = (reads & ((table < 0) | (table >= num_blocks))).flatten()
    at = bad.int().argmax()  # the first bad entry, row-major
    facts = torch.stack((
        starts[0], starts[-1], n_new.min(), n_new.max(), lens.min(), lens.max(),
        bad.any().long(), at, table.flatten()[at], lens[at // block_tables.shape[1]],
    )).tolist()  # the one sync
    first_q, last_q, shortest, longest, ctx_lo, ctx_hi, any_bad, at, entry, ctx = facts
    if query_start_loc is not None and (first_q != 0 or last_q != total_q or shortest < 0):
        raise ValueError(f"query_start_loc must rise from 0 to total_q={total_q}, got first "
                         f"{first_q}, last {last_q}, smallest step {shortest}")
    if ctx_lo < 0 or ctx_hi > capacity:
        raise ValueError(f"context_lens must lie in [0, {capacity}] (max_blocks x "
                         f"block_size), got min {ctx_lo}, max {ctx_hi}")
    if any_bad:
        seq, col = divmod(at, block_tables.shape[1])
        raise ValueError(f"block_tables[{seq}, {col}] = {entry} is not a block of the pool "
                         f"[0, {num_blocks}), and sequence {seq} (context_lens[{seq}] = {ctx}) "
                         f"reads it")
    return ctx_hi if query_start_loc is None else longest
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-quantize>>[init]
FP8_DTYPE = torch.float8_e4m3fn  # e4m3: 4 exponent bits, 3 mantissa bits, no infinities
FP8_MAX = 448.0  # e4m3's largest finite value, 1.75 x 2^8


def quantize_kv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys or values x: (..., d), one row per token and kv head, in 8 bits with a scale per row.

    Returns (x8, scale): x8 (..., d) float8_e4m3fn and scale (...) float32 with x ~ x8 * scale,
    the row's largest |x| mapped to FP8_MAX (scale = amax / 448, at least float32's smallest
    normal number, so that a row of zeros gets a positive scale). Each row on its own, once: a
    cache that appends tokens never quantises a stored one again. Rounding to nearest:
    |x - x8 * scale| <= 2^-4 |x| + 2^-10 scale. A row holding NaN or inf gets a NaN or inf
    scale, which the kernels' checked path refuses. x: float16, bfloat16, float32 or float64.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.element_size() < 2:  # no 8-bit input: quantised already
        raise ValueError(f"x must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must be (..., d) with d >= 1, got shape {tuple(x.shape)}")
    xf = x.float()
    scale = (xf.abs().amax(-1) / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
    # |x / scale| <= 448 up to float32 rounding: the clamp keeps a rounding just past it at 448
    x8 = (xf / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return x8, scale


def dequantize_kv(x8: torch.Tensor, scale: torch.Tensor,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The values an 8-bit row stands for: x8 (..., d) float8_e4m3fn times scale (...) float32,
    in `dtype` (the product is exact in float64, then rounded once)."""
    if not isinstance(x8, torch.Tensor) or x8.dtype != FP8_DTYPE:
        raise ValueError(f"x8 must be a {FP8_DTYPE} tensor, got "
                         f"{getattr(x8, 'dtype', type(x8).__name__)}")
    if (not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32
            or scale.shape != x8.shape[:-1]):
        raise ValueError(f"scale must be float32 of shape {tuple(x8.shape[:-1])} (one per row of "
                         f"x8), got {getattr(scale, 'dtype', type(scale).__name__)} of shape "
                         f"{tuple(getattr(scale, 'shape', ()))}")
    return (x8.double() * scale.double()[..., None]).to(dtype)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-checks>>[init]
def _check_kv_scales(k_pool: torch.Tensor, v_pool: torch.Tensor, k_scale: torch.Tensor | None,
                     v_scale: torch.Tensor | None,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """None for 16-bit pools (which take no scales); (k_scale, v_scale) for 8-bit pools, each
    (num_blocks, block_size, Hkv) float32 on the pools' device. Run after _check_pools."""
    is_fp8 = (k_pool.dtype == FP8_DTYPE, v_pool.dtype == FP8_DTYPE)
    if not any(is_fp8):
        if k_scale is not None or v_scale is not None:
            raise ValueError(f"k_scale and v_scale go with {FP8_DTYPE} pools only, and these "
                             f"pools are {k_pool.dtype}: pass no scales")
        return None
    if not all(is_fp8):
        raise ValueError(f"k_pool and v_pool must both be {FP8_DTYPE} or neither, got k_pool "
                         f"{k_pool.dtype} and v_pool {v_pool.dtype}")
    shape = tuple(k_pool.shape[:3])
    missing = [name for name, s in (("k_scale", k_scale), ("v_scale", v_scale)) if s is None]
    if missing:
        raise ValueError(f"{FP8_DTYPE} pools need k_scale and v_scale, float32 of shape {shape} "
                         f"(one per slot and kv head); missing: {', '.join(missing)}")
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        _check_tensor(name, s, 3, "(num_blocks, block_size, Hkv)")
        if tuple(s.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} (one scale per slot and kv head of "
                             f"the pools {tuple(k_pool.shape)}), got {tuple(s.shape)}")
        if s.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {s.dtype}")
        if s.device != device:
            raise ValueError(f"{name} must be on {device} with q and the pools, got {s.device}")
    check_forward_only("paged attention", k_scale, v_scale, why="a scale requires grad")
    if not INTERPRET and capability(device) < (8, 9):
        raise ValueError(f"{FP8_DTYPE} pools need a GPU of compute capability 8.9 or later "
                         f"(Triton's float8e4nv), got {capability(device)} on {device}")
    return k_scale, v_scale


def _check_scale_data(block_tables: torch.Tensor, context_lens: torch.Tensor,
                      scales: tuple[torch.Tensor, torch.Tensor], block_size: int,
                      window: int | None, query_start_loc: torch.Tensor | None = None) -> None:
    """The checked path with 8-bit pools, once _check_data has found the lengths and the table
    entries good: every scale a sequence reads (its keys [first, ctx) as _check_data counts
    them, every kv head) is finite and positive. One more sync; raises ValueError naming the
    first bad scale (K's before V's)."""
    lens = context_lens.long()
    if query_start_loc is None:
        n_new = torch.ones_like(lens)
    else:
        n_new = (query_start_loc[1:] - query_start_loc[:-1]).long()
    first = (lens - n_new - window + 1).clamp(min=0) if window is not None else 0 * lens
    b, capacity = lens.shape[0], block_tables.shape[1] * block_size
    pos = torch.arange(capacity, device=lens.device)
    reads = (n_new > 0)[:, None] & (pos >= first[:, None]) & (pos < lens[:, None])
    blocks = torch.where(reads, block_tables.long()[:, pos // block_size], 0)  # -1: not read
    values = torch.stack([s[blocks, pos % block_size] for s in scales])  # (2, B, capacity, Hkv)
    bad = reads[None, :, :, None] & ~((values > 0) & values.isfinite())
    hkv = values.shape[-1]
    at = bad.flatten().int().argmax()
    facts = torch.stack((bad.any().double(), at.double(), values.flatten()[at].double(),
                         blocks.flatten()[at // hkv % (b * capacity)].double())).tolist()
    any_bad, at, value, block = facts
    if any_bad:
        which, rest = divmod(int(at), b * capacity * hkv)
        seq, rest = divmod(rest, capacity * hkv)
        key, head = divmod(rest, hkv)
        raise ValueError(f"{('k_scale', 'v_scale')[which]}[{int(block)}, {key % block_size}, "
                         f"{head}] = {value} is not a finite positive scale, and sequence {seq} "
                         f"reads it (key {key}, block_tables[{seq}, {key // block_size}])")


def _scale_args(scales: tuple[torch.Tensor, torch.Tensor] | None,
                stand_in: torch.Tensor) -> tuple:
    """The kernels' scale arguments: k_scale, v_scale and their (block, slot, head) strides; for
    16-bit pools a stand-in pointer (None where the kernel never touches it: a free launch
    argument) and zero strides (FP8=False never reads them)."""
    if scales is None:
        return (stand_in, stand_in, 0, 0, 0, 0, 0, 0)
    k_scale, v_scale = scales
    return (k_scale, v_scale, *k_scale.stride(), *v_scale.stride())
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-wrapper>>[init]
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
    _check_tensor("q", q, 3, "(B, Hq, d)")
    b, hq, d = q.shape
    _check_device_and_dtype(q, k_pool, v_pool, block_tables, context_lens)
    _check_head_dim(d)
    hkv, block_size = _check_pools(hq, d, q.dtype, k_pool, v_pool)
    scales = _check_kv_scales(k_pool, v_pool, k_scale, v_scale, q.device)  # None: 16-bit pools
    _check_table(block_tables, context_lens, b)
    _check_error_flags(error_flags, b, q.device)
    check_mask_args(True, window)
    tau = resolve_scale(scale, d)
    capacity = block_tables.shape[1] * block_size
    if num_splits is not None:
        check_int("num_splits", num_splits, 1, MAX_SPLITS)
    if max_context_len is not None:
        check_int("max_context_len", max_context_len, 0, capacity)
    if b == 0 or hq == 0:  # nothing to compute (and no data to check)
        o = torch.empty_like(q)
        lse = torch.empty((b, hq), dtype=torch.float32, device=q.device)
        return (o, lse) if return_lse else o
    if max_context_len is None:  # the checked path: one sync (two with 8-bit pools)
        max_context_len = _check_data(block_tables, context_lens, k_pool.shape[0], block_size,
                                      window, total_q=b)
        if scales is not None:
            _check_scale_data(block_tables, context_lens, scales, block_size, window)
    o, lse = _launch_decode(q, k_pool, v_pool, block_tables, context_lens, n_k=0,
                            strides_k=k_pool.stride(), strides_v=v_pool.stride(),
                            block_size=block_size, n_kv_heads=hkv,
                            max_context_len=max_context_len, num_splits=num_splits,
                            window=window, tau=tau, error_flags=error_flags, scales=scales,
                            with_lse=return_lse)
    return (o, lse) if return_lse else o
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-contiguous>>[init]
def decode_contiguous(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    window: int | None,
    tau: float,
    num_splits: int | None = None,
    fold_merge: bool | None = None,
    with_lse: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The decode kernel on a contiguous cache k, v: (B, Hkv, N, d), read in place: sequence b is
    'block' b of N slots (a strided table, no table in memory). q: (B, Hq, d) or (B, Hq, 1, d);
    inputs checked by the caller (minimodel.attention). Returns (O, lse) shaped as q and as q
    less its last dim: (B, Hq, d) and (B, Hq), or (B, Hq, 1, d) and (B, Hq, 1); with_lse=False
    returns (O, None) and computes no lse. fold_merge as for _launch_decode (None: FOLD_MERGE)."""
    if not (q.dim() == 3 or (q.dim() == 4 and q.shape[2] == 1)):  # one query row per head
        raise ValueError(f"q must be (B, Hq, d) or (B, Hq, 1, d), got shape {tuple(q.shape)}")
    _check_device_and_dtype(q, k, v)
    _check_head_dim(q.shape[-1])
    if num_splits is not None:
        check_int("num_splits", num_splits, 1, MAX_SPLITS)
    n_k = k.shape[2]
    # pool strides (block, slot, head, d) of the contiguous layout (B, Hkv, N, d)
    sk = (k.stride(0), k.stride(2), k.stride(1), k.stride(3))
    sv = (v.stride(0), v.stride(2), v.stride(1), v.stride(3))
    return _launch_decode(q, k, v, None, None, n_k=n_k, strides_k=sk, strides_v=sv,
                          block_size=16, n_kv_heads=k.shape[1], max_context_len=n_k,
                          num_splits=num_splits, window=window, tau=tau,
                          fold_merge=fold_merge, with_lse=with_lse)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-decode-launch>>[init]
# The split decode's merge: folded into the decode kernel (its last program per (sequence, kv
# head, chunk) merges, one launch per call) or a second kernel, _merge_splits (two launches).
# Both run the same _merge_row. Measured (data/fold-merge-h200.json, B = 1, GQA 32/8): the fold
# saves the host a launch but costs GPU time. None folds where the host's time is what an eager
# call waits for: not in a CUDA graph capture (its replays cost no host time per launch), and
# not when the call reads more than FOLD_MAX_KV_BYTES of K/V, about 60 µs at the H200's copy
# rate, as long as the host path of a decode call: past it the GPU time shows and the fold's
# share of it is lost. True or False forces one path (benchmarks, tests).
FOLD_MERGE: bool | None = None
FOLD_MAX_KV_BYTES = 256 * 2**20
MERGE_BLOCK_S = 16  # splits per step of the merge's loops
# 8-bit pools go to the Hopper kernel (paged_attention_hopper) where it fits; False keeps them on
# the Triton kernel (benchmarks, tests)
HOPPER_FP8 = True
# 16-bit pools of groups of more than 16 query heads go to the Hopper 16-bit kernel where it fits
# (paged_attention_hopper.fits16, "Large groups on Hopper"); False keeps them on the Triton
# kernel (benchmarks, tests)
HOPPER_16 = True


def _launch_decode(q, k, v, block_tables, context_lens, *, n_k, strides_k, strides_v,
                   block_size, n_kv_heads, max_context_len, num_splits, window, tau, out=None,
                   workspace=None, error_flags=None, scales=None, fold_merge=None, with_lse=True):
    """Launch the decode kernel (and the merge when the context is split): through the block
    table and context lengths when they are given, else on a contiguous cache of n_k keys per
    sequence (block_tables = context_lens = None). q is (B, Hq, d), or (B, Hq, 1, d) as
    `attention` holds it. `out` = (O, lse), shaped like q and q less its last dim, and
    `workspace` = (O_u (B, Hq, splits, d) float32, lse_u (B, Hq, splits), counts
    (B * Hkv * chunks,) int32 zeros, or None unfolded) may be given preallocated; they are
    allocated here otherwise (the workspace reused, see _workspace). `scales` = (k_scale,
    v_scale) with 8-bit pools (paged only).
    `fold_merge` (default FOLD_MERGE): merge the splits in the decode kernel's last program
    per (sequence, kv head, chunk), one launch, or in _merge_splits, a second launch; None:
    fold unless a CUDA graph is being captured or the call reads more than FOLD_MAX_KV_BYTES.
    with_lse=False: the caller wants O only; no lse is allocated or stored, (O, None) returned."""
    capturing = q.is_cuda and torch.cuda.is_current_stream_capturing()
    key = None if out is not None or workspace is not None else signature(
        (q, k, v, block_tables, context_lens, error_flags, *(scales or (None, None))), n_k,
        strides_k, strides_v, block_size, n_kv_heads, max_context_len, num_splits, window, tau,
        fold_merge, with_lse, capturing, *_settings())
    plan = planned(_DECODE_PLANS, key)
    if plan is None:  # the whole path: the split, then the launches' arguments
        split = _split_decode(q, k, v, block_tables, n_k, block_size, n_kv_heads,
                              max_context_len, num_splits, window, fold_merge, capturing, scales)
        num_splits, fold, space = split[:3]
    else:
        num_splits, fold, space, run, merge = plan
    if out is None:
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse_out = (torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device) if with_lse
                   else None)
    else:
        o, lse_out = out
    # Where no lse is wanted, o stands in for its pointer (never stored through: LSE=False),
    # which costs the launch less than an allocation
    lse_ptr = lse_out if with_lse else o
    if num_splits == 1:  # each program writes its heads' results itself
        o_dst, lse_dst, counts = o, lse_ptr, None
    else:  # partial (O_u, lse_u) per split, merged below (or by the last split, folded)
        o_dst, lse_dst, counts = workspace or _workspace(q.device, *space)
    if plan is not None:  # the plan's launches, given this call's tensors
        # (in the order they stand in the launches' arguments; None ones are not arguments)
        tensors = (q, k, v, block_tables, context_lens, o_dst, lse_dst, error_flags,
                   *(scales or ()), *((o, lse_ptr, counts) if fold else ()))
        run(*(t for t in tensors if t is not None))
        if merge is not None:
            merge(o_dst, lse_dst, o, lse_ptr)
        return o, lse_out
    launches = _decode_launches(q, k, v, block_tables, context_lens, n_k, strides_k, strides_v,
                                block_size, n_kv_heads, tau, error_flags, scales, with_lse,
                                split, o, lse_ptr, o_dst, lse_dst, counts)
    for kernel, grid, args, meta in launches:
        launch(kernel, grid, *args, **meta)

    def plan() -> tuple:  # made at the signature's second call: the launches, prepared
        run, *merge = (Prepared(*one) for one in launches)
        return num_splits, fold, space, run, merge[0] if merge else None
    keep(_DECODE_PLANS, key, plan)
    return o, lse_out


# A decode call's plan, kept per signature (kernels.signature, with the call's scalars, whether
# a CUDA graph is being captured and the module's settings): its split and its launches,
# prepared (kernels.Prepared). A signature's first call leaves a mark only, its second makes the
# plan: a decode loop on a growing contiguous cache (a new signature at every step) pays for no
# plan, and a serving loop's steps share one (KernelPagedKVCache passes the table's capacity as
# max_context_len, the same at every step).
_DECODE_PLANS: dict[tuple, object] = {}


def _settings() -> tuple:
    """The module's settings a decode plan depends on (benchmarks and tests change them): part
    of its key, so that a change takes effect at the next call."""
    return (decode_config, DECODE_TILE_BYTES, FP8_DECODE_TILE_BYTES, DECODE_MAX_GROUP_ROWS,
            FOLD_MERGE, FOLD_MAX_KV_BYTES, PROGRAMS_PER_SM, MIN_TILES_PER_SPLIT, MAX_SPLITS,
            MERGE_BLOCK_S, LONGEST_FIRST_BATCH, num_sms, INTERPRET, HOPPER_FP8, HOPPER_16,
            paged_attention_hopper.fits, paged_attention_hopper.hopper_splits,
            paged_attention_hopper.fits16, paged_attention_hopper.splits16,
            paged_attention_hopper.MIN_PROGRAMS16)


def _split_decode(q, k, v, block_tables, n_k, block_size, n_kv_heads, max_context_len,
                  num_splits, window, fold_merge, capturing, scales) -> tuple:
    """How a decode call is cut: (splits, fold, the workspace's sizes for _workspace, the tile
    config, the window as the kernel takes it, BLOCK_G, chunks, keys per split, the kernel:
    "triton", or "hopper8" or "hopper16" (paged_attention_hopper; the tile config None then))."""
    paged = block_tables is not None
    b, hq, d = q.shape[0], q.shape[1], q.shape[-1]
    elem = k.element_size()
    ph = paged_attention_hopper
    kernel = "triton"
    if HOPPER_FP8 and scales is not None and ph.fits(q, k, v, *scales):
        kernel = "hopper8"
    elif (HOPPER_16 and paged and scales is None and ph.fits16(q, k, v)
          and (num_splits or 1) <= ph.MAX_SPLITS16):
        kernel = "hopper16"
    if kernel == "hopper8":  # one chunk of 16 rows, 64-key iterations
        cfg, chunks = None, 1
        block_g, step = ph.BLOCK_G, ph.ITERATION
    elif kernel == "hopper16":  # chunks of 32 rows, 32-key iterations
        cfg, chunks = None, ph.chunks16(hq // n_kv_heads)
        block_g, step = ph.BLOCK_G16, ph.ITERATION16
    else:
        block_g, chunks = group_rows(hq // n_kv_heads)
        cfg = decode_config(max(16, next_power_of_2(d)), elem, block_g)  # the pools' bytes
        step = cfg.block_n
    if window is not None:  # a window past the longest possible context changes nothing
        window = min(window, block_tables.shape[1] * block_size if paged else max(n_k, 1))
    keys = max_context_len if window is None else min(max_context_len, window + step - 1)
    fold = FOLD_MERGE if fold_merge is None else fold_merge
    if fold is None:  # K and V's bytes bound the call's GPU time: fold while it is short
        fold = 2 * b * n_kv_heads * keys * d * elem <= FOLD_MAX_KV_BYTES and not capturing
    if num_splits is None and kernel == "hopper8":
        num_splits = ph.hopper_splits(b, n_kv_heads, keys, num_sms(q.device))
    elif num_splits is None and kernel == "hopper16":
        num_splits = ph.splits16(b, n_kv_heads, hq // n_kv_heads, keys, num_sms(q.device))
    elif num_splits is None:
        num_splits = choose_num_splits(b, n_kv_heads, keys, step, num_sms(q.device), chunks)
    split_len = cdiv(cdiv(max(keys, 1), num_splits), step) * step
    # one split writes (O, lse) itself: nothing to merge; the 8-bit Hopper kernel never folds,
    # the 16-bit one always does (its last split merges)
    fold = num_splits > 1 and (kernel == "hopper16" or fold and kernel == "triton")
    space = (b, hq, num_splits, d, b * n_kv_heads * chunks, fold)
    return num_splits, fold, space, cfg, window, block_g, chunks, split_len, kernel


def _decode_launches(q, k, v, block_tables, context_lens, n_k, strides_k, strides_v, block_size,
                     n_kv_heads, tau, error_flags, scales, with_lse, split, o, lse_ptr, o_dst,
                     lse_dst, counts) -> list[tuple]:
    """The decode kernel's launch and, split and not folded, the merge's: (kernel, grid, args,
    meta) each, for `launch` or kernels.Prepared."""
    num_splits, fold, _, cfg, window, block_g, chunks, split_len, kernel = split
    paged = block_tables is not None
    b, hq, d = q.shape[0], q.shape[1], q.shape[-1]
    head_dim = max(16, next_power_of_2(d))
    so_out = o.stride()
    sl_out = lse_ptr.stride()[:2] if with_lse else (0, 0)
    if num_splits == 1:
        so = (so_out[0], so_out[1], 0, so_out[-1])
        sl = (*sl_out, 0)
    else:
        so, sl = o_dst.stride(), lse_dst.stride()
    if fold:  # the final (O, lse) and the counters, for the last program of each group
        fold_args = (o, lse_ptr, counts, so_out[0], so_out[1], so_out[-1], *sl_out)
    else:  # never read (FOLD=False): free pointer arguments
        fold_args = (None, None, None, 0, 0, 0, 0, 0)
    if paged:  # index tensors through their strides; a length is int32, so is the row's capacity
        tables = (*block_tables.stride(), context_lens.stride(0))
        num_blocks = k.shape[0]
        capacity = min(block_tables.shape[1] * block_size, 2**31 - 1)
    else:  # PAGED=False never reads the table or the lengths: None for both pointers
        tables, num_blocks, capacity = (0, 0, 0), 0, 0
    sq = q.stride()
    group = hq // n_kv_heads
    # a split call of 64 to 512 sequences through a table starts its programs longest sequence
    # first, sorting a power of two of entries (few batch sizes compile a kernel of their own)
    longest_first = (next_power_of_2(b) if paged and num_splits > 1
                     and LONGEST_FIRST_BATCH[0] <= b <= LONGEST_FIRST_BATCH[1] else 0)
    if kernel == "hopper8":  # 8-bit pools on a Hopper GPU, as paged_attention_hopper.fits admits
        launches = [paged_attention_hopper.launch_args(
            q, k, v, block_tables, context_lens, o_dst, lse_dst, error_flags, *scales,
            qk_scale=tau * LOG2E, window=window, split_len=split_len, num_splits=num_splits,
            capacity=capacity, strides_o=so, strides_lse=sl,
            store_lse=with_lse or num_splits > 1, flags=(ERR_BAD_ENTRY, ERR_BAD_LENGTH))]
    elif kernel == "hopper16":  # large groups in 16 bits, as paged_attention_hopper.fits16 admits
        launches = [paged_attention_hopper.launch_args16(
            q, k, v, block_tables, context_lens, o_dst, lse_dst, error_flags,
            *((o, lse_ptr, counts) if fold else (None, None, None)),
            qk_scale=tau * LOG2E, window=window, split_len=split_len, num_splits=num_splits,
            capacity=capacity, strides_o=so, strides_lse=sl,
            store_lse=with_lse or num_splits > 1, with_lse=with_lse,
            flags=(ERR_BAD_ENTRY, ERR_BAD_LENGTH))]
    else:
        # A pointer passed as None costs the launch nothing (Triton makes it a constexpr); a
        # tensor costs a driver call to check it (cuPointerGetAttribute): unused pointers are None.
        launches = [(
            _paged_decode_fwd, (b * n_kv_heads * chunks, num_splits),
            (q, k, v, block_tables, context_lens, o_dst, lse_dst, error_flags,
             tau * LOG2E, n_k, window or 0, split_len, n_kv_heads, group, num_blocks, capacity,
             sq[0], sq[1], sq[-1], *strides_k, *strides_v, *tables,
             error_flags.stride(0) if error_flags is not None else 0,
             *so, *sl, *_scale_args(scales, None),  # the decode kernel reads them under FP8 only
             *fold_args),
            dict(D=d, HEAD_DIM=head_dim, BLOCK_G=block_g, BLOCK_N=cfg.block_n,
                 BLOCK_SIZE=block_size, PAGED=paged, WINDOWED=window is not None,
                 HAS_ERR=error_flags is not None,
                 DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                 FP8=scales is not None, FOLD=fold, BLOCK_S=MERGE_BLOCK_S,
                 STORE_LSE=with_lse or num_splits > 1, LSE=with_lse,
                 LONGEST_FIRST=longest_first, num_warps=cfg.num_warps, num_stages=cfg.num_stages))]
    if num_splits > 1 and not fold:
        launches.append((
            _merge_splits, (b * hq,),
            (o_dst, lse_dst, o, lse_ptr, num_splits, hq, *o_dst.stride(), *lse_dst.stride(),
             so_out[0], so_out[1], so_out[-1], *sl_out),
            dict(D=d, HEAD_DIM=head_dim, BLOCK_S=MERGE_BLOCK_S, LSE=with_lse, num_warps=4)))
    return launches


# The split workspace of the last eager call, per (device, stream, thread): reused while the
# shape repeats, so a decode step allocates only its outputs. Calls that share an entry are
# issued by one thread on one stream, so the GPU runs them in order and one call's merge has read
# the partials before the next call's splits write them, and one call's counters are back at 0
# (its last programs reset them) before the next call's splits count. Under CUDA-graph capture
# every call takes its own (the graph's memory pool keeps it for replay); a folded call's
# counters are zeroed by a fill that the capture records, so each replay zeroes them again (one
# more node in the graph: cheap, not free), and the kernel's reset leaves them at 0 either way.
_WORKSPACES: dict[tuple, tuple[tuple[int, ...], tuple[torch.Tensor | None, ...]]] = {}


def _workspace(device: torch.device, b: int, hq: int, splits: int, d: int, programs: int,
               counts: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(O_u (B, Hq, splits, d), lse_u (B, Hq, splits)) float32 for one split decode call, and
    with `counts` (the folded merge's) `programs` = B * Hkv * chunks int32 counters at zero:
    how many splits of each (sequence, kv head, chunk) are done. Without `counts`, None in
    their place unless an earlier call left them (the two-launch merge allocates none: no
    fill, eager or captured)."""
    shape = (b, hq, splits, d, programs)
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if not capturing:
        if device.type == "cuda":  # "cuda" alone names the current device
            index = device.index if device.index is not None else torch.cuda.current_device()
            key = ("cuda", index, torch._C._cuda_getCurrentRawStream(index), threading.get_ident())
        else:
            key = (device.type, device.index, 0, threading.get_ident())
        cached = _WORKSPACES.get(key)
        if cached is not None and cached[0] == shape:
            if cached[1][2] is not None or not counts:
                return cached[1]
            space = (*cached[1][:2], torch.zeros(programs, dtype=torch.int32, device=device))
            _WORKSPACES[key] = (shape, space)
            return space
    space = (torch.empty(shape[:4], dtype=torch.float32, device=device),
             torch.empty(shape[:3], dtype=torch.float32, device=device),
             torch.zeros(programs, dtype=torch.int32, device=device) if counts else None)
    if not capturing:
        _WORKSPACES[key] = (shape, space)
    return space
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-prefill-wrapper>>[init]
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
    _check_tensor("q", q, 3, "(total_q, Hq, d)")
    total_q, hq, d = q.shape
    _check_device_and_dtype(q, k_pool, v_pool, block_tables, context_lens, query_start_loc)
    _check_head_dim(d)
    hkv, block_size = _check_pools(hq, d, q.dtype, k_pool, v_pool)
    scales = _check_kv_scales(k_pool, v_pool, k_scale, v_scale, q.device)  # None: 16-bit pools
    _check_tensor("query_start_loc", query_start_loc, 1, "(B + 1,)")
    if query_start_loc.dtype != torch.int32:
        raise ValueError(f"query_start_loc must be int32, got {query_start_loc.dtype}")
    b = query_start_loc.shape[0] - 1
    if b < 1:
        raise ValueError(f"query_start_loc must hold B + 1 >= 2 offsets, got shape "
                         f"{tuple(query_start_loc.shape)}")
    _check_table(block_tables, context_lens, b)
    _check_error_flags(error_flags, b, q.device)
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)
    if max_query_len is not None:
        check_int("max_query_len", max_query_len, 0, total_q)
    if hq == 0:
        o, lse = torch.empty_like(q), torch.empty((total_q, 0), device=q.device)
        return (o, lse) if return_lse else o
    if b * hq > MAX_GRID_Y:
        raise ValueError(f"paged_prefill runs one program row per (sequence, query head): B * Hq "
                         f"= {b} * {hq} must be at most {MAX_GRID_Y}")
    if max_query_len is None:  # the checked path: one sync (two with 8-bit pools)
        max_query_len = _check_data(block_tables, context_lens, k_pool.shape[0], block_size,
                                    window, query_start_loc, total_q)
        if scales is not None:
            _check_scale_data(block_tables, context_lens, scales, block_size, window,
                              query_start_loc)
    o, lse = _prefill(q, k_pool, v_pool, block_tables, context_lens, query_start_loc,
                      block_size=block_size, n_kv_heads=hkv, max_query_len=max_query_len,
                      causal=causal, window=window, tau=tau, error_flags=error_flags,
                      scales=scales)
    return (o, lse) if return_lse else o
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-prefill-launch>>[init]
def _prefill(q, k_pool, v_pool, block_tables, context_lens, query_start_loc, *, block_size,
             n_kv_heads, max_query_len, causal, window, tau, error_flags=None, out=None,
             scales=None):
    """Launch the prefill kernel; `out` = (O, lse) may be given preallocated, as for _decode;
    `scales` = (k_scale, v_scale) with 8-bit pools."""
    if window is not None:  # a window past the longest possible context changes nothing
        window = min(window, block_tables.shape[1] * block_size)
    total_q, hq, d = q.shape
    b = query_start_loc.shape[0] - 1
    head_dim = max(16, next_power_of_2(d))
    o, lse = out if out is not None else (
        torch.empty_like(q), torch.empty((total_q, hq), dtype=torch.float32, device=q.device))
    cfg = prefill_config(head_dim, q.element_size())
    # At least one program per (sequence, head): each also checks its offsets and length, and
    # walks every tile of its chunk however few rows max_query_len promised.
    grid = (min(max(1, cdiv(max_query_len, cfg.block_m)), MAX_GRID_X), b * hq)
    launch(
        _paged_prefill_fwd, grid,
        q, k_pool, v_pool, block_tables, context_lens, query_start_loc, o, lse,
        error_flags,  # None without HAS_ERR: never written then
        tau * LOG2E, window or 0, hq, hq // n_kv_heads, total_q, k_pool.shape[0],
        min(block_tables.shape[1] * block_size, 2**31 - 1),
        *q.stride(), *k_pool.stride(), *v_pool.stride(), *block_tables.stride(),
        context_lens.stride(0), query_start_loc.stride(0),
        error_flags.stride(0) if error_flags is not None else 0,
        *o.stride(), *lse.stride(), *_scale_args(scales, q),
        D=d, HEAD_DIM=head_dim, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, BLOCK_SIZE=block_size, CAUSAL=causal,
        WINDOWED=window is not None, HAS_ERR=error_flags is not None,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", FP8=scales is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return o, lse
# ~/~ end
# ~/~ end

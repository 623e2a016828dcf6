"""Draft of the 16-bit Hopper decode for large groups (issue 23); moves to the page when it works."""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from minimodel.kernels import INTERPRET, LN2, TmaArg, capability
from minimodel.paged_attention_hopper import _entry

LOG2E = 1.4426950408889634
BLOCK_SIZE = 16
ITERATION16 = 2 * BLOCK_SIZE  # keys an iteration: two blocks, one tile of 32 keys
BLOCK_G16 = 32  # query rows a program: two warps of 16
STAGES16 = 2
HEAD_DIMS = (64, 128)


@gluon.jit
def _entries16(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS: gl.constexpr):
    """Iteration it's two columns (none read past the split's iterations)."""
    c = (start + it * 2 * BS) // BS
    e_end = gl.where(it < n_it, end, 0)  # past the last iteration: nothing read
    b0, ok0, bad0 = _entry(row, c, lo, e_end, stride_tc, num_blocks, BS)
    b1, ok1, bad1 = _entry(row, c + 1, lo, e_end, stride_tc, num_blocks, BS)
    return b0, b1, ok0, ok1, bad0.to(gl.int32) + bad1.to(gl.int32)


@gluon.jit
def _issue16(k_desc, v_desc, k_smem, v_smem, bar, slot, e0, e1, h, pred, D: gl.constexpr,
             BS: gl.constexpr):
    """One iteration's copies (K and V of two blocks) into ring slot `slot`, a tile of 2 BS
    keys each."""
    mbarrier.expect(bar, 4 * k_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(k_desc, [e0 * BS, h * D], bar,
                                    k_smem.index(slot).slice(0, BS), pred)
    tma.async_copy_global_to_shared(k_desc, [e1 * BS, h * D], bar,
                                    k_smem.index(slot).slice(BS, BS), pred)
    tma.async_copy_global_to_shared(v_desc, [e0 * BS, h * D], bar,
                                    v_smem.index(slot).slice(0, BS), pred)
    tma.async_copy_global_to_shared(v_desc, [e1 * BS, h * D], bar,
                                    v_smem.index(slot).slice(BS, BS), pred)


@gluon.jit
def _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, key0, lo, end, qk_scale,
                 BLOCK_G: gl.constexpr, BS: gl.constexpr, MMA: gl.constexpr, A_OP: gl.constexpr,
                 B_OP: gl.constexpr, ROWS: gl.constexpr, MASKED: gl.constexpr):
    """Keys [key0, key0 + 2 BS): one softmax update, K^T and V straight from their copies into
    the tensor cores' B layout (16-bit tiles: the matrix loads transpose). MASKED: key by key,
    V's rows no key owns zeroed (a slot past a context may hold NaN, 0 * NaN is NaN)."""
    s = mma_v2(q_a, k_tile.permute((1, 0)).load(B_OP),
               gl.zeros([BLOCK_G, 2 * BS], gl.float32, MMA)) * qk_scale
    if MASKED:
        c = gl.arange(0, 2 * BS, layout=gl.SliceLayout(0, MMA))
        seen = (key0 + c >= lo) & (key0 + c < end) & gl.where(c < BS, ok0, ok1)
        s = gl.where(seen[None, :], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    m_use = m_new
    if MASKED:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + gl.sum(p, 1)
    acc = acc * alpha[:, None]
    if MASKED:
        cv = gl.arange(0, 2 * BS, layout=gl.SliceLayout(1, ROWS))
        seen_v = (key0 + cv >= lo) & (key0 + cv < end) & gl.where(cv < BS, ok0, ok1)
        v = gl.where(seen_v[:, None], v_tile.load(ROWS), 0.0)
        v_op = gl.convert_layout(v, B_OP)
    else:
        v_op = v_tile.load(B_OP)
    acc = mma_v2(gl.convert_layout(p.to(v_tile.dtype), A_OP), v_op, acc)
    return acc, m_new, l_i


@gluon.jit(do_not_specialize=["window", "split_len", "n_kv_heads", "group", "num_blocks",
                              "capacity"])
def _paged_decode_hopper16(
    q_ptr, k_desc, v_desc, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr, fo_ptr, flse_ptr,
    count_ptr, qk_scale, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_qd, stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_od, stride_lb, stride_lh, stride_ls,
    stride_fob, stride_foh, stride_fod, stride_flb, stride_flh,
    D: gl.constexpr, BS: gl.constexpr, BLOCK_G: gl.constexpr, STAGES: gl.constexpr,
    SPLITS: gl.constexpr, WINDOWED: gl.constexpr, HAS_ERR: gl.constexpr,
    STORE_LSE: gl.constexpr, LSE: gl.constexpr, BAD_ENTRY: gl.constexpr,
    BAD_LENGTH: gl.constexpr,
):
    """Program (sequence b, kv head h, chunk of BLOCK_G of its group's query heads; split): the
    chunk's heads against the split's keys [start, end). One split stores (O, lse) itself;
    several store (O_u, lse_u) and the last of them to finish merges them (one launch)."""
    WARPS: gl.constexpr = BLOCK_G // 16
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1],
                                                  instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    ROWS: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, 1], [1, 0])  # 16 bytes a thread
    # the merge's tiles: 16 bytes of float32 a thread, a row's D columns over a warp's lanes
    MERGE: gl.constexpr = gl.BlockedLayout([1, 4], [128 // D, D // 4], [WARPS, 1], [1, 0])
    ROW_S: gl.constexpr = gl.SliceLayout(1, MMA)
    IT: gl.constexpr = 2 * BS

    chunks = (group + BLOCK_G - 1) // BLOCK_G
    bh = gl.program_id(0) // chunks
    chunk = gl.program_id(0) % chunks
    split = gl.program_id(1)
    b64 = (bh // n_kv_heads).to(gl.int64)
    h = bh % n_kv_heads
    ctx = gl.load(lens_ptr + b64 * stride_len)
    bad_len = (ctx < 0) | (ctx > capacity)  # flagged, and cut to the sequence's own row
    ctx = gl.minimum(gl.maximum(ctx, 0), capacity)
    lo = ctx * 0
    if WINDOWED:
        lo = gl.maximum(ctx - window, 0)
    start = lo // IT * IT + split * split_len
    end = gl.where(split == SPLITS - 1, ctx, gl.minimum(start + split_len, ctx))
    n_it = gl.maximum(end - start + IT - 1, 0) // IT

    offs_g = chunk * BLOCK_G + gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, ROWS))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, ROWS))
    heads = h.to(gl.int64) * group + offs_g
    q = gl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + cols[None, :] * stride_qd,
                mask=(offs_g < group)[:, None], other=0.0)
    q_a = gl.convert_layout(q, A_OP)

    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, IT, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, IT, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()

    row = table_ptr + b64 * stride_tb
    n_bad = ctx * 0
    for s in gl.static_range(STAGES):
        c0, c1, _, _, bad = _entries16(row, s, n_it, start, lo, end, stride_tc, num_blocks, BS)
        n_bad += bad
        _issue16(k_desc, v_desc, k_smem, v_smem, ready.index(s), s, c0, c1, h, s < n_it, D, BS)
    # read one iteration early, so that nothing in the loop waits on a plain load
    r0, r1, _, _, rbad = _entries16(row, STAGES, n_it, start, lo, end, stride_tc, num_blocks, BS)
    _, _, ok0, ok1, _ = _entries16(row, 0, n_it, start, lo, end, stride_tc, num_blocks, BS)

    m_i = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_S)
    l_i = gl.zeros([BLOCK_G], gl.float32, ROW_S)
    acc = gl.zeros([BLOCK_G, D], gl.float32, MMA)
    for it in range(n_it):
        slot = it % STAGES
        key0 = start + it * IT
        mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
        k_tile = k_smem.index(slot)
        v_tile = v_smem.index(slot)
        # a window's first or a context's last iteration, or one with a refused block
        if (key0 < lo) | (key0 + IT > end) | ~(ok0 & ok1):
            acc, m_i, l_i = _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, key0, lo,
                                         end, qk_scale, BLOCK_G, BS, MMA, A_OP, B_OP, ROWS, True)
        else:
            acc, m_i, l_i = _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, key0, lo,
                                         end, qk_scale, BLOCK_G, BS, MMA, A_OP, B_OP, ROWS,
                                         False)
        gl.thread_barrier()  # every read of this slot is done: refill it
        nxt = it + STAGES
        n_bad += gl.where(nxt < n_it, rbad, 0)
        _issue16(k_desc, v_desc, k_smem, v_smem, ready.index(slot), slot, r0, r1, h, nxt < n_it,
                 D, BS)
        r0, r1, _, _, rbad = _entries16(row, nxt + 1, n_it, start, lo, end, stride_tc,
                                        num_blocks, BS)
        _, _, ok0, ok1, _ = _entries16(row, it + 1, n_it, start, lo, end, stride_tc, num_blocks,
                                       BS)

    empty = l_i == 0.0  # no key in this split: O = 0, lse = -inf
    l_safe = gl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * LN2)
    offs_o = chunk * BLOCK_G + gl.arange(0, BLOCK_G, layout=ROW_S)
    cols_o = gl.arange(0, D, layout=gl.SliceLayout(0, MMA))
    g_ok = offs_o < group
    heads_o = h.to(gl.int64) * group + offs_o
    split64 = split.to(gl.int64)
    gl.store(o_ptr + b64 * stride_ob + heads_o[:, None] * stride_oh + split64 * stride_os
             + cols_o[None, :] * stride_od, out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])
    if STORE_LSE:
        gl.store(lse_ptr + b64 * stride_lb + heads_o * stride_lh + split64 * stride_ls, lse,
                 mask=g_ok)
    if HAS_ERR:  # one atomic a bit, before the merge's counter (as the Triton kernel)
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_ENTRY, mask=n_bad > 0)
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_LENGTH, mask=bad_len)
    if SPLITS > 1:  # the last of this (sequence, kv head, chunk)'s splits merges them
        gl.thread_barrier()  # every thread's partial stores before the release
        done = gl.atomic_add(count_ptr + gl.program_id(0), 1, sem="acq_rel", scope="gpu")
        if done == SPLITS - 1:
            gl.thread_barrier()  # the acquire, carried to every thread before any load
            offs_m = chunk * BLOCK_G + gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, MERGE))
            cols_m = gl.arange(0, D, layout=gl.SliceLayout(0, MERGE))
            m_ok = offs_m < group
            heads_m = h.to(gl.int64) * group + offs_m
            o_rows = o_ptr + b64 * stride_ob + heads_m[:, None] * stride_oh + cols_m[None, :] * stride_od
            lse_rows = lse_ptr + b64 * stride_lb + heads_m * stride_lh
            m = gl.full([BLOCK_G], float("-inf"), gl.float32, gl.SliceLayout(1, MERGE))
            for u in gl.static_range(SPLITS):
                m = gl.maximum(m, gl.load(lse_rows + u * stride_ls, mask=m_ok,
                                          other=float("-inf")))
            m_use = gl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0
            den = gl.zeros([BLOCK_G], gl.float32, gl.SliceLayout(1, MERGE))
            tot = gl.zeros([BLOCK_G, D], gl.float32, MERGE)
            for u in gl.static_range(SPLITS):
                w = gl.exp2((gl.load(lse_rows + u * stride_ls, mask=m_ok, other=float("-inf"))
                             - m_use) * (1.0 / LN2))
                tot += w[:, None] * gl.load(o_rows + u * stride_os, mask=m_ok[:, None], other=0.0)
                den += w
            final = tot / gl.where(den == 0.0, 1.0, den)[:, None]
            gl.store(fo_ptr + b64 * stride_fob + heads_m[:, None] * stride_foh
                     + cols_m[None, :] * stride_fod, final.to(fo_ptr.dtype.element_ty),
                     mask=m_ok[:, None])
            if LSE:
                gl.store(flse_ptr + b64 * stride_flb + heads_m * stride_flh,
                         m_use + gl.log(den), mask=m_ok)
            gl.store(count_ptr + gl.program_id(0), 0)  # zero for the next call (or replay)


PROGRAMS_PER_SM16 = 2  # two-warp programs: split until the grid holds about two an SM
MAX_SPLITS16 = 16
MIN_ITERATIONS_PER_SPLIT16 = 8


def fits16(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> bool:
    if INTERPRET or not q.is_cuda or capability(q.device)[0] != 9:
        return False
    num_blocks, bs, hkv, d = k_pool.shape
    return (q.dtype in (torch.float16, torch.bfloat16) and k_pool.dtype == q.dtype
            and d in HEAD_DIMS and bs == BLOCK_SIZE and q.shape[1] // hkv > 16
            and k_pool.is_contiguous() and v_pool.is_contiguous()
            and (num_blocks + 1) * bs * max(hkv, 1) < 2**31
            and all(t.data_ptr() % 16 == 0 for t in (k_pool, v_pool)))


def chunks16(group: int) -> int:
    return -(-group // BLOCK_G16)


def splits16(batch: int, n_kv_heads: int, chunks: int, keys: int, num_sms: int) -> int:
    splits = 1
    while (batch * n_kv_heads * chunks * splits * 2 <= PROGRAMS_PER_SM16 * num_sms
           and splits < MAX_SPLITS16
           and keys >= 2 * splits * MIN_ITERATIONS_PER_SPLIT16 * ITERATION16):
        splits *= 2
    return splits


def _pool_arg16(pool: torch.Tensor) -> TmaArg:
    num_blocks, bs, hkv, d = pool.shape
    box = [bs, d]
    dt = gl.float16 if pool.dtype == torch.float16 else gl.bfloat16
    return TmaArg(pool, [num_blocks * bs, hkv * d], [hkv * d, 1], box,
                  gl.NVMMASharedLayout.get_default_for(box, dt))


def launch_args16(q, k_pool, v_pool, block_tables, context_lens, o_dst, lse_dst, error_flags,
                  o, lse, counts, *, qk_scale, window, split_len, num_splits, capacity,
                  strides_o, strides_lse, strides_out, strides_lse_out, store_lse, with_lse,
                  flags) -> tuple:
    b, hq, d = q.shape
    num_blocks, bs, hkv, _ = k_pool.shape
    group = hq // hkv
    chunks = chunks16(group)
    args = (q, _pool_arg16(k_pool), _pool_arg16(v_pool), block_tables, context_lens, o_dst,
            lse_dst, error_flags, o if num_splits > 1 else None,
            lse if num_splits > 1 and with_lse else None, counts if num_splits > 1 else None,
            qk_scale, window or 0, split_len, hkv, group, num_blocks, capacity,
            *q.stride(), *block_tables.stride(), context_lens.stride(0),
            error_flags.stride(0) if error_flags is not None else 0,
            *strides_o, *strides_lse, *strides_out, *strides_lse_out)
    meta = dict(D=d, BS=bs, BLOCK_G=BLOCK_G16, STAGES=STAGES16, SPLITS=num_splits,
                WINDOWED=window is not None, HAS_ERR=error_flags is not None,
                STORE_LSE=store_lse, LSE=with_lse, BAD_ENTRY=flags[0], BAD_LENGTH=flags[1],
                num_warps=BLOCK_G16 // 16)
    return _paged_decode_hopper16, (b * hkv * chunks, num_splits), args, meta

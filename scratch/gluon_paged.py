"""Issue 27 study, the step after scratch/gluon_decode.py: its Gluon loop under the fast path's
contract of `paged_decode` (as scratch/tma_paged.py did for the Triton loop), so that its cost can
be timed before the kernel moves into Lab 03 part 2. It shipped as
src/minimodel/paged_attention_hopper.py
(Lab 03 part 2, "A kernel for Hopper"); this probe stays as the code that was timed. On the H200
(data/gluon-paged-h200.json, f46e7c5): 14 cases agree with paged_decode; at bench.fp8_decode's
shape one split at 3 stages takes 152.2 us (88% of copy, 1.75x the 16-bit step).
data/gluon-paged-sweep-h200.json (a7cec4e): batches 8-256, 1k-32k keys, 1-8 splits.

What the probe left out, and how this kernel does it:
- Any context length, and windows. A split runs whole iterations of four blocks from the
  iteration that holds its first key; an iteration not wholly inside [lo, end) (a window's
  first, a context's last) is masked key by key: its scores -inf, its V scales 0 and its V rows
  zeroed (a slot past a context may hold NaN, and 0 * NaN is NaN in the tensor cores). The
  others are masked per block only (a refused table entry).
- Bad table entries (outside [0, num_blocks)) are never followed: the copies get a coordinate
  past the pool, which TMA fills with zeros; the block's scores are masked and the sequence is
  flagged ERR_BAD_ENTRY. An entry is read only for a column that holds a key of [lo, end). A
  length outside [0, capacity] is flagged ERR_BAD_LENGTH and cut to the row.
- Splits write (O_u, lse_u) into the shipped workspace layout and the shipped merge kernel
  merges them; one split writes O and lse itself.
- The table entries of an iteration (for its masks) and of the copies STAGES iterations ahead
  are read one iteration early, so that nothing in the loop waits on a plain load.

Limits: 8-bit pools, contiguous (num_blocks, block_size, Hkv, d), d in {64, 128}, block_size a
multiple of 16, Hkv * d a multiple of 16; scales (num_blocks, block_size, Hkv) stored head-major
in a block; q float16; a group of at most 16 query heads (one chunk); no fold, no
longest-first order. Gluon runs only on a GPU, so --check runs there too.

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch:. .venv/bin/python \\
        scratch/gluon_paged.py --compile
    PYTHONPATH=src:scratch:. python scratch/gluon_paged.py --check --time --out $OUT/x.json
"""

import argparse
from pathlib import Path

import torch
from gluon_decode import compile_gluon, descriptor, scale_descriptor
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from minimodel import paged_attention as pa
from minimodel.kernels import cdiv, num_sms

LOG2E = 1.4426950408889634
LN2 = gl.constexpr(0.6931471805599453)
BAD_ENTRY = gl.constexpr(pa.ERR_BAD_ENTRY)
BAD_LENGTH = gl.constexpr(pa.ERR_BAD_LENGTH)
NB = 4  # blocks an iteration


@gluon.jit
def _entry(row, col, lo, end, stride_tc, num_blocks, BS: gl.constexpr):
    """Column col of a sequence's row: (the block its copies start at: past the pool if the
    entry is refused, whether it is followed, whether it was read and refused)."""
    read = (col * BS < end) & (col * BS + BS > lo)
    phys = gl.load(row + col * stride_tc, mask=read, other=-1)
    ok = read & (phys >= 0) & (phys < num_blocks)
    return gl.where(ok, phys, num_blocks), ok, read & (~ok)


@gluon.jit
def _entries(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS: gl.constexpr,
             NB: gl.constexpr):
    """Iteration it's four columns (none read past the split's iterations)."""
    c = (start + it * NB * BS) // BS
    e_end = gl.where(it < n_it, end, 0)  # past the last iteration: nothing read
    b0, ok0, bad0 = _entry(row, c, lo, e_end, stride_tc, num_blocks, BS)
    b1, ok1, bad1 = _entry(row, c + 1, lo, e_end, stride_tc, num_blocks, BS)
    b2, ok2, bad2 = _entry(row, c + 2, lo, e_end, stride_tc, num_blocks, BS)
    b3, ok3, bad3 = _entry(row, c + 3, lo, e_end, stride_tc, num_blocks, BS)
    bad = bad0.to(gl.int32) + bad1.to(gl.int32) + bad2.to(gl.int32) + bad3.to(gl.int32)
    return b0, b1, b2, b3, ok0, ok1, ok2, ok3, bad


@gluon.jit
def _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bar, slot, e0,
           e1, e2, e3, h, n_kv_heads, pred, D: gl.constexpr, BS: gl.constexpr,
           NB: gl.constexpr):
    """One iteration's copies (K, V and their scales of four blocks) into ring slot `slot`; a
    block's scales of head h are one row of BS floats, two rows a buffer (128-byte aligned)."""
    mbarrier.expect(bar, 2 * NB * (k_desc.block_type.nbytes + ks_desc.block_type.nbytes),
                    pred=pred)
    for j in gl.static_range(NB):
        e = e0 if j == 0 else e1 if j == 1 else e2 if j == 2 else e3
        tma.async_copy_global_to_shared(k_desc, [e * BS, h * D], bar,
                                        k_smem.index(slot * NB + j), pred)
        tma.async_copy_global_to_shared(v_desc, [e * BS, h * D], bar,
                                        v_smem.index(slot * NB + j), pred)
        tma.async_copy_global_to_shared(ks_desc, [e * n_kv_heads + h, 0], bar,
                                        ks_smem.index(slot * NB + j).slice(0, 1), pred)
        tma.async_copy_global_to_shared(vs_desc, [e * n_kv_heads + h, 0], bar,
                                        vs_smem.index(slot * NB + j).slice(0, 1), pred)


@gluon.jit
def _scales(tile, BS: gl.constexpr, MMA: gl.constexpr):
    """A block's BS scales (row 0 of its buffer) on the columns of MMA's layout."""
    ROW: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 1], [1, 0])
    return gl.convert_layout(gl.sum(tile.slice(0, 1).load(ROW), 0), gl.SliceLayout(0, MMA))


@gluon.jit
def _block_scores(q_a, k_tile, ks_tile, ok, key0, lo, end, qk_scale, BLOCK_G: gl.constexpr,
                  BS: gl.constexpr, MMA: gl.constexpr, B_QK: gl.constexpr,
                  MASKED: gl.constexpr):
    """One block's scores (log2 units, K's scales on their columns), -inf where no key is seen;
    and what is seen, on the columns (MASKED: key by key; else the block's flag)."""
    kt = k_tile.permute((1, 0)).load(B_QK).to(gl.float16)
    s = mma_v2(q_a, kt, gl.zeros([BLOCK_G, BS], gl.float32, MMA))
    s = s * (_scales(ks_tile, BS, MMA) * qk_scale)[None, :]
    if MASKED:
        j = key0 + gl.arange(0, BS, layout=gl.SliceLayout(0, MMA))
        seen = (j >= lo) & (j < end) & ok
        s = gl.where(seen[None, :], s, float("-inf"))
    else:
        seen = ok
        s = gl.where(ok, s, float("-inf"))
    return s, seen


@gluon.jit
def _block_pv(acc, p, w, v_tile, ok, key0, lo, end, BS: gl.constexpr, ROWS: gl.constexpr,
              A_OP: gl.constexpr, B_OP: gl.constexpr, MASKED: gl.constexpr):
    """acc + P~ diag(w) V^ for one block: V read 16 bytes a thread, converted in registers,
    then put in the B layout; in a masked iteration a row no key owns is zeroed."""
    v = v_tile.load(ROWS).to(gl.float16)
    if MASKED:
        j = key0 + gl.arange(0, BS, layout=gl.SliceLayout(1, ROWS))
        v = gl.where(((j >= lo) & (j < end) & ok)[:, None], v, 0.0)
    pa_ = gl.convert_layout((p * w[None, :]).to(gl.float16), A_OP)
    return mma_v2(pa_, gl.convert_layout(v, B_OP), acc)


@gluon.jit
def _iteration(acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
               ok3, key0, lo, end, qk_scale, BLOCK_G: gl.constexpr, BS: gl.constexpr,
               NB: gl.constexpr, MMA: gl.constexpr, ROWS: gl.constexpr, A_OP: gl.constexpr,
               B_OP: gl.constexpr, B_QK: gl.constexpr, MASKED: gl.constexpr):
    """Keys [key0, key0 + 4 BS): one softmax update and one pass over acc (kept in units of
    s_acc, the last iteration's largest V scale) for the four blocks."""
    i = slot * NB
    s0, e0 = _block_scores(q_a, k_smem.index(i), ks_smem.index(i), ok0, key0, lo, end, qk_scale,
                           BLOCK_G, BS, MMA, B_QK, MASKED)
    s1, e1 = _block_scores(q_a, k_smem.index(i + 1), ks_smem.index(i + 1), ok1, key0 + BS, lo,
                           end, qk_scale, BLOCK_G, BS, MMA, B_QK, MASKED)
    s2, e2 = _block_scores(q_a, k_smem.index(i + 2), ks_smem.index(i + 2), ok2, key0 + 2 * BS,
                           lo, end, qk_scale, BLOCK_G, BS, MMA, B_QK, MASKED)
    s3, e3 = _block_scores(q_a, k_smem.index(i + 3), ks_smem.index(i + 3), ok3, key0 + 3 * BS,
                           lo, end, qk_scale, BLOCK_G, BS, MMA, B_QK, MASKED)
    m_new = gl.maximum(gl.maximum(gl.maximum(m_i, gl.max(s0, 1)), gl.max(s1, 1)),
                       gl.maximum(gl.max(s2, 1), gl.max(s3, 1)))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: nothing to scale
    alpha = gl.exp2(m_i - m_use)
    s0 = gl.exp2(s0 - m_use[:, None])
    s1 = gl.exp2(s1 - m_use[:, None])
    s2 = gl.exp2(s2 - m_use[:, None])
    s3 = gl.exp2(s3 - m_use[:, None])
    l_i = l_i * alpha + (gl.sum(s0, 1) + gl.sum(s1, 1)) + (gl.sum(s2, 1) + gl.sum(s3, 1))
    # V's scales, 0 for a key not seen (a slot past a context may hold NaN)
    w0 = gl.where(e0, _scales(vs_smem.index(i), BS, MMA), 0.0)
    w1 = gl.where(e1, _scales(vs_smem.index(i + 1), BS, MMA), 0.0)
    w2 = gl.where(e2, _scales(vs_smem.index(i + 2), BS, MMA), 0.0)
    w3 = gl.where(e3, _scales(vs_smem.index(i + 3), BS, MMA), 0.0)
    s_max = gl.maximum(gl.maximum(gl.max(w0, 0), gl.max(w1, 0)),
                       gl.maximum(gl.max(w2, 0), gl.max(w3, 0)))
    s_max = gl.where(s_max > 0.0, s_max, 1.0)  # no key seen: every scale is 0
    r = 1.0 / s_max
    acc = acc * gl.convert_layout(alpha * (s_acc * r), gl.SliceLayout(1, MMA))[:, None]
    acc = _block_pv(acc, s0, w0 * r, v_smem.index(i), ok0, key0, lo, end, BS, ROWS, A_OP, B_OP,
                    MASKED)
    acc = _block_pv(acc, s1, w1 * r, v_smem.index(i + 1), ok1, key0 + BS, lo, end, BS, ROWS,
                    A_OP, B_OP, MASKED)
    acc = _block_pv(acc, s2, w2 * r, v_smem.index(i + 2), ok2, key0 + 2 * BS, lo, end, BS, ROWS,
                    A_OP, B_OP, MASKED)
    acc = _block_pv(acc, s3, w3 * r, v_smem.index(i + 3), ok3, key0 + 3 * BS, lo, end, BS, ROWS,
                    A_OP, B_OP, MASKED)
    return acc, m_new, l_i, s_max


@gluon.jit(do_not_specialize=["window", "split_len", "n_kv_heads", "group", "num_blocks",
                              "capacity"])
def _gluon_paged_decode(
    q_ptr, k_desc, v_desc, ks_desc, vs_desc, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr,
    qk_scale, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_lb, stride_lh, stride_ls,
    D: gl.constexpr, BS: gl.constexpr, BLOCK_G: gl.constexpr, STAGES: gl.constexpr,
    NB: gl.constexpr, WINDOWED: gl.constexpr, HAS_ERR: gl.constexpr,
):
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1],
                                                  instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    A_QK: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    B_QK: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    ROWS: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [1, 1], [1, 0])
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1, 1], [1, 0])
    ROW_S: gl.constexpr = gl.SliceLayout(1, MMA)
    IT: gl.constexpr = NB * BS  # keys an iteration

    bh = gl.program_id(0)
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
    end = gl.where(split == gl.num_programs(1) - 1, ctx, gl.minimum(start + split_len, ctx))
    n_it = gl.maximum(end - start + IT - 1, 0) // IT

    offs_g = gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, Q_L))
    cols_q = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    heads = h.to(gl.int64) * group + offs_g
    q = gl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + cols_q[None, :],
                mask=(offs_g < group)[:, None], other=0.0)
    q_a = gl.convert_layout(q, A_QK)

    k_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * NB, BS, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * NB, BS, D], v_desc.layout)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES * NB, 2, BS], ks_desc.layout)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES * NB, 2, BS], vs_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()

    row = table_ptr + b64 * stride_tb
    n_bad = ctx * 0
    for s in gl.static_range(STAGES):
        c0, c1, c2, c3, _, _, _, _, bad = _entries(row, s, n_it, start, lo, end, stride_tc,
                                                   num_blocks, BS, NB)
        n_bad += bad
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem,
               ready.index(s), s, c0, c1, c2, c3, h, n_kv_heads, s < n_it, D, BS, NB)
    # loop-carried, read one iteration early: the refill's blocks (iteration it + STAGES) and
    # this iteration's flags
    r0, r1, r2, r3, _, _, _, _, rbad = _entries(row, STAGES, n_it, start, lo, end, stride_tc,
                                                num_blocks, BS, NB)
    _, _, _, _, ok0, ok1, ok2, ok3, _ = _entries(row, 0, n_it, start, lo, end, stride_tc,
                                                 num_blocks, BS, NB)

    m_i = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_S)
    l_i = gl.zeros([BLOCK_G], gl.float32, ROW_S)
    acc = gl.zeros([BLOCK_G, D], gl.float32, MMA)
    s_acc = qk_scale * 0.0 + 1.0
    for it in range(n_it):
        slot = it % STAGES
        key0 = start + it * IT
        mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
        if (key0 < lo) | (key0 + IT > end):
            acc, m_i, l_i, s_acc = _iteration(
                acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
                ok3, key0, lo, end, qk_scale, BLOCK_G, BS, NB, MMA, ROWS, A_OP, B_OP, B_QK, True)
        else:
            acc, m_i, l_i, s_acc = _iteration(
                acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
                ok3, key0, lo, end, qk_scale, BLOCK_G, BS, NB, MMA, ROWS, A_OP, B_OP, B_QK,
                False)
        gl.thread_barrier()  # every read of this slot is done: refill it
        nxt = it + STAGES
        n_bad += gl.where(nxt < n_it, rbad, 0)
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem,
               ready.index(slot), slot, r0, r1, r2, r3, h, n_kv_heads, nxt < n_it, D, BS, NB)
        r0, r1, r2, r3, _, _, _, _, rbad = _entries(row, nxt + 1, n_it, start, lo, end,
                                                    stride_tc, num_blocks, BS, NB)
        _, _, _, _, ok0, ok1, ok2, ok3, _ = _entries(row, it + 1, n_it, start, lo, end,
                                                     stride_tc, num_blocks, BS, NB)

    empty = l_i == 0.0  # no key in this split: O = 0, lse = -inf
    l_safe = gl.where(empty, 1.0, l_i)
    out = acc * (s_acc / l_safe)[:, None]
    lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * LN2)
    offs_o = gl.arange(0, BLOCK_G, layout=ROW_S)
    cols_o = gl.arange(0, D, layout=gl.SliceLayout(0, MMA))
    g_ok = offs_o < group
    heads_o = h.to(gl.int64) * group + offs_o
    split64 = split.to(gl.int64)
    gl.store(o_ptr + b64 * stride_ob + heads_o[:, None] * stride_oh + split64 * stride_os
             + cols_o[None, :], out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])
    gl.store(lse_ptr + b64 * stride_lb + heads_o * stride_lh + split64 * stride_ls, lse,
             mask=g_ok)
    if HAS_ERR:
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_ENTRY, mask=n_bad > 0)
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_LENGTH, mask=bad_len)


def launch_args(q, k_pool, v_pool, block_tables, context_lens, *, max_context_len, num_splits,
                window, k_scale, v_scale, error_flags, stages):
    """The launch's (grid, args, meta) and (O, lse, O_u, lse_u)."""
    b, hq, d = q.shape
    num_blocks, bs, hkv, dk = k_pool.shape
    assert q.dtype == torch.float16 and q.is_contiguous() and k_pool.dtype == pa.FP8_DTYPE
    assert dk == d and d in (64, 128) and bs % 16 == 0 and hq // hkv <= 16
    assert k_pool.is_contiguous() and v_pool.is_contiguous() and (hkv * d) % 16 == 0
    capacity = block_tables.shape[1] * bs
    it = NB * bs
    keys = max_context_len if window is None else min(max_context_len, window + it - 1)
    if num_splits is None:
        num_splits = pa.choose_num_splits(b, hkv, keys, it, num_sms(q.device), 1)
    split_len = cdiv(cdiv(max(keys, 1), num_splits), it) * it
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, hq, dtype=torch.float32, device=q.device)
    if num_splits == 1:
        o_dst, lse_dst = o.view(b, hq, 1, d), lse.view(b, hq, 1)
    else:
        o_dst = torch.empty(b, hq, num_splits, d, dtype=torch.float32, device=q.device)
        lse_dst = torch.empty(b, hq, num_splits, dtype=torch.float32, device=q.device)
    args = (
        q, descriptor(k_pool), descriptor(v_pool), scale_descriptor(k_scale),
        scale_descriptor(v_scale), block_tables, context_lens, o_dst, lse_dst, error_flags,
        d**-0.5 * LOG2E, window or 0, split_len, hkv, hq // hkv, num_blocks,
        min(capacity, 2**31 - 1),
        q.stride(0), q.stride(1), *block_tables.stride(), context_lens.stride(0),
        error_flags.stride(0) if error_flags is not None else 0,
        o_dst.stride(0), o_dst.stride(1), o_dst.stride(2), *lse_dst.stride(),
    )
    meta = dict(D=d, BS=bs, BLOCK_G=16, STAGES=stages, NB=NB, WINDOWED=window is not None,
                HAS_ERR=error_flags is not None, num_warps=1)
    return (b * hkv, num_splits), args, meta, (o, lse, o_dst, lse_dst)


def gluon_paged_decode(q, k_pool, v_pool, block_tables, context_lens, *, max_context_len,
                       num_splits=None, window=None, k_scale=None, v_scale=None,
                       error_flags=None, stages=2):
    """paged_decode's fast path with this kernel: (O (B, Hq, d) in q's dtype, lse (B, Hq))."""
    grid, args, meta, out = launch_args(
        q, k_pool, v_pool, block_tables, context_lens, max_context_len=max_context_len,
        num_splits=num_splits, window=window, k_scale=k_scale, v_scale=v_scale,
        error_flags=error_flags, stages=stages)
    _gluon_paged_decode[grid](*args, **meta)
    o, lse, o_dst, lse_dst = out
    b, hq, d = q.shape
    if grid[1] > 1:
        pa._merge_splits[(b * hq,)](
            o_dst, lse_dst, o, lse, grid[1], hq, *o_dst.stride(), *lse_dst.stride(),
            *o.stride()[:2], o.stride(2), *lse.stride(),
            D=d, HEAD_DIM=d, BLOCK_S=pa.MERGE_BLOCK_S, LSE=True, num_warps=4,
        )
    return o, lse


def head_major(scale: torch.Tensor) -> torch.Tensor:
    """The same scales stored head-major in a block (the layout the scale copies read)."""
    return scale.transpose(1, 2).contiguous().transpose(1, 2)


def check():
    """On the GPU: against the shipped paged_decode's fast path, ragged lengths (0, 1, block and
    iteration edges), windows, splits, NaN in every slot no sequence owns, bad table entries and
    a bad length (the flags and the other rows)."""
    torch.manual_seed(0)
    dev = "cuda"
    d, bs, hkv, g = 64, 16, 2, 4
    lens = [0, 1, 15, 16, 17, 63, 64, 65, 128, 200]
    b, max_blocks = len(lens), 16
    num_blocks = b * max_blocks + 3
    q = torch.randn(b, hkv * g, d).half()
    perm = torch.randperm(num_blocks)[: b * max_blocks].view(b, max_blocks).to(torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    k8, v8 = (torch.full((num_blocks, bs, hkv, d), float("nan")).to(pa.FP8_DTYPE) for _ in "kv")
    ks, vs = (torch.full((num_blocks, bs, hkv), float("nan")) for _ in "kv")
    for r, n in enumerate(lens):  # each sequence's keys, written slot by slot
        for j in range(n):
            blk, slot = perm[r, j // bs].item(), j % bs
            (k8[blk, slot], ks[blk, slot]), (v8[blk, slot], vs[blk, slot]) = (
                pa.quantize_kv(torch.randn(hkv, d)), pa.quantize_kv(torch.randn(hkv, d)))
    q, perm, lens_t, k8, v8 = (t.to(dev) for t in (q, perm, lens_t, k8, v8))
    ks, vs = head_major(ks.to(dev)), head_major(vs.to(dev))
    scales = {"k_scale": ks, "v_scale": vs}
    cases = 0
    for window in (None, 1, 5, 40):
        for splits in (1, 2, 3):
            kw = dict(max_context_len=max(lens), num_splits=splits, window=window, **scales)
            want, want_lse = pa.paged_decode(q, k8, v8, perm, lens_t, return_lse=True, **kw)
            got, got_lse = gluon_paged_decode(q, k8, v8, perm, lens_t, **kw)
            assert torch.isfinite(got).all(), (window, splits)
            err = (got.float() - want.float()).abs().max().item()
            assert err < 2e-3, (window, splits, err)
            assert torch.equal(got_lse.isinf(), want_lse.isinf()), (window, splits)
            fin = want_lse.isfinite()
            assert (got_lse[fin] - want_lse[fin]).abs().max() < 1e-3, (window, splits)
            cases += 1
    bad_table, bad_lens = perm.clone(), lens_t.clone()
    bad_table[4, 1], bad_table[8, 0] = -1, num_blocks
    bad_lens[6] = max_blocks * bs + 5
    for splits in (1, 2):
        flags = torch.zeros(b, dtype=torch.int32, device=dev)
        got, _ = gluon_paged_decode(q, k8, v8, bad_table, bad_lens, max_context_len=max(lens),
                                    num_splits=splits, error_flags=flags, **scales)
        want = pa.paged_decode(q, k8, v8, perm, lens_t, max_context_len=max(lens),
                               num_splits=splits, **scales)
        assert flags.tolist() == [0, 0, 0, 0, 1, 0, 2, 0, 1, 0], flags.tolist()
        keep = [r for r in range(b) if r not in (4, 6, 8)]
        assert (got[keep].float() - want[keep].float()).abs().max() < 2e-3
        assert torch.isfinite(got[[r for r in range(b) if r != 6]]).all()
        cases += 1
    print(f"gluon_paged_decode agrees with paged_decode in {cases} cases (H200)", flush=True)


def compile_report():
    """Compiled for sm_90 without a GPU: registers, spills, shared memory, main loop."""
    import collections

    import fp8_sass as fs

    b, hq, hkv, d, bs, n, nb = 64, 32, 8, 128, 16, 4096, 64
    q = torch.zeros(b, hq, d, dtype=torch.float16)
    pools = [torch.zeros(nb, bs, hkv, d).to(pa.FP8_DTYPE) for _ in "kv"]
    sc = {k: torch.ones(nb, hkv, bs).transpose(1, 2) for k in ("k_scale", "v_scale")}
    table = torch.zeros(b, n // bs, dtype=torch.int32)
    lens = torch.full((b,), n, dtype=torch.int32)
    for stages in (2, 3):
        grid, args, meta, _ = launch_args(q, *pools, table, lens, max_context_len=n,
                                          num_splits=1, window=None, error_flags=None,
                                          stages=stages, **sc)
        compiled = compile_gluon(_gluon_paged_decode, args, meta)
        text, _, _ = fs.ptxas_v(compiled.asm["ptx"])
        lines = fs.sass_lines(fs.sass(compiled.asm["cubin"]))
        loop = fs.main_loop(lines)
        ops = collections.Counter(op for _, op, *_ in loop)
        print(f"stages={stages}: {text}; shared {compiled.metadata.shared} B; main_loop's span "
              f"{len(loop)} instructions ({sum(op.startswith('HMMA') for op in ops.elements())}"
              " HMMA)")


def time_it(out_path):
    """On the H200, at bench.fp8_decode's shape: this kernel against the shipped paged_decode
    (8- and 16-bit), scratch/gluon_decode.py's probe and scratch/tma_paged.py, graph replays in
    turns, each output checked first against the shipped 8-bit kernel's."""
    from gluon_decode import gluon_decode
    from tma_paged import tma_paged_decode

    from bench import core
    from bench.fp8_decode import N as NK
    from bench.fp8_decode import cache

    c = cache()
    s8 = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    fns = {
        "shipped_fp8": lambda: pa.paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t,
                                               max_context_len=NK, **s8),
        "shipped_fp16": lambda: pa.paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t,
                                                max_context_len=NK),
        "tma_paged_fp8": lambda: tma_paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t,
                                                  max_context_len=NK, num_splits=2, **s8)[0],
        "gluon_probe_fp8": lambda: gluon_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.k_scale,
                                                c.v_scale, splits=1, stages=2),
    }
    for sp in (None, 1, 2):
        for st in (2, 3):
            fns[f"gluon_paged_fp8_split{sp or 'auto'}_s{st}"] = (
                lambda sp=sp, st=st: gluon_paged_decode(
                    c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, max_context_len=NK,
                    num_splits=sp, stages=st, **s8)[0])
    records = {}
    base = fns["shipped_fp8"]()
    for name, fn in fns.items():
        ref = base if "fp16" not in name else fns["shipped_fp16"]()
        diff = (fn().float() - ref.float()).abs().max().item()
        print(f"{name}: max diff vs shipped {diff:.2e}", flush=True)
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    core.in_turns(records, fns, 3, must_capture=True)
    copy = core.copy_rate()
    core.save(Path(out_path), {"environment": core.environment(), "copy_bytes_per_s": copy,
                               "records": list(records.values())})


def sweep(out_path):
    """On the H200: the kernel at other batches and lengths (GQA 32/8, d = 128, blocks of 16),
    one to eight splits and 2 or 3 stages, against the shipped kernel on the 8- and 16-bit
    caches: the data a split rule for it would stand on."""
    import bench.fp8_decode as fd
    from bench import core

    cases = []
    for b, n in ((8, 4096), (8, 32768), (64, 1024), (64, 4096), (64, 16384), (256, 4096)):
        fd.B, fd.N = b, n
        c = fd.cache()
        s8 = {"k_scale": c.k_scale, "v_scale": c.v_scale}
        fns = {
            "shipped_fp8": lambda c=c, n=n, s8=s8: pa.paged_decode(
                c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, max_context_len=n, **s8),
            "shipped_fp16": lambda c=c, n=n: pa.paged_decode(
                c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t, max_context_len=n),
        }
        for sp in (1, 2, 4, 8):
            for st in (2, 3):
                fns[f"gluon_split{sp}_s{st}"] = (
                    lambda c=c, n=n, s8=s8, sp=sp, st=st: gluon_paged_decode(
                        c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, max_context_len=n,
                        num_splits=sp, stages=st, **s8)[0])
        base = fns["shipped_fp8"]()
        records = {}
        for name, fn in fns.items():
            ref = base if "fp16" not in name else fns["shipped_fp16"]()
            diff = (fn().float() - ref.float()).abs().max().item()
            records[name] = {"impl": name, "max_diff_vs_shipped": diff}
        core.in_turns(records, fns, 2, must_capture=True)
        us = {k: round(r["graph_ms"] * 1e3, 1) for k, r in records.items()}
        print(f"B={b} N={n}: {us}", flush=True)
        cases.append({"batch": b, "keys": n, "records": list(records.values())})
        del c, fns, base
        torch.cuda.empty_cache()
    core.save(Path(out_path), {"environment": core.environment(),
                               "copy_bytes_per_s": core.copy_rate(), "cases": cases})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--out", default="gluon-paged.json")
    a = ap.parse_args()
    if a.compile:
        compile_report()
    if a.check:
        check()
    if a.time:
        time_it(a.out)
    if a.sweep:
        sweep(a.out)

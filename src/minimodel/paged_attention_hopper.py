# ~/~ begin <<docs/lab/03b-paged-kernels.md#src/minimodel/paged_attention_hopper.py>>[init]
"""The paged decodes for Hopper GPUs, in Gluon, the fast path of `paged_decode` where they fit:
8-bit pools (K, V and their scales copied by TMA, four blocks an iteration, one warp a program,
`fits`), and 16-bit pools of large groups (two blocks an iteration, two warps a program of 32
query heads, the splits merged by the last of them, `fits16`).

Tangled from docs/lab/03b-paged-kernels.md; edit the page, not this file.
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from minimodel.kernels import INTERPRET, LN2, TmaArg, capability

__all__ = ["fits", "fits16", "hopper_splits", "launch_args", "launch_args16", "splits16"]

BLOCK_SIZE = 16  # the one block size the kernel takes
ITERATION = 4 * BLOCK_SIZE  # keys an iteration: four blocks
BLOCK_G = 16  # query rows a program: mma_v2's least, a group of up to 16 query heads
HEAD_DIMS = (64, 128)
STAGES = 2  # iterations in flight (3 was no faster: data/gluon-paged-sweep-h200.json)


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-hopper-copies>>[init]
@gluon.jit
def _entry(row, col, lo, end, stride_tc, num_blocks, BS: gl.constexpr):
    """Column col of a sequence's row: (the block its copies start at: past the pool if the
    entry is refused, whether it is followed, whether it was read and refused)."""
    read = (col * BS < end) & (col * BS + BS > lo)
    phys = gl.load(row + col * stride_tc, mask=read, other=-1)
    ok = read & (phys >= 0) & (phys < num_blocks)
    return gl.where(ok, phys, num_blocks), ok, read & (~ok)


@gluon.jit
def _entries(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS: gl.constexpr):
    """Iteration it's four columns (none read past the split's iterations)."""
    c = (start + it * 4 * BS) // BS
    e_end = gl.where(it < n_it, end, 0)  # past the last iteration: nothing read
    b0, ok0, bad0 = _entry(row, c, lo, e_end, stride_tc, num_blocks, BS)
    b1, ok1, bad1 = _entry(row, c + 1, lo, e_end, stride_tc, num_blocks, BS)
    b2, ok2, bad2 = _entry(row, c + 2, lo, e_end, stride_tc, num_blocks, BS)
    b3, ok3, bad3 = _entry(row, c + 3, lo, e_end, stride_tc, num_blocks, BS)
    bad = bad0.to(gl.int32) + bad1.to(gl.int32) + bad2.to(gl.int32) + bad3.to(gl.int32)
    return b0, b1, b2, b3, ok0, ok1, ok2, ok3, bad


@gluon.jit
def _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bar, slot, e0,
           e1, e2, e3, h, n_kv_heads, pred, D: gl.constexpr, BS: gl.constexpr):
    """One iteration's copies (K, V and their scales of four blocks) into ring slot `slot`; a
    block's scales of head h are one row of BS floats, in a buffer of two rows (a TMA
    destination is 128-byte aligned)."""
    mbarrier.expect(bar, 2 * 4 * (k_desc.block_type.nbytes + ks_desc.block_type.nbytes),
                    pred=pred)
    for j in gl.static_range(4):
        e = e0 if j == 0 else e1 if j == 1 else e2 if j == 2 else e3
        tma.async_copy_global_to_shared(k_desc, [e * BS, h * D], bar,
                                        k_smem.index(slot * 4 + j), pred)
        tma.async_copy_global_to_shared(v_desc, [e * BS, h * D], bar,
                                        v_smem.index(slot * 4 + j), pred)
        tma.async_copy_global_to_shared(ks_desc, [e * n_kv_heads + h, 0], bar,
                                        ks_smem.index(slot * 4 + j).slice(0, 1), pred)
        tma.async_copy_global_to_shared(vs_desc, [e * n_kv_heads + h, 0], bar,
                                        vs_smem.index(slot * 4 + j).slice(0, 1), pred)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-hopper-loop>>[init]
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
    then put in the B layout; in a masked iteration a row no key owns is zeroed (a slot past a
    context may hold NaN, and 0 * NaN is NaN in the tensor cores)."""
    v = v_tile.load(ROWS).to(gl.float16)
    if MASKED:
        j = key0 + gl.arange(0, BS, layout=gl.SliceLayout(1, ROWS))
        v = gl.where(((j >= lo) & (j < end) & ok)[:, None], v, 0.0)
    p_op = gl.convert_layout((p * w[None, :]).to(gl.float16), A_OP)
    return mma_v2(p_op, gl.convert_layout(v, B_OP), acc)


@gluon.jit
def _iteration(acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
               ok3, key0, lo, end, qk_scale, BLOCK_G: gl.constexpr, BS: gl.constexpr,
               MMA: gl.constexpr, ROWS: gl.constexpr, A_OP: gl.constexpr, B_OP: gl.constexpr,
               B_QK: gl.constexpr, MASKED: gl.constexpr):
    """Keys [key0, key0 + 4 BS): one softmax update and one pass over acc for the four blocks.
    acc is kept in units of s_acc, the last iteration's largest V scale s_max: the pass applies
    alpha and the change of unit s_acc / s_max at once, and each block's P~ takes its keys'
    scales over s_max (at most 1, so P~ stays in range in 16 bits)."""
    i = slot * 4
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
    # V's scales, 0 for a key not seen
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
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-hopper-kernel>>[init]
@gluon.jit(do_not_specialize=["window", "split_len", "n_kv_heads", "group", "num_blocks",
                              "capacity"])
def _paged_decode_fp8_hopper(
    q_ptr, k_desc, v_desc, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr, ks_desc, vs_desc,
    qk_scale, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_qd, stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_od, stride_lb, stride_lh, stride_ls,
    D: gl.constexpr, BS: gl.constexpr, BLOCK_G: gl.constexpr, STAGES: gl.constexpr,
    WINDOWED: gl.constexpr, HAS_ERR: gl.constexpr, STORE_LSE: gl.constexpr, Q_BF16: gl.constexpr,
    BAD_ENTRY: gl.constexpr, BAD_LENGTH: gl.constexpr,
):
    """Program (sequence b and kv head h, split): the group's query heads of b against the keys
    [start, end) of the split, through b's row of the table; (O_u, lse_u) stored at the split."""
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1],
                                                  instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    # QK^T's operands take four d a register: K^T loads straight from its 8-bit tile
    A_QK: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    B_QK: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    ROWS: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [1, 1], [1, 0])  # 16 bytes a thread
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1, 1], [1, 0])
    ROW_S: gl.constexpr = gl.SliceLayout(1, MMA)
    IT: gl.constexpr = 4 * BS  # keys an iteration

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
    # whole iterations from the one that holds the split's first key: [start, end)
    start = lo // IT * IT + split * split_len
    end = gl.where(split == gl.num_programs(1) - 1, ctx, gl.minimum(start + split_len, ctx))
    n_it = gl.maximum(end - start + IT - 1, 0) // IT

    offs_g = gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, Q_L))
    cols_q = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    heads = h.to(gl.int64) * group + offs_g
    q = gl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + cols_q[None, :] * stride_qd,
                mask=(offs_g < group)[:, None], other=0.0)
    if Q_BF16:  # both products run in float16: q brought into its range by a power of two c
        q32 = q.to(gl.float32)
        top = gl.max(gl.max(gl.abs(q32), 1), 0)
        log2_c = gl.where(top > 0.0, 14.0 - gl.ceil(gl.log2(top)), 0.0)  # |q| c <= 2^14
        q = (q32 * gl.exp2(log2_c)).to(gl.float16)
        qk_scale = qk_scale * gl.exp2(-log2_c)
    q_a = gl.convert_layout(q, A_QK)

    k_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * 4, BS, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * 4, BS, D], v_desc.layout)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES * 4, 2, BS], ks_desc.layout)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES * 4, 2, BS], vs_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()

    row = table_ptr + b64 * stride_tb
    n_bad = ctx * 0
    for s in gl.static_range(STAGES):
        c0, c1, c2, c3, _, _, _, _, bad = _entries(row, s, n_it, start, lo, end, stride_tc,
                                                   num_blocks, BS)
        n_bad += bad
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem,
               ready.index(s), s, c0, c1, c2, c3, h, n_kv_heads, s < n_it, D, BS)
    # read one iteration early, so that nothing in the loop waits on a plain load: the refill's
    # blocks (iteration it + STAGES) and this iteration's flags
    r0, r1, r2, r3, _, _, _, _, rbad = _entries(row, STAGES, n_it, start, lo, end, stride_tc,
                                                num_blocks, BS)
    _, _, _, _, ok0, ok1, ok2, ok3, _ = _entries(row, 0, n_it, start, lo, end, stride_tc,
                                                 num_blocks, BS)

    m_i = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_S)
    l_i = gl.zeros([BLOCK_G], gl.float32, ROW_S)
    acc = gl.zeros([BLOCK_G, D], gl.float32, MMA)
    s_acc = qk_scale * 0.0 + 1.0
    for it in range(n_it):
        slot = it % STAGES
        key0 = start + it * IT
        mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
        if (key0 < lo) | (key0 + IT > end):  # a window's first or a context's last iteration
            acc, m_i, l_i, s_acc = _iteration(
                acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
                ok3, key0, lo, end, qk_scale, BLOCK_G, BS, MMA, ROWS, A_OP, B_OP, B_QK, True)
        else:
            acc, m_i, l_i, s_acc = _iteration(
                acc, m_i, l_i, s_acc, q_a, k_smem, v_smem, ks_smem, vs_smem, slot, ok0, ok1, ok2,
                ok3, key0, lo, end, qk_scale, BLOCK_G, BS, MMA, ROWS, A_OP, B_OP, B_QK,
                False)
        gl.thread_barrier()  # every read of this slot is done: refill it
        nxt = it + STAGES
        n_bad += gl.where(nxt < n_it, rbad, 0)
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem,
               ready.index(slot), slot, r0, r1, r2, r3, h, n_kv_heads, nxt < n_it, D, BS)
        r0, r1, r2, r3, _, _, _, _, rbad = _entries(row, nxt + 1, n_it, start, lo, end,
                                                    stride_tc, num_blocks, BS)
        _, _, _, _, ok0, ok1, ok2, ok3, _ = _entries(row, it + 1, n_it, start, lo, end,
                                                     stride_tc, num_blocks, BS)

    empty = l_i == 0.0  # no key in this split: O = 0, lse = -inf
    l_safe = gl.where(empty, 1.0, l_i)
    out = acc * (s_acc / l_safe)[:, None]
    offs_o = gl.arange(0, BLOCK_G, layout=ROW_S)
    cols_o = gl.arange(0, D, layout=gl.SliceLayout(0, MMA))
    g_ok = offs_o < group
    heads_o = h.to(gl.int64) * group + offs_o
    split64 = split.to(gl.int64)
    gl.store(o_ptr + b64 * stride_ob + heads_o[:, None] * stride_oh + split64 * stride_os
             + cols_o[None, :] * stride_od, out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])
    if STORE_LSE:
        lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * LN2)
        gl.store(lse_ptr + b64 * stride_lb + heads_o * stride_lh + split64 * stride_ls, lse,
                 mask=g_ok)
    if HAS_ERR:
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_ENTRY, mask=n_bad > 0)
        gl.atomic_or(err_ptr + b64 * stride_err, BAD_LENGTH, mask=bad_len)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-hopper-dispatch>>[init]
PROGRAMS_PER_SM = 3  # one-warp programs: B Hkv splits >= 3 per SM (about 512 on an H200)
MAX_SPLITS = 8  # the most this kernel was measured at
MIN_ITERATIONS_PER_SPLIT = 4


def fits(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, k_scale: torch.Tensor,
         v_scale: torch.Tensor) -> bool:
    """Whether `paged_decode`'s fast path on these (checked) 8-bit pools takes this kernel: a
    Hopper GPU, q float16, d 64 or 128, blocks of 16, a group of at most 16 query
    heads, contiguous pools, and scales stored head-major in a block (as KernelPagedKVCache
    stores them), every base 16-byte aligned as the TMA needs."""
    if INTERPRET or not q.is_cuda or capability(q.device)[0] != 9:
        return False
    num_blocks, bs, hkv, d = k_pool.shape
    head_major = (hkv * bs, 1, bs) if hkv > 1 else (bs, 1)
    return (q.dtype in (torch.float16, torch.bfloat16) and d in HEAD_DIMS and bs == BLOCK_SIZE
            and q.shape[1] // hkv <= BLOCK_G
            and k_pool.is_contiguous() and v_pool.is_contiguous()
            and all(s.stride()[:len(head_major)] == head_major for s in (k_scale, v_scale))
            # TMA coordinates are int32, one block past the pool included
            and (num_blocks + 1) * bs * max(hkv, 1) < 2**31
            and all(t.data_ptr() % 16 == 0 for t in (k_pool, v_pool, k_scale, v_scale)))


def hopper_splits(batch: int, n_kv_heads: int, keys: int, num_sms: int) -> int:
    """Splits of each context: the least power of two that gives the grid PROGRAMS_PER_SM
    programs an SM, at most MAX_SPLITS, none shorter than MIN_ITERATIONS_PER_SPLIT iterations.
    Measured (data/gluon-paged-sweep-h200.json): 8 splits fastest at B = 8, one at B = 64 and
    256 with 4,096 keys (512 and 2,048 programs)."""
    splits = 1
    while (batch * n_kv_heads * splits < PROGRAMS_PER_SM * num_sms and splits < MAX_SPLITS
           and keys >= 2 * splits * MIN_ITERATIONS_PER_SPLIT * ITERATION):
        splits *= 2
    return splits


def _pool_arg(pool: torch.Tensor) -> TmaArg:
    """A pool (num_blocks, 16, Hkv, d) as rows of Hkv d bytes; a box is one block's 16 slots of
    one head's d columns."""
    num_blocks, bs, hkv, d = pool.shape
    box = [bs, d]
    return TmaArg(pool, [num_blocks * bs, hkv * d], [hkv * d, 1], box,
                  gl.NVMMASharedLayout.get_default_for(box, gl.float8e4nv))


def _scale_arg(scale: torch.Tensor) -> TmaArg:
    """Scales (num_blocks, 16, Hkv), head-major in a block, as rows of 16 floats, one a block and
    kv head; a box is one row (64 bytes: no swizzle)."""
    num_blocks, bs, hkv = scale.shape
    return TmaArg(scale, [num_blocks * hkv, bs], [bs, 1], [1, bs],
                  gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2))


def launch_args(q, k_pool, v_pool, block_tables, context_lens, o_dst, lse_dst, error_flags,
                k_scale, v_scale, *, qk_scale, window, split_len, num_splits, capacity,
                strides_o, strides_lse, store_lse, flags) -> tuple:
    """The kernel's launch, (kernel, grid, args, meta) for kernels.launch or kernels.Prepared,
    its tensors in the order `paged_decode`'s plans pass them. strides_o, strides_lse: (O_u,
    lse_u)'s (B, Hq, split, d) and (B, Hq, split) strides; flags: (ERR_BAD_ENTRY,
    ERR_BAD_LENGTH)."""
    b, hq, d = q.shape
    num_blocks, bs, hkv, _ = k_pool.shape
    args = (q, _pool_arg(k_pool), _pool_arg(v_pool), block_tables, context_lens, o_dst, lse_dst,
            error_flags, _scale_arg(k_scale), _scale_arg(v_scale),
            qk_scale, window or 0, split_len, hkv, hq // hkv, num_blocks, capacity,
            *q.stride(), *block_tables.stride(), context_lens.stride(0),
            error_flags.stride(0) if error_flags is not None else 0,
            *strides_o, *strides_lse)
    meta = dict(D=d, BS=bs, BLOCK_G=BLOCK_G, STAGES=STAGES, WINDOWED=window is not None,
                HAS_ERR=error_flags is not None, STORE_LSE=store_lse,
                Q_BF16=q.dtype == torch.bfloat16, BAD_ENTRY=flags[0],
                BAD_LENGTH=flags[1], num_warps=1)
    return _paged_decode_fp8_hopper, (b * hkv, num_splits), args, meta
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-hopper16-loop>>[init]
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
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-hopper16-kernel>>[init]
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
            o_rows = (o_ptr + b64 * stride_ob + heads_m[:, None] * stride_oh
                      + cols_m[None, :] * stride_od)
            lse_rows = lse_ptr + b64 * stride_lb + heads_m * stride_lh
            # Theory 01's merge: o = sum_u e^(lse_u - m) o_u / sum_u e^(lse_u - m), m = max lse_u.
            # A loop, not unrolled: unrolled, every split's tile is live at once and spills (at 8
            # splits 57 us against 50 at MQA, data/h16-variants-h200.json)
            m = gl.full([BLOCK_G], float("-inf"), gl.float32, gl.SliceLayout(1, MERGE))
            for u in range(SPLITS):
                m = gl.maximum(m, gl.load(lse_rows + u * stride_ls, mask=m_ok,
                                          other=float("-inf")))
            m_use = gl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0
            den = gl.zeros([BLOCK_G], gl.float32, gl.SliceLayout(1, MERGE))
            tot = gl.zeros([BLOCK_G, D], gl.float32, MERGE)
            for u in range(SPLITS):
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
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-hopper16-dispatch>>[init]
ITERATION16 = 2 * BLOCK_SIZE  # keys an iteration of the 16-bit kernel: two blocks, one tile
BLOCK_G16 = 32  # query rows a program: two warps of 16
STAGES16 = 2  # iterations in flight
PROGRAMS_PER_SM16 = 2  # two-warp programs: split while the grid stays within two an SM
MAX_SPLITS16 = 16  # the split count is a constexpr (a kernel of its own): few of them
MIN_ITERATIONS_PER_SPLIT16 = 8
# Programs before any split (B Hkv chunks) below which the Triton kernel is faster: its many short
# splits fill the GPU where this kernel's two-warp programs cannot (MQA, 4,096 keys: 15.2 against
# 21.8 us at B = 8, 17.4 against 22.0 at B = 16, 31.0 against 29.7 at B = 32;
# data/h16-splits-h200.json)
MIN_PROGRAMS16 = 32


def fits16(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> bool:
    """Whether `paged_decode`'s fast path on these (checked) 16-bit pools takes the 16-bit
    kernel: a Hopper GPU, q and the pools float16 or bfloat16, d 64 or 128, blocks of 16, a
    group of more than 16 query heads (smaller groups stay on the Triton kernel) and at least
    MIN_PROGRAMS16 programs before splitting, contiguous pools, 16-byte aligned as the TMA
    needs."""
    if INTERPRET or not q.is_cuda or capability(q.device)[0] != 9:
        return False
    num_blocks, bs, hkv, d = k_pool.shape
    group = q.shape[1] // hkv
    return (q.dtype in (torch.float16, torch.bfloat16) and d in HEAD_DIMS and bs == BLOCK_SIZE
            and group > 16 and q.shape[0] * hkv * chunks16(group) >= MIN_PROGRAMS16
            and k_pool.is_contiguous() and v_pool.is_contiguous()
            # TMA coordinates are int32, one block past the pool included
            and (num_blocks + 1) * bs * max(hkv, 1) < 2**31
            and all(t.data_ptr() % 16 == 0 for t in (k_pool, v_pool)))


def chunks16(group: int) -> int:
    """Programs a (sequence, kv head) of `group` query heads takes: one per BLOCK_G16 heads."""
    return -(-group // BLOCK_G16)


def splits16(batch: int, n_kv_heads: int, group: int, keys: int, num_sms: int) -> int:
    """Splits of each context: the largest power of two that keeps the grid within
    PROGRAMS_PER_SM16 programs an SM, at most MAX_SPLITS16, none shorter than
    MIN_ITERATIONS_PER_SPLIT16 iterations: 4 at B = 64, one kv head of 32 query heads, on the
    H200's 132 SMs (256 programs; the MQA probe's fastest, data/gluon-mqa5-h200.json)."""
    programs = batch * n_kv_heads * chunks16(group)
    splits = 1
    while (2 * programs * splits <= PROGRAMS_PER_SM16 * num_sms and splits < MAX_SPLITS16
           and keys >= 2 * splits * MIN_ITERATIONS_PER_SPLIT16 * ITERATION16):
        splits *= 2
    return splits


def _pool_arg16(pool: torch.Tensor) -> TmaArg:
    """A 16-bit pool (num_blocks, 16, Hkv, d) as rows of Hkv d elements; a box is one block's 16
    slots of one head's d columns (128-byte swizzled rows)."""
    num_blocks, bs, hkv, d = pool.shape
    box = [bs, d]
    dtype = gl.float16 if pool.dtype == torch.float16 else gl.bfloat16
    return TmaArg(pool, [num_blocks * bs, hkv * d], [hkv * d, 1], box,
                  gl.NVMMASharedLayout.get_default_for(box, dtype))


def launch_args16(q, k_pool, v_pool, block_tables, context_lens, o_dst, lse_dst, error_flags,
                  o, lse, counts, *, qk_scale, window, split_len, num_splits, capacity,
                  strides_o, strides_lse, store_lse, with_lse, flags) -> tuple:
    """The 16-bit kernel's launch, (kernel, grid, args, meta), its tensors in the order
    `paged_decode`'s plans pass them. Split (num_splits > 1): o_dst, lse_dst the partials
    (strides_o, strides_lse as for launch_args), o, lse the final (O, lse) (lse may stand in,
    never stored, where with_lse is False) and counts the B Hkv chunks16 counters at zero;
    unsplit, o_dst and lse_dst are the final ones and o, lse, counts None."""
    b, hq, d = q.shape
    num_blocks, bs, hkv, _ = k_pool.shape
    split = num_splits > 1
    so_out = o.stride() if split else (0, 0, 0)
    sl_out = lse.stride()[:2] if split and with_lse else (0, 0)
    args = (q, _pool_arg16(k_pool), _pool_arg16(v_pool), block_tables, context_lens, o_dst,
            lse_dst, error_flags, *((o, lse, counts) if split else (None, None, None)),
            qk_scale, window or 0, split_len, hkv, hq // hkv, num_blocks, capacity,
            *q.stride(), *block_tables.stride(), context_lens.stride(0),
            error_flags.stride(0) if error_flags is not None else 0,
            *strides_o, *strides_lse, *so_out, *sl_out)
    meta = dict(D=d, BS=bs, BLOCK_G=BLOCK_G16, STAGES=STAGES16, SPLITS=num_splits,
                WINDOWED=window is not None, HAS_ERR=error_flags is not None,
                STORE_LSE=store_lse, LSE=with_lse, BAD_ENTRY=flags[0], BAD_LENGTH=flags[1],
                num_warps=BLOCK_G16 // 16)
    return _paged_decode_hopper16, (b * hkv * chunks16(hq // hkv), num_splits), args, meta
# ~/~ end
# ~/~ end

"""Issue 27 study, the step after scratch/tma_decode.py: its TMA decode loop under the whole
contract of `paged_decode`'s fast path. Timed on the H200 (data/tma-paged-h200.json, then with one
pass over acc an iteration data/tma-paged-acc-h200.json: 174.3 us, 74% of copy, short of issue
27's bars). Not shipped; nothing imports it but its own checks.

What scratch/tma_decode.py left out, and how this kernel does it:
- Any context length, and windows. A split runs whole iterations of four blocks (64 keys at
  blocks of 16). An iteration that is not wholly inside [lo, end) (the first one of a window, the
  last one of a context) is masked key by key, its V rows too: slots past a context hold
  whatever the pool held, NaN included, and 0 * NaN is NaN in the tensor cores. The iterations
  between are masked per block only (a bad table entry), with no per-element V mask.
- Bad table entries (outside [0, num_blocks)) are never followed: the copy gets a coordinate
  past the pool, which TMA (and the interpreter) fill with zeros; the block's scores are masked
  and the sequence flagged ERR_BAD_ENTRY. A table entry is read only for a column that holds a
  key before the split's end, so never past the sequence's own row. A length outside
  [0, capacity] is flagged ERR_BAD_LENGTH and cut to the row, as the shipped kernel does.
- Splits write (O_u, lse_u) into the shipped workspace layout and `_merge_splits` (the shipped
  merge kernel) merges them; one split writes O and lse itself.
- Groups of more than BLOCK_G query heads are cut into chunks, one program each.

Limits of the probe: the pools must be contiguous (num_blocks, block_size, Hkv, d) with d a power
of two in [16, 256] and Hkv * d * element size a multiple of 16 bytes (TMA's row stride); q is
float16; no fold of the merge; no longest-first order.

    TRITON_INTERPRET=1 PYTHONPATH=src:scratch:. .venv/bin/python scratch/tma_paged.py --check
    env -u TRITON_INTERPRET PYTHONPATH=src:scratch:. .venv/bin/python scratch/tma_paged.py --compile
    PYTHONPATH=src:scratch:. python scratch/tma_paged.py --time --out $OUT/tma-paged-h200.json
"""

import argparse
from pathlib import Path

import torch
import triton
import triton.language as tl
from tma_decode import descriptor

from minimodel import paged_attention as pa
from minimodel.kernels import cdiv, num_sms

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
BAD_ENTRY = tl.constexpr(pa.ERR_BAD_ENTRY)
BAD_LENGTH = tl.constexpr(pa.ERR_BAD_LENGTH)
BLOCKS = tl.constexpr(4)  # blocks an iteration


@triton.jit
def _entry(row, col, lo, end, stride_tc, num_blocks, BS: tl.constexpr):
    """Block column col of a sequence's row: (its physical block, whether it is followed,
    whether it was read). The entry is read only if the column holds a key of [lo, end) (so
    inside the row, and never before a window, where the caller may leave -1)."""
    read = (col * BS < end) & (col * BS + BS > lo)
    phys = tl.load(row + col * stride_tc, mask=read, other=-1)
    return phys, read & (phys >= 0) & (phys < num_blocks), read


@triton.jit
def _entries(row, c, lo, end, stride_tc, num_blocks, BS: tl.constexpr):
    """Columns c to c + 3: their blocks, whether each is followed, and how many were read but
    refused (an entry outside the pool whose block holds keys of [lo, end): a flag)."""
    p0, ok0, r0 = _entry(row, c, lo, end, stride_tc, num_blocks, BS)
    p1, ok1, r1 = _entry(row, c + 1, lo, end, stride_tc, num_blocks, BS)
    p2, ok2, r2 = _entry(row, c + 2, lo, end, stride_tc, num_blocks, BS)
    p3, ok3, r3 = _entry(row, c + 3, lo, end, stride_tc, num_blocks, BS)
    bad = ((r0 & ~ok0).to(tl.int32) + (r1 & ~ok1).to(tl.int32)
           + (r2 & ~ok2).to(tl.int32) + (r3 & ~ok3).to(tl.int32))
    return p0, p1, p2, p3, ok0, ok1, ok2, ok3, bad


@triton.jit
def _block_scales(s_ptr, phys, ok, seen, stride_sblk, stride_sslot, BS: tl.constexpr):
    """An 8-bit block's K or V scales (of this kv head), 0 for a key not seen; a refused
    entry's address is block 0's, never loaded."""
    safe = tl.where(ok, phys, 0).to(tl.int64)
    return tl.load(s_ptr + safe * stride_sblk + tl.arange(0, BS) * stride_sslot, mask=seen,
                   other=0.0)


@triton.jit
def _block_scores(q, k_desc, ks_ptr, phys, ok, col, lo, end, h, num_blocks, qk_scale,
                  stride_ksblk, stride_ksslot, D: tl.constexpr, BS: tl.constexpr,
                  FP8: tl.constexpr, MASKED: tl.constexpr):
    """One block's scores (log2 units), -inf where a key is not seen, and what is seen: a key
    mask (MASKED) or the block's one flag (a block wholly inside [lo, end))."""
    if MASKED:
        j = col * BS + tl.arange(0, BS)
        seen = (j >= lo) & (j < end) & ok
    else:
        seen = ok
    # a refused entry's copy starts past the pool: TMA fills it with zeros, nothing is read
    k = k_desc.load([tl.where(ok, phys, num_blocks) * BS, h * D])
    s = tl.dot(q, tl.trans(k.to(tl.float16)))
    if FP8:  # key j's scale on its column of scores
        s = s * _block_scales(ks_ptr, phys, ok, seen, stride_ksblk, stride_ksslot, BS)[None, :]
    if MASKED:
        s = tl.where(seen[None, :], s * qk_scale, float("-inf"))
    else:
        s = tl.where(seen, s * qk_scale, float("-inf"))
    return s, seen


@triton.jit
def _block_pv(acc, p, w, v_desc, phys, ok, seen, h, num_blocks, D: tl.constexpr,
              BS: tl.constexpr, FP8: tl.constexpr, MASKED: tl.constexpr):
    """acc + P~ V for one block; for an 8-bit pool acc + P~ diag(w) V^, w its scales over the
    iteration's largest."""
    v = v_desc.load([tl.where(ok, phys, num_blocks) * BS, h * D]).to(tl.float16)
    if MASKED:  # a slot outside [lo, end) may hold NaN: its row must be zero, not just unweighted
        v = tl.where(seen[:, None], v, 0.0)
    if FP8:
        p = p * w[None, :]
    return tl.dot(p.to(tl.float16), v, acc)


@triton.jit
def _iteration(acc, m_i, l_i, s_acc, q, k_desc, v_desc, ks_ptr, vs_ptr, p0, p1, p2, p3, ok0, ok1, ok2,
               ok3, i, lo, end, h, num_blocks, qk_scale, stride_ksblk, stride_ksslot,
               stride_vsblk, stride_vsslot, D: tl.constexpr, BS: tl.constexpr,
               FP8: tl.constexpr, MASKED: tl.constexpr):
    """Keys [i, i + 4 BS) in blocks p0..p3: one softmax update and one rescale of acc for the
    four. For an 8-bit pool acc is kept in units of s_acc, the largest V scale of the iteration
    that last rescaled it (1 for a 16-bit pool)."""
    c = i // BS
    s0, e0 = _block_scores(q, k_desc, ks_ptr, p0, ok0, c, lo, end, h, num_blocks, qk_scale,
                           stride_ksblk, stride_ksslot, D, BS, FP8, MASKED)
    s1, e1 = _block_scores(q, k_desc, ks_ptr, p1, ok1, c + 1, lo, end, h, num_blocks, qk_scale,
                           stride_ksblk, stride_ksslot, D, BS, FP8, MASKED)
    s2, e2 = _block_scores(q, k_desc, ks_ptr, p2, ok2, c + 2, lo, end, h, num_blocks, qk_scale,
                           stride_ksblk, stride_ksslot, D, BS, FP8, MASKED)
    s3, e3 = _block_scores(q, k_desc, ks_ptr, p3, ok3, c + 3, lo, end, h, num_blocks, qk_scale,
                           stride_ksblk, stride_ksslot, D, BS, FP8, MASKED)
    m_new = tl.maximum(tl.maximum(tl.maximum(m_i, tl.max(s0, 1)), tl.max(s1, 1)),
                       tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: nothing to scale
    alpha = tl.math.exp2(m_i - m_use)
    s0 = tl.math.exp2(s0 - m_use[:, None])
    s1 = tl.math.exp2(s1 - m_use[:, None])
    s2 = tl.math.exp2(s2 - m_use[:, None])
    s3 = tl.math.exp2(s3 - m_use[:, None])
    l_i = l_i * alpha + (tl.sum(s0, 1) + tl.sum(s1, 1)) + (tl.sum(s2, 1) + tl.sum(s3, 1))
    if FP8:  # acc += P~ diag(s) V^ = s_max (P~ diag(s / s_max) V^): P~_hj s_j / s_max in [0, 1],
        # where P~_hj s_j itself can fall below float16's normal range; acc moves from units of
        # s_acc to units of s_max in the rescale that alpha needs anyway (one pass over acc)
        w0 = _block_scales(vs_ptr, p0, ok0, e0, stride_vsblk, stride_vsslot, BS)
        w1 = _block_scales(vs_ptr, p1, ok1, e1, stride_vsblk, stride_vsslot, BS)
        w2 = _block_scales(vs_ptr, p2, ok2, e2, stride_vsblk, stride_vsslot, BS)
        w3 = _block_scales(vs_ptr, p3, ok3, e3, stride_vsblk, stride_vsslot, BS)
        s_max = tl.maximum(tl.maximum(tl.max(w0, 0), tl.max(w1, 0)),
                           tl.maximum(tl.max(w2, 0), tl.max(w3, 0)))
        s_max = tl.where(s_max > 0.0, s_max, 1.0)  # no key seen: every scale is 0
        r = 1.0 / s_max
        acc = acc * (alpha * (s_acc * r))[:, None]
        w0, w1, w2, w3 = w0 * r, w1 * r, w2 * r, w3 * r
        s_acc = s_max
    else:
        acc = acc * alpha[:, None]
        w0 = alpha  # not read without FP8
        w1 = alpha
        w2 = alpha
        w3 = alpha
    acc = _block_pv(acc, s0, w0, v_desc, p0, ok0, e0, h, num_blocks, D, BS, FP8, MASKED)
    acc = _block_pv(acc, s1, w1, v_desc, p1, ok1, e1, h, num_blocks, D, BS, FP8, MASKED)
    acc = _block_pv(acc, s2, w2, v_desc, p2, ok2, e2, h, num_blocks, D, BS, FP8, MASKED)
    acc = _block_pv(acc, s3, w3, v_desc, p3, ok3, e3, h, num_blocks, D, BS, FP8, MASKED)
    return acc, m_new, l_i, s_acc


@triton.jit(do_not_specialize=["window", "split_len", "n_kv_heads", "group", "num_blocks",
                               "capacity"])
def _tma_paged_decode(
    q_ptr, k_desc, v_desc, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr, ks_ptr, vs_ptr,
    qk_scale, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_lb, stride_lh, stride_ls,
    stride_ksblk, stride_ksslot, stride_ksh, stride_vsblk, stride_vsslot, stride_vsh,
    D: tl.constexpr, BS: tl.constexpr, BLOCK_G: tl.constexpr, FP8: tl.constexpr,
    WINDOWED: tl.constexpr, HAS_ERR: tl.constexpr, STAGES: tl.constexpr,
):
    chunks = (group + BLOCK_G - 1) // BLOCK_G
    off_bh = tl.program_id(0) // chunks
    chunk = tl.program_id(0) % chunks
    split = tl.program_id(1)
    b64 = (off_bh // n_kv_heads).to(tl.int64)
    h = off_bh % n_kv_heads
    ctx = tl.load(lens_ptr + b64 * stride_len)
    bad_len = (ctx < 0) | (ctx > capacity)  # flagged, and cut to the sequence's own row
    ctx = tl.minimum(tl.maximum(ctx, 0), capacity)
    lo = 0
    if WINDOWED:
        lo = tl.maximum(ctx - window, 0)
    it = BLOCKS * BS
    start = lo // it * it + split * split_len
    end = tl.where(split == tl.num_programs(1) - 1, ctx, tl.minimum(start + split_len, ctx))

    offs_g = chunk * BLOCK_G + tl.arange(0, BLOCK_G)
    g_ok = offs_g < group
    heads = h.to(tl.int64) * group + offs_g
    cols = tl.arange(0, D)
    q = tl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + cols[None, :],
                mask=g_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    s_acc = qk_scale * 0.0 + 1.0  # acc's unit (an fp32 scalar; see _iteration)
    n_bad = ctx * 0  # entries refused (an int32 scalar)
    row = table_ptr + b64 * stride_tb
    ks_head = ks_ptr + h * stride_ksh
    vs_head = vs_ptr + h * stride_vsh
    # [start, end) = a masked first iteration (a window's lo inside it), whole iterations, and
    # a masked last one (a context that ends inside it)
    i0 = start
    if (start < lo) & (start < end):
        p0, p1, p2, p3, ok0, ok1, ok2, ok3, bad = _entries(row, start // BS, lo, end, stride_tc,
                                                           num_blocks, BS)
        n_bad += bad
        acc, m_i, l_i, s_acc = _iteration(
            acc, m_i, l_i, s_acc, q, k_desc, v_desc, ks_head, vs_head, p0, p1, p2, p3, ok0, ok1, ok2,
            ok3, start, lo, end, h, num_blocks, qk_scale, stride_ksblk, stride_ksslot,
            stride_vsblk, stride_vsslot, D, BS, FP8, True)
        i0 = start + it
    i1 = i0 + tl.maximum(end - i0, 0) // it * it
    # the whole iterations read their table entries one iteration ahead (carried by the loop),
    # so that no copy's coordinates wait on a load of its own iteration
    n0, n1, n2, n3, nok0, nok1, nok2, nok3, nbad = _entries(row, i0 // BS, lo, end, stride_tc,
                                                            num_blocks, BS)
    for i in tl.range(i0, i1, it, num_stages=STAGES):
        p0, p1, p2, p3, ok0, ok1, ok2, ok3 = n0, n1, n2, n3, nok0, nok1, nok2, nok3
        n_bad += nbad
        nxt = tl.minimum(i + it, i1 - it)  # the last iteration reads its own entries again
        n0, n1, n2, n3, nok0, nok1, nok2, nok3, nbad = _entries(row, nxt // BS, lo, end,
                                                                stride_tc, num_blocks, BS)
        acc, m_i, l_i, s_acc = _iteration(
            acc, m_i, l_i, s_acc, q, k_desc, v_desc, ks_head, vs_head, p0, p1, p2, p3, ok0, ok1, ok2,
            ok3, i, lo, end, h, num_blocks, qk_scale, stride_ksblk, stride_ksslot,
            stride_vsblk, stride_vsslot, D, BS, FP8, False)
    if i1 < end:
        p0, p1, p2, p3, ok0, ok1, ok2, ok3, bad = _entries(row, i1 // BS, lo, end, stride_tc,
                                                           num_blocks, BS)
        n_bad += bad
        acc, m_i, l_i, s_acc = _iteration(
            acc, m_i, l_i, s_acc, q, k_desc, v_desc, ks_head, vs_head, p0, p1, p2, p3, ok0, ok1, ok2,
            ok3, i1, lo, end, h, num_blocks, qk_scale, stride_ksblk, stride_ksslot,
            stride_vsblk, stride_vsslot, D, BS, FP8, True)

    empty = l_i == 0.0  # no key in this split: O = 0, lse = -inf
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (s_acc / l_safe)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    split64 = split.to(tl.int64)
    tl.store(o_ptr + b64 * stride_ob + heads[:, None] * stride_oh + split64 * stride_os
             + cols[None, :], out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])
    tl.store(lse_ptr + b64 * stride_lb + heads * stride_lh + split64 * stride_ls, lse, mask=g_ok)
    if HAS_ERR:
        tl.atomic_or(err_ptr + b64 * stride_err, BAD_ENTRY, mask=n_bad > 0)
        tl.atomic_or(err_ptr + b64 * stride_err, BAD_LENGTH, mask=bad_len)


def tma_paged_decode(q, k_pool, v_pool, block_tables, context_lens, *, max_context_len,
                     num_splits=None, window=None, k_scale=None, v_scale=None, error_flags=None,
                     warps=1, stages=2):
    """paged_decode's fast path with this kernel: (O (B, Hq, d) in q's dtype, lse (B, Hq))."""
    grid, args, meta, out = launch_args(
        q, k_pool, v_pool, block_tables, context_lens, max_context_len=max_context_len,
        num_splits=num_splits, window=window, k_scale=k_scale, v_scale=v_scale,
        error_flags=error_flags, warps=warps, stages=stages)
    _tma_paged_decode[grid](*args, **meta)
    o, lse, o_dst, lse_dst = out
    b, hq, d = q.shape
    num_splits = grid[1]
    if num_splits > 1:
        pa._merge_splits[(b * hq,)](
            o_dst, lse_dst, o, lse, num_splits, hq, *o_dst.stride(), *lse_dst.stride(),
            *o.stride()[:2], o.stride(2), *lse.stride(),
            D=d, HEAD_DIM=d, BLOCK_S=pa.MERGE_BLOCK_S, LSE=True, num_warps=4,
        )
    return o, lse


def launch_args(q, k_pool, v_pool, block_tables, context_lens, *, max_context_len, num_splits,
                window, k_scale, v_scale, error_flags, warps, stages):
    """The decode launch's (grid, args, meta) and (O, lse, O_u, lse_u)."""
    b, hq, d = q.shape
    num_blocks, bs, hkv, dk = k_pool.shape
    assert q.dtype == torch.float16 and q.is_contiguous()
    assert dk == d and d & (d - 1) == 0 and 16 <= d <= 256
    assert k_pool.is_contiguous() and v_pool.is_contiguous() and k_pool.shape == v_pool.shape
    assert (hkv * d * k_pool.element_size()) % 16 == 0 and bs >= 8
    fp8 = k_pool.dtype == pa.FP8_DTYPE
    assert fp8 == (k_scale is not None) == (v_scale is not None)
    capacity = block_tables.shape[1] * bs
    block_g, chunks = pa.group_rows(hq // hkv)
    it = BLOCKS.value * bs  # keys an iteration
    keys = max_context_len if window is None else min(max_context_len, window + it - 1)
    if num_splits is None:
        num_splits = pa.choose_num_splits(b, hkv, keys, it, num_sms(q.device), chunks)
    split_len = cdiv(cdiv(max(keys, 1), num_splits), it) * it
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, hq, dtype=torch.float32, device=q.device)
    if num_splits == 1:
        o_dst, lse_dst = o.view(b, hq, 1, d), lse.view(b, hq, 1)
    else:
        o_dst = torch.empty(b, hq, num_splits, d, dtype=torch.float32, device=q.device)
        lse_dst = torch.empty(b, hq, num_splits, dtype=torch.float32, device=q.device)
    ks = k_scale if fp8 else q
    vs = v_scale if fp8 else q
    sks = k_scale.stride() if fp8 else (0, 0, 0)
    svs = v_scale.stride() if fp8 else (0, 0, 0)
    args = (
        q, descriptor(k_pool), descriptor(v_pool), block_tables, context_lens, o_dst, lse_dst,
        error_flags, ks, vs,
        d**-0.5 * LOG2E.value, window or 0, split_len, hkv, hq // hkv, num_blocks,
        min(capacity, 2**31 - 1),
        q.stride(0), q.stride(1), *block_tables.stride(), context_lens.stride(0),
        error_flags.stride(0) if error_flags is not None else 0,
        o_dst.stride(0), o_dst.stride(1), o_dst.stride(2), *lse_dst.stride(), *sks, *svs,
    )
    meta = dict(D=d, BS=bs, BLOCK_G=block_g, FP8=fp8, WINDOWED=window is not None,
                HAS_ERR=error_flags is not None, STAGES=stages, num_warps=warps,
                num_stages=stages)
    return (b * hkv * chunks, num_splits), args, meta, (o, lse, o_dst, lse_dst)


def first_loop(lines):
    """The SASS of the whole iterations' loop: the first backward branch, in program order,
    whose body holds MMAs. (fp8_sass.main_loop takes the body with the most MMAs, which here is
    a reconvergence jump's span over the loop and both masked iterations.)"""
    import re

    where = {lab: i for i, (*_, lab) in enumerate(lines) if lab}
    for i, (_, _, text, *_) in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", text)
        if m and where.get(m.group(1), i + 1) <= i:
            body = lines[where[m.group(1)] : i + 1]
            if any(op.startswith("HMMA") for _, op, *_ in body):
                return body
    return []


def compile_report():
    """Compiled for sm_90 without a GPU (scratch/fp8_sass.py's way), at bench.fp8_decode's shape:
    registers, spills, shared memory and the main loop's warp instructions a key."""
    import fp8_sass as fs

    b, hq, hkv, d, bs, n = 64, 32, 8, 128, 16, 4096
    nb = 64
    q = torch.zeros(b, hq, d, dtype=torch.float16)
    table = torch.zeros(b, n // bs, dtype=torch.int32)
    lens = torch.full((b,), n, dtype=torch.int32)
    for fp8 in (True, False):
        dt = pa.FP8_DTYPE if fp8 else torch.float16
        pools = [torch.zeros(nb, bs, hkv, d, dtype=torch.float16).to(dt) for _ in "kv"]
        # scales head-major in a block, as KernelPagedKVCache and bench.fp8_decode store them
        sc = {name: torch.ones(nb, hkv, bs).transpose(1, 2) if fp8 else None
              for name in ("k_scale", "v_scale")}
        for stages in (2, 3):
            grid, args, meta, _ = launch_args(
                q, *pools, table, lens, max_context_len=n, num_splits=2, window=None,
                error_flags=None, warps=1, stages=stages, **sc)
            compiled, *_ = fs.compile_like_jit(_tma_paged_decode, args, meta)
            text, _, _ = fs.ptxas_v(compiled.asm["ptx"])
            loop = first_loop(fs.sass_lines(fs.sass(compiled.asm["cubin"])))
            per_key = meta["num_warps"] * len(loop) / (BLOCKS.value * bs)
            print(f"{'fp8' if fp8 else 'fp16'} stages={stages} warps=1: {text}; shared "
                  f"{compiled.metadata.shared} B; main loop {len(loop)} = {per_key:.1f} warp "
                  "instructions a key")


def check():
    """Under the interpreter: against the shipped paged_decode's fast path, 16- and 8-bit pools,
    ragged lengths (0, 1, block and iteration edges), windows, splits, NaN in every slot no
    sequence owns, bad table entries and a bad length (the flags and the other rows); then
    MQA-sized groups, whole and in chunks (check_groups)."""
    torch.manual_seed(0)
    d, bs, hkv, g = 32, 8, 2, 4
    lens = [0, 1, 7, 8, 9, 31, 32, 33, 64, 100]
    b, max_blocks = len(lens), 16
    num_blocks = b * max_blocks + 3
    q = torch.randn(b, hkv * g, d).half()
    perm = torch.randperm(num_blocks)[: b * max_blocks].view(b, max_blocks).to(torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    k16 = torch.full((num_blocks, bs, hkv, d), float("nan")).half()
    v16 = torch.full((num_blocks, bs, hkv, d), float("nan")).half()
    k8, v8 = (torch.full((num_blocks, bs, hkv, d), float("nan")).to(pa.FP8_DTYPE) for _ in "kv")
    ks, vs = (torch.full((num_blocks, bs, hkv), float("nan")) for _ in "kv")
    for r, n in enumerate(lens):  # each sequence's keys, written slot by slot
        for j in range(n):
            blk, slot = perm[r, j // bs].item(), j % bs
            kk, vv = torch.randn(hkv, d), torch.randn(hkv, d)
            k16[blk, slot], v16[blk, slot] = kk.half(), vv.half()
            (k8[blk, slot], ks[blk, slot]), (v8[blk, slot], vs[blk, slot]) = (
                pa.quantize_kv(kk), pa.quantize_kv(vv))
    cases = 0
    for fp8 in (False, True):
        pools = (k8, v8) if fp8 else (k16, v16)
        scales = {"k_scale": ks, "v_scale": vs} if fp8 else {}
        for window in (None, 1, 5, 40):
            for splits in (1, 2, 3):
                kw = dict(max_context_len=max(lens), num_splits=splits, window=window, **scales)
                want, want_lse = pa.paged_decode(q, *pools, perm, lens_t, return_lse=True, **kw)
                got, got_lse = tma_paged_decode(q, *pools, perm, lens_t, **kw)
                assert torch.isfinite(got).all(), (fp8, window, splits)
                err = (got.float() - want.float()).abs().max().item()
                assert err < 2e-3, (fp8, window, splits, err)
                assert torch.equal(got_lse.isinf(), want_lse.isinf())
                fin = want_lse.isfinite()
                assert (got_lse[fin] - want_lse[fin]).abs().max() < 1e-3
                cases += 1
        # bad entries in rows 4 and 8 (one inside the context, one past the pool) and a length
        # past the row in row 6: flagged; every other row as before
        bad_table, bad_lens = perm.clone(), lens_t.clone()
        bad_table[4, 1], bad_table[8, 0] = -1, num_blocks
        bad_lens[6] = max_blocks * bs + 5
        for splits in (1, 2):
            flags = torch.zeros(b, dtype=torch.int32)
            got, _ = tma_paged_decode(q, *pools, bad_table, bad_lens, max_context_len=max(lens),
                                      num_splits=splits, error_flags=flags, **scales)
            want = pa.paged_decode(q, *pools, perm, lens_t, max_context_len=max(lens),
                                      num_splits=splits, **scales)
            assert flags.tolist() == [0, 0, 0, 0, 1, 0, 2, 0, 1, 0], flags.tolist()
            keep = [r for r in range(b) if r not in (4, 6, 8)]
            assert (got[keep].float() - want[keep].float()).abs().max() < 2e-3
            # row 6 reads its whole row, slots no key was written to (NaN here): its output is
            # not its attention, as paged_decode says of a flagged sequence
            assert torch.isfinite(got[[r for r in range(b) if r != 6]]).all()
            cases += 1
    cases += check_groups()
    print(f"tma_paged_decode agrees with paged_decode in {cases} cases (interpreter)")


def check_groups() -> int:
    """MQA-sized groups (one kv head, 32 query heads: a 32-row tile, or two chunks of 16 with
    G_max = 16) at blocks of 16 and d = 64, against paged_decode with the same G_max."""
    from unittest import mock

    torch.manual_seed(1)
    d, bs, hkv, g = 64, 16, 1, 32
    lens = [5, 64, 70, 129]
    b, max_blocks = len(lens), 9
    num_blocks = b * max_blocks
    q = torch.randn(b, hkv * g, d).half()
    perm = torch.randperm(num_blocks).view(b, max_blocks).to(torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    k, v = (torch.randn(num_blocks, bs, hkv, d) for _ in "kv")
    (k8, ks), (v8, vs) = pa.quantize_kv(k), pa.quantize_kv(v)
    cases = 0
    for g_max in (64, 16):
        with mock.patch.object(pa, "DECODE_MAX_GROUP_ROWS", g_max):
            for pools, scales in (((k.half(), v.half()), {}),
                                  ((k8, v8), {"k_scale": ks, "v_scale": vs})):
                for window, splits in ((None, 1), (None, 2), (20, 2)):
                    kw = dict(max_context_len=max(lens), num_splits=splits, window=window,
                              **scales)
                    want = pa.paged_decode(q, *pools, perm, lens_t, **kw)
                    got, _ = tma_paged_decode(q, *pools, perm, lens_t, **kw)
                    err = (got.float() - want.float()).abs().max().item()
                    assert err < 2e-3, (g_max, window, splits, err)
                    cases += 1
    return cases


def time_it(out_path):
    """On the H200, at bench.fp8_decode's shape: this kernel against the shipped paged_decode,
    8-bit and 16-bit pools, graph replays in turns, each output checked first."""
    from bench import core
    from bench.fp8_decode import N, cache

    c = cache()
    s8 = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    fns = {
        "shipped_fp8": lambda: pa.paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t,
                                               max_context_len=N, **s8),
        "shipped_fp16": lambda: pa.paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t,
                                                max_context_len=N),
    }
    for sp in (None, 1, 2, 4):
        for st in (2, 3):
            fns[f"tma_fp8_split{sp or 'auto'}_s{st}"] = lambda sp=sp, st=st: tma_paged_decode(
                c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, max_context_len=N, num_splits=sp,
                stages=st, **s8)[0]
    records = {}
    for name, fn in fns.items():
        base = fns["shipped_fp8" if "fp8" in name else "shipped_fp16"]()
        diff = (fn().float() - base.float()).abs().max().item()
        print(f"{name}: max diff vs shipped {diff:.2e}", flush=True)
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    core.in_turns(records, fns, 3, must_capture=True)  # graph_ms: the median of the rounds
    copy = core.copy_rate()
    core.save(Path(out_path), {"environment": core.environment(), "copy_bytes_per_s": copy,
                               "records": list(records.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", default="tma-paged.json")
    a = ap.parse_args()
    if a.compile:
        compile_report()
    if a.check:
        check()
    if a.time:
        time_it(a.out)

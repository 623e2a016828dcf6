"""Issue 23 probe: variants of the shipped 16-bit Hopper decode (paged_attention_hopper) at MQA:
NB blocks an iteration (2 shipped, 4), FUSE (the scores' scale folded into exp2's argument, one FFMA),
MRUN (the merge a runtime loop over the splits instead of unrolled). Timed with and without the
counters' zero-fill in the graph.

    PYTHONPATH=src:. python scratch/h16_variants.py --out $OUT/h16-variants-h200.json
"""

import argparse
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from minimodel.kernels import LN2
from minimodel.paged_attention_hopper import _entries, _entry


@gluon.jit
def _ent(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS: gl.constexpr, NB: gl.constexpr):
    if NB == 4:
        return _entries(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS)
    else:
        c = (start + it * 2 * BS) // BS
        e_end = gl.where(it < n_it, end, 0)
        b0, ok0, bad0 = _entry(row, c, lo, e_end, stride_tc, num_blocks, BS)
        b1, ok1, bad1 = _entry(row, c + 1, lo, e_end, stride_tc, num_blocks, BS)
        return b0, b1, b0, b1, ok0, ok1, ok0, ok1, bad0.to(gl.int32) + bad1.to(gl.int32)


@gluon.jit
def _entries16(row, it, n_it, start, lo, end, stride_tc, num_blocks, BS: gl.constexpr):
    """Iteration it's two columns (none read past the split's iterations)."""
    c = (start + it * 2 * BS) // BS
    e_end = gl.where(it < n_it, end, 0)  # past the last iteration: nothing read
    b0, ok0, bad0 = _entry(row, c, lo, e_end, stride_tc, num_blocks, BS)
    b1, ok1, bad1 = _entry(row, c + 1, lo, e_end, stride_tc, num_blocks, BS)
    return b0, b1, ok0, ok1, bad0.to(gl.int32) + bad1.to(gl.int32)


@gluon.jit
def _issue16(k_desc, v_desc, k_smem, v_smem, bar, slot, e0, e1, e2, e3, h, pred,
             D: gl.constexpr, BS: gl.constexpr, NB: gl.constexpr):
    """One iteration's copies (K and V of two blocks) into ring slot `slot`, a tile of 2 BS
    keys each."""
    mbarrier.expect(bar, 2 * NB * k_desc.block_type.nbytes, pred=pred)
    if NB == 4:
        tma.async_copy_global_to_shared(k_desc, [e2 * BS, h * D], bar,
                                        k_smem.index(slot).slice(2 * BS, BS), pred)
        tma.async_copy_global_to_shared(k_desc, [e3 * BS, h * D], bar,
                                        k_smem.index(slot).slice(3 * BS, BS), pred)
        tma.async_copy_global_to_shared(v_desc, [e2 * BS, h * D], bar,
                                        v_smem.index(slot).slice(2 * BS, BS), pred)
        tma.async_copy_global_to_shared(v_desc, [e3 * BS, h * D], bar,
                                        v_smem.index(slot).slice(3 * BS, BS), pred)
    tma.async_copy_global_to_shared(k_desc, [e0 * BS, h * D], bar,
                                    k_smem.index(slot).slice(0, BS), pred)
    tma.async_copy_global_to_shared(k_desc, [e1 * BS, h * D], bar,
                                    k_smem.index(slot).slice(BS, BS), pred)
    tma.async_copy_global_to_shared(v_desc, [e0 * BS, h * D], bar,
                                    v_smem.index(slot).slice(0, BS), pred)
    tma.async_copy_global_to_shared(v_desc, [e1 * BS, h * D], bar,
                                    v_smem.index(slot).slice(BS, BS), pred)


@gluon.jit
def _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, ok2, ok3, key0, lo, end, qk_scale,
                 BLOCK_G: gl.constexpr, BS: gl.constexpr, MMA: gl.constexpr, A_OP: gl.constexpr,
                 B_OP: gl.constexpr, ROWS: gl.constexpr, MASKED: gl.constexpr,
                 NB: gl.constexpr, FUSE: gl.constexpr):
    """Keys [key0, key0 + 2 BS): one softmax update, K^T and V straight from their copies into
    the tensor cores' B layout (16-bit tiles: the matrix loads transpose). MASKED: key by key,
    V's rows no key owns zeroed (a slot past a context may hold NaN, 0 * NaN is NaN)."""
    s = mma_v2(q_a, k_tile.permute((1, 0)).load(B_OP),
               gl.zeros([BLOCK_G, NB * BS], gl.float32, MMA))
    if not FUSE:
        s = s * qk_scale
    if MASKED:
        c = gl.arange(0, NB * BS, layout=gl.SliceLayout(0, MMA))
        seen = (key0 + c >= lo) & (key0 + c < end) & gl.where(
            c < BS, ok0, gl.where(c < 2 * BS, ok1, gl.where(c < 3 * BS, ok2, ok3)))
        s = gl.where(seen[None, :], s, float("-inf"))
    if FUSE:
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1))
    m_use = m_new
    if MASKED:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
    alpha = gl.exp2(m_i - m_use)
    if FUSE:
        p = gl.exp2(s * qk_scale - m_use[:, None])
    else:
        p = gl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + gl.sum(p, 1)
    acc = acc * alpha[:, None]
    if MASKED:
        cv = gl.arange(0, NB * BS, layout=gl.SliceLayout(1, ROWS))
        seen_v = (key0 + cv >= lo) & (key0 + cv < end) & gl.where(
            cv < BS, ok0, gl.where(cv < 2 * BS, ok1, gl.where(cv < 3 * BS, ok2, ok3)))
        v = gl.where(seen_v[:, None], v_tile.load(ROWS), 0.0)
        v_op = gl.convert_layout(v, B_OP)
    else:
        v_op = v_tile.load(B_OP)
    acc = mma_v2(gl.convert_layout(p.to(v_tile.dtype), A_OP), v_op, acc)
    return acc, m_new, l_i


@gluon.jit(do_not_specialize=["window", "split_len", "n_kv_heads", "group", "num_blocks",
                              "capacity"])
def _variant(
    q_ptr, k_desc, v_desc, table_ptr, lens_ptr, o_ptr, lse_ptr, err_ptr, fo_ptr, flse_ptr,
    count_ptr, qk_scale, window, split_len, n_kv_heads, group, num_blocks, capacity,
    stride_qb, stride_qh, stride_qd, stride_tb, stride_tc, stride_len, stride_err,
    stride_ob, stride_oh, stride_os, stride_od, stride_lb, stride_lh, stride_ls,
    stride_fob, stride_foh, stride_fod, stride_flb, stride_flh,
    D: gl.constexpr, BS: gl.constexpr, BLOCK_G: gl.constexpr, STAGES: gl.constexpr,
    SPLITS: gl.constexpr, WINDOWED: gl.constexpr, HAS_ERR: gl.constexpr,
    STORE_LSE: gl.constexpr, LSE: gl.constexpr, BAD_ENTRY: gl.constexpr,
    BAD_LENGTH: gl.constexpr, NB: gl.constexpr, FUSE: gl.constexpr, MRUN: gl.constexpr,
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
    IT: gl.constexpr = NB * BS

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
        c0, c1, c2, c3, _, _, _, _, bad = _ent(row, s, n_it, start, lo, end, stride_tc, num_blocks, BS, NB)
        n_bad += bad
        _issue16(k_desc, v_desc, k_smem, v_smem, ready.index(s), s, c0, c1, c2, c3, h, s < n_it, D, BS, NB)
    r0, r1, r2, r3, _, _, _, _, rbad = _ent(row, STAGES, n_it, start, lo, end, stride_tc, num_blocks, BS, NB)
    _, _, _, _, ok0, ok1, ok2, ok3, _ = _ent(row, 0, n_it, start, lo, end, stride_tc, num_blocks, BS, NB)

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
        if (key0 < lo) | (key0 + IT > end) | ~(ok0 & ok1 & ok2 & ok3):
            acc, m_i, l_i = _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, ok2, ok3, key0, lo,
                                         end, qk_scale, BLOCK_G, BS, MMA, A_OP, B_OP, ROWS, True, NB, FUSE)
        else:
            acc, m_i, l_i = _iteration16(acc, m_i, l_i, q_a, k_tile, v_tile, ok0, ok1, ok2, ok3, key0, lo,
                                         end, qk_scale, BLOCK_G, BS, MMA, A_OP, B_OP, ROWS,
                                         False, NB, FUSE)
        gl.thread_barrier()  # every read of this slot is done: refill it
        nxt = it + STAGES
        n_bad += gl.where(nxt < n_it, rbad, 0)
        _issue16(k_desc, v_desc, k_smem, v_smem, ready.index(slot), slot, r0, r1, r2, r3, h, nxt < n_it,
                 D, BS, NB)
        r0, r1, r2, r3, _, _, _, _, rbad = _ent(row, nxt + 1, n_it, start, lo, end, stride_tc, num_blocks, BS, NB)
        _, _, _, _, ok0, ok1, ok2, ok3, _ = _ent(row, it + 1, n_it, start, lo, end, stride_tc, num_blocks, BS, NB)

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
            m = gl.full([BLOCK_G], float("-inf"), gl.float32, gl.SliceLayout(1, MERGE))
            for u in gl.static_range(SPLITS):
                m = gl.maximum(m, gl.load(lse_rows + u * stride_ls, mask=m_ok,
                                          other=float("-inf")))
            m_use = gl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0
            den = gl.zeros([BLOCK_G], gl.float32, gl.SliceLayout(1, MERGE))
            tot = gl.zeros([BLOCK_G, D], gl.float32, MERGE)
            if MRUN:
                for u in range(SPLITS):
                    w = gl.exp2((gl.load(lse_rows + u * stride_ls, mask=m_ok, other=float("-inf"))
                                 - m_use) * (1.0 / LN2))
                    tot += w[:, None] * gl.load(o_rows + u * stride_os, mask=m_ok[:, None], other=0.0)
                    den += w
            for u in gl.static_range(SPLITS if not MRUN else 0):
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


def main(out):
    from bench import core
    from minimodel import paged_attention_hopper as ph
    from minimodel.kernels import launch
    from minimodel.paged_attention import paged_decode

    b, n, hq, hkv, d = 64, 4096, 32, 1, 128
    q, k, v = core.qkv(b, hq, hkv, n, d)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [n] * b, 16)

    def call(splits, nb, fuse, mrun, kept):
        o = torch.empty_like(q)
        o_u, lse_u, counts = kept[splits] if kept else (
            torch.empty(b, hq, splits, d, device="cuda"), torch.empty(b, hq, splits, device="cuda"),
            torch.zeros(b * hkv, dtype=torch.int32, device="cuda"))
        _, grid, args, meta = ph.launch_args16(
            q, k_pool, v_pool, table, lens_t, o_u, lse_u, None, o, o, counts,
            qk_scale=d**-0.5 * 1.4426950408889634, window=None, split_len=n // splits,
            num_splits=splits, capacity=table.shape[1] * 16, strides_o=o_u.stride(),
            strides_lse=lse_u.stride(), store_lse=True, with_lse=False, flags=(1, 2))
        launch(_variant, grid, *args, **(meta | {"NB": nb, "FUSE": fuse, "MRUN": mrun}))
        return o

    kept = {s: (torch.empty(b, hq, s, d, device="cuda"), torch.empty(b, hq, s, device="cuda"),
                torch.zeros(b * hkv, dtype=torch.int32, device="cuda")) for s in (4, 8)}
    fns = {"shipped": lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=n),
           "cudnn": lambda: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0]}
    for splits in (4, 8):
        for nb in (2, 4):
            for fuse in (False, True):
                for mrun in (False, True):
                    for kp in ((False, True) if splits == 4 else (False,)):
                        name = f"split{splits}_nb{nb}" + "_fuse" * fuse + "_mrun" * mrun
                        name += "_kept" * kp
                        fns[name] = (lambda s=splits, nb=nb, f=fuse, m=mrun, kp=kp:
                                     call(s, nb, f, m, kept if kp else None))
    base = fns["cudnn"]().float()
    recs = {}
    for name, fn in list(fns.items()):
        try:
            diff = (fn().float() - base).abs().max().item()
        except Exception as e:  # noqa: BLE001 - a variant that does not build is data too
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            del fns[name]
            continue
        print(f"{name}: max diff vs cuDNN {diff:.2e}", flush=True)
        recs[name] = {"impl": name, "max_diff_vs_cudnn": diff}
        if diff > 1e-2:
            del fns[name]
    core.in_turns({k: recs[k] for k in fns}, fns, 3, must_capture=True)
    for r in sorted(recs.values(), key=lambda r: r.get("graph_ms", 1)):
        print(f"{r['impl']}: {r.get('graph_ms', float('nan')) * 1e3:.1f} us", flush=True)
    core.save(Path(out), {"environment": core.environment(), "records": list(recs.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h16-variants.json")
    main(ap.parse_args().out)

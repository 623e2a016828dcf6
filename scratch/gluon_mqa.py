"""Issue 23 study: scratch/gluon_decode.py's Gluon loop for the MQA shape, on the 16-bit cache
(B = 64, 4,096 keys, 32 query heads on one kv head, d = 128, blocks of 16): a 32-row query tile,
one warp per 16 rows, K^T and V loaded from their TMA copies straight into the tensor cores'
B layouts (16-bit data: the matrix loads transpose), q's fragments made once. A probe: every
context its whole table row, split in whole four-block iterations; the splits merged by the
shipped merge kernel. Gluon runs only on a GPU.

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch:. .venv/bin/python scratch/gluon_mqa.py --compile
    PYTHONPATH=src:scratch:. python scratch/gluon_mqa.py --time --out $OUT/gluon-mqa-h200.json

--chunks 2 puts a group's 32 heads in two one-warp programs of 16 rows, adjacent in the grid:
cuDNN's MQA decode runs a grid of (1, 2, 64), two programs a sequence of 16 rows each
(data/ncu-mqa-h200.txt), though with four warps a program.
"""

import argparse
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from minimodel import paged_attention as pa

LOG2E = 1.4426950408889634
LN2 = gl.constexpr(0.6931471805599453)
B, N, HQ, HKV, D, BS = 64, 4096, 32, 1, 128, 16


@gluon.jit
def _issue(k_desc, v_desc, k_smem, v_smem, bar, slot, row, it, h, pred, D: gl.constexpr,
           BS: gl.constexpr, NB: gl.constexpr):
    """Iteration it's copies (K and V of NB blocks) into ring slot `slot`."""
    mbarrier.expect(bar, 2 * NB * k_desc.block_type.nbytes, pred=pred)
    for j in gl.static_range(NB):
        e = gl.load(row + it * NB + j, mask=pred, other=0)
        tma.async_copy_global_to_shared(k_desc, [e * BS, h * D], bar,
                                        k_smem.index(slot).slice(j * BS, BS), pred)
        tma.async_copy_global_to_shared(v_desc, [e * BS, h * D], bar,
                                        v_smem.index(slot).slice(j * BS, BS), pred)


@gluon.jit
def _gluon_mqa(q_ptr, k_desc, v_desc, table_ptr, o_ptr, lse_ptr, count_ptr, out_ptr, n_kv_heads,
               group, iters, stride_tb, qk_scale, chunks, D: gl.constexpr, BS: gl.constexpr,
               BLOCK_G: gl.constexpr,
               STAGES: gl.constexpr, NB: gl.constexpr, WARPS: gl.constexpr,
               WARP_COLS: gl.constexpr, FUSED: gl.constexpr):
    # WARP_COLS warps side by side on the columns (S's keys, O's d), as cuDNN's 1x4x1 tile has
    # them; WARPS warps on the rows otherwise
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0],
                                                  warps_per_cta=[WARPS, WARP_COLS],
                                                  instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, WARP_COLS], [1, 0])
    ROW_S: gl.constexpr = gl.SliceLayout(1, MMA)

    # a group's heads in `chunks` programs of BLOCK_G rows, next to each other in the grid (so
    # that a kv head's tiles, read by each, come from L2 after the first)
    bh = gl.program_id(0) // chunks
    chunk = gl.program_id(0) % chunks
    split = gl.program_id(1)
    b = bh // n_kv_heads
    h = bh % n_kv_heads
    offs_g = gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, Q_L)) + chunk * BLOCK_G
    cols_q = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    q_rows = b.to(gl.int64) * n_kv_heads * group + h * group + offs_g
    q = gl.load(q_ptr + q_rows[:, None] * D + cols_q[None, :], mask=(offs_g < group)[:, None],
                other=0.0)
    q_a = gl.convert_layout(q, A_OP)

    # a slot holds an iteration's NB blocks as one tile of NB * BS keys
    k_smem = gl.allocate_shared_memory(gl.float16, [STAGES, NB * BS, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float16, [STAGES, NB * BS, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()
    row = table_ptr + b.to(gl.int64) * stride_tb + split * iters * NB
    for s in gl.static_range(STAGES):
        _issue(k_desc, v_desc, k_smem, v_smem, ready.index(s), s, row, s, h, s < iters, D, BS,
               NB)

    m_i = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_S)
    l_i = gl.zeros([BLOCK_G], gl.float32, ROW_S)
    acc = gl.zeros([BLOCK_G, D], gl.float32, MMA)
    for it in range(iters):
        slot = it % STAGES
        mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
        k_all = k_smem.index(slot)  # one softmax update per iteration of NB * BS keys
        v_all = v_smem.index(slot)
        sc = mma_v2(q_a, k_all.permute((1, 0)).load(B_OP),
                    gl.zeros([BLOCK_G, NB * BS], gl.float32, MMA)) * qk_scale
        m_new = gl.maximum(m_i, gl.max(sc, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(sc - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = mma_v2(gl.convert_layout(p.to(gl.float16), A_OP), v_all.load(B_OP), acc)
        m_i = m_new
        gl.thread_barrier()  # every read of this slot is done: refill it
        _issue(k_desc, v_desc, k_smem, v_smem, ready.index(slot), slot, row, it + STAGES, h,
               it + STAGES < iters, D, BS, NB)

    out = acc / l_i[:, None]
    n_splits = gl.num_programs(1)
    offs_o = gl.arange(0, BLOCK_G, layout=ROW_S) + chunk * BLOCK_G
    cols_o = gl.arange(0, D, layout=gl.SliceLayout(0, MMA))
    o_rows = (b.to(gl.int64) * n_kv_heads * group + h * group + offs_o) * n_splits + split
    ok = offs_o < group
    gl.store(o_ptr + o_rows[:, None] * D + cols_o[None, :], out.to(o_ptr.dtype.element_ty),
             mask=ok[:, None])
    gl.store(lse_ptr + o_rows, (m_i + gl.log2(l_i)) * LN2, mask=ok)
    if FUSED:  # the last of a (sequence, chunk)'s splits merges them, a [BLOCK_G, D] tile a split
        gl.thread_barrier()  # every thread's partial stores before the release
        done = gl.atomic_add(count_ptr + gl.program_id(0), 1, sem="acq_rel", scope="gpu")
        if done == n_splits - 1:
            gl.thread_barrier()  # the acquire, carried to every thread before any load
            rows = (b.to(gl.int64) * n_kv_heads * group + h * group + offs_g) * n_splits
            live = (offs_g < group)[:, None]
            ROW_Q: gl.constexpr = gl.SliceLayout(1, Q_L)
            # every context is whole here, so no split is empty and m is finite (the shipped
            # _merge_row also handles -inf)
            m = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_Q)
            for u in range(n_splits):
                m = gl.maximum(m, gl.load(lse_ptr + rows + u, mask=offs_g < group, other=0.0))
            den = gl.zeros([BLOCK_G], gl.float32, ROW_Q)
            tot = gl.zeros([BLOCK_G, D], gl.float32, Q_L)
            for u in range(n_splits):
                w = gl.exp2((gl.load(lse_ptr + rows + u, mask=offs_g < group, other=0.0) - m)
                            * (1.0 / LN2))
                o_s = gl.load(o_ptr + (rows + u)[:, None] * D + cols_q[None, :], mask=live,
                              other=0.0)
                tot += w[:, None] * o_s
                den += w
            q_rows_out = b.to(gl.int64) * n_kv_heads * group + h * group + offs_g
            gl.store(out_ptr + q_rows_out[:, None] * D + cols_q[None, :],
                     (tot / den[:, None]).to(out_ptr.dtype.element_ty), mask=live)
            gl.store(count_ptr + gl.program_id(0), 0)  # zero for the next call (or replay)


def descriptor(pool: torch.Tensor):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows = pool.view(pool.shape[0] * pool.shape[1], pool.shape[2] * pool.shape[3])
    box = [pool.shape[1], pool.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(box, gl.float16)
    return TensorDescriptor(rows, list(rows.shape), list(rows.stride()), box, layout)


def launch_args(q, k_pool, v_pool, table, splits, stages, nb, chunks=1, warp_cols=1,
                fused=False):
    b, hq, d = q.shape
    hkv, bs = k_pool.shape[2], k_pool.shape[1]
    group = hq // hkv
    blocks = table.shape[1]
    assert k_pool.dtype == q.dtype == torch.float16 and blocks % (nb * splits) == 0
    block_g = max(16, triton.next_power_of_2(group) // chunks)
    assert block_g * chunks >= group
    dt = q.dtype if splits == 1 else torch.float32
    o = torch.empty(b * hq * splits, d, device=q.device, dtype=dt)
    lse = torch.empty(b * hq * splits, device=q.device, dtype=torch.float32)
    # zeroed per call, in every variant: a fill of its own in the timed graph (data/gluon-mqa5,
    # -mqa6); the last program's reset makes it needless where the counters are kept
    count = torch.zeros(b * hkv * chunks, device=q.device, dtype=torch.int32)
    out = torch.empty_like(q)
    args = (q, descriptor(k_pool), descriptor(v_pool), table, o, lse, count, out, hkv, group,
            blocks // (nb * splits), table.stride(0), d**-0.5 * LOG2E, chunks)
    meta = dict(D=d, BS=bs, BLOCK_G=block_g, STAGES=stages, NB=nb, WARPS=block_g // 16,
                WARP_COLS=warp_cols, num_warps=block_g // 16 * warp_cols,
                FUSED=fused and splits > 1)
    return (b * hkv * chunks, splits), args, meta, o, lse, out


def gluon_mqa(q, k_pool, v_pool, table, splits=2, stages=2, nb=4, chunks=1, warp_cols=1,
              merge="kernel"):
    """merge: "kernel" (the shipped merge kernel after), "fused" (the last split of a sequence
    merges, one launch), "none" (the partials only: a timing of the split kernel alone)."""
    grid, args, meta, o, lse, out = launch_args(q, k_pool, v_pool, table, splits, stages, nb,
                                                chunks, warp_cols, merge == "fused")
    _gluon_mqa[grid](*args, **meta)
    b, hq, d = q.shape
    if splits == 1:
        return o.view(b, hq, d)
    if merge == "fused":
        return out
    if merge == "none":
        return o
    o_part, lse_part = o.view(b, hq, splits, d), lse.view(b, hq, splits)
    out = torch.empty_like(q)
    pa._merge_splits[(b * hq,)](
        o_part, lse_part, out, lse_part, splits, hq, *o_part.stride(), *lse_part.stride(),
        *out.stride(), 0, 0, D=d, HEAD_DIM=d, BLOCK_S=pa.MERGE_BLOCK_S, LSE=False, num_warps=4)
    return out


def compile_report():
    import fp8_sass as fs
    from gluon_decode import compile_gluon

    q = torch.zeros(B, HQ, D, dtype=torch.float16)
    pools = [torch.zeros(64, BS, HKV, D, dtype=torch.float16) for _ in "kv"]
    table = torch.zeros(B, N // BS, dtype=torch.int32)
    for chunks, stages, nb, cols in ((1, 3, 2, 1), (2, 3, 2, 1), (2, 2, 8, 4), (2, 3, 8, 4),
                                     (2, 3, 4, 4), (2, 4, 4, 4)):
        grid, args, meta, *_ = launch_args(q, *pools, table, 2, stages, nb, chunks, cols, True)
        compiled = compile_gluon(_gluon_mqa, args, meta)
        text, _, _ = fs.ptxas_v(compiled.asm["ptx"])
        loop = fs.main_loop(fs.sass_lines(fs.sass(compiled.asm["cubin"])))
        print(f"chunks={chunks} stages={stages} nb={nb} warp_cols={cols}: {text}; shared "
              f"{compiled.metadata.shared} B; main loop {len(loop)} warp instructions an "
              f"iteration of {nb * BS} keys")


def time_it(out_path, splits=(1, 2, 4), chunks=(1,),
            configs=((2, 4), (3, 4), (3, 2), (4, 2)), warp_cols=1, merges=("kernel",)):
    from bench import core
    from minimodel.paged_attention import paged_decode

    q, k, v = core.qkv(B, HQ, HKV, N, D)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [N] * B, BS)
    fns = {
        "mqa_shipped": lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=N),
        "mqa_sdpa_cudnn": lambda: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0],
    }
    for ch in chunks:  # a group's heads over `ch` programs (one warp each at ch = 2)
        for sp in splits:
            for st, nb in configs:
                for mg in merges if sp > 1 else ("kernel",):
                    name = f"gluon_split{sp}_s{st}_nb{nb}" + (f"_c{ch}" if ch > 1 else "")
                    name += f"_w{warp_cols}" if warp_cols > 1 else ""
                    name += f"_{mg}" if mg != "kernel" else ""
                    fns[name] = (lambda sp=sp, st=st, nb=nb, ch=ch, mg=mg:
                                 gluon_mqa(q, k_pool, v_pool, table, sp, st, nb, ch, warp_cols,
                                           mg))
    base = fns["mqa_shipped"]()
    records = {}
    for name, fn in fns.items():
        try:
            if name.endswith("_none"):  # the split kernel alone: timed, its output not final
                fn()
                torch.cuda.synchronize()
                records[name] = {"impl": name, "max_diff_vs_shipped": None}
                continue
            diff = (fn().float() - base.float()).abs().max().item()
        except Exception as e:  # noqa: BLE001 - a variant that does not build is data too
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        print(f"{name}: max diff vs shipped {diff:.2e}", flush=True)
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    fns = {k: f for k, f in fns.items()
           if k in records and (records[k]["max_diff_vs_shipped"] or 0.0) < 1e-2}
    core.in_turns({k: records[k] for k in fns}, fns, 3, must_capture=True)
    core.save(Path(out_path), {"environment": core.environment(),
                               "copy_bytes_per_s": core.copy_rate(),
                               "records": list(records.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", default="gluon-mqa.json")
    ap.add_argument("--splits", default="1,2,4")
    ap.add_argument("--chunks", default="1")
    ap.add_argument("--configs", default="2x4,3x4,3x2,4x2", help="stages x blocks an iteration")
    ap.add_argument("--warp-cols", type=int, default=1, help="warps side by side on the columns")
    ap.add_argument("--merges", default="kernel", help="kernel, fused, none (comma-separated)")
    a = ap.parse_args()
    if a.compile:
        compile_report()
    if a.time:
        splits, chunks = (tuple(int(x) for x in t.split(",")) for t in (a.splits, a.chunks))
        configs = tuple(tuple(int(x) for x in c.split("x")) for c in a.configs.split(","))
        time_it(a.out, splits, chunks, configs, a.warp_cols, tuple(a.merges.split(",")))

"""Issue 27 study: the 8-bit decode loop of scratch/tma_decode.py written in Gluon, so that the two
costs Triton's layouts left in scratch/tma_paged.py can be chosen by hand (Lab 03 part 2, "Where
the 8-bit cache falls short"):
- V is read from shared memory 16 bytes a thread (a key's row, as the tile stores it), converted
  to float16 in registers, and only then put in the tensor cores' B layout (gl.convert_layout,
  through shared memory as 16-bit data, where the transposing matrix load exists); Triton read
  each V byte on its own (LDS.U8), since the B fragment pairs two keys of one column.
- q is converted to its A fragments once, before the loop.
- K^T is loaded from its copy straight into the B layout, four d (contiguous bytes of a key's
  row) a register, as Triton does; the scales come by TMA with K and V, one row of BS floats a
  block and head, so that nothing in the loop waits on a plain load.

Timed on the H200: data/gluon-decode-h200.json (e89d4ec: scales and entries by plain loads,
261.7 us), data/gluon-decode2-h200.json (654a24b: scales by TMA, K through shared memory as V,
200.9 us), data/gluon-decode3-h200.json (1a69bc5: as now, 147.3 us at one split and 2 stages,
88% of copy, 1.79 times the 16-bit step; scratch/tma_paged.py 171.1 us in the same run).

A probe, as scratch/tma_decode.py is: every context is its whole table row, split in runs of
whole four-block iterations, so no key is masked; 8-bit pools with per-token float32 scales
(head-major in a block); one warp a program, 16 query rows; the splits merged by PyTorch inside
the timed call. Gluon runs only on a GPU (no interpreter): its check is the timing run's, against
the shipped paged_decode.

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch:. .venv/bin/python \
        scratch/gluon_decode.py --compile
    PYTHONPATH=src:scratch:. python scratch/gluon_decode.py --time --out $OUT/gluon-decode-h200.json
"""

import argparse
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

LOG2E = 1.4426950408889634
LN2 = gl.constexpr(0.6931471805599453)
B, N, HQ, HKV, D, BS = 64, 4096, 32, 8, 128, 16
NB = 4  # blocks an iteration


@gluon.jit
def _entries(row, it, n_it, NB: gl.constexpr):
    """The table entries of iteration `it`'s four blocks (0 past the split: never copied)."""
    ok = it < n_it
    e0 = gl.load(row + it * NB, mask=ok, other=0)
    e1 = gl.load(row + it * NB + 1, mask=ok, other=0)
    e2 = gl.load(row + it * NB + 2, mask=ok, other=0)
    e3 = gl.load(row + it * NB + 3, mask=ok, other=0)
    return e0, e1, e2, e3


@gluon.jit
def _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bar, slot, e0,
           e1, e2, e3, h, n_kv_heads, pred, D: gl.constexpr, BS: gl.constexpr,
           NB: gl.constexpr):
    """One iteration's sixteen copies (K, V and their scales of four blocks) into ring slot
    `slot`: a block's scales of head h are one row of BS floats."""
    mbarrier.expect(bar, 2 * NB * (k_desc.block_type.nbytes + ks_desc.block_type.nbytes),
                    pred=pred)
    # in the order the timed kernel (data/gluon-decode3-h200.json) issued them: the scales,
    # then K's four blocks, then V's (src/minimodel/paged_attention_hopper.py interleaves them
    # per block)
    for j in gl.static_range(NB):
        e = e0 if j == 0 else e1 if j == 1 else e2 if j == 2 else e3
        tma.async_copy_global_to_shared(ks_desc, [e * n_kv_heads + h, 0], bar,
                                        ks_smem.index(slot * NB + j).slice(0, 1), pred)
        tma.async_copy_global_to_shared(vs_desc, [e * n_kv_heads + h, 0], bar,
                                        vs_smem.index(slot * NB + j).slice(0, 1), pred)
    for j in gl.static_range(NB):
        e = e0 if j == 0 else e1 if j == 1 else e2 if j == 2 else e3
        tma.async_copy_global_to_shared(k_desc, [e * BS, h * D], bar,
                                        k_smem.index(slot * NB + j), pred)
    for j in gl.static_range(NB):
        e = e0 if j == 0 else e1 if j == 1 else e2 if j == 2 else e3
        tma.async_copy_global_to_shared(v_desc, [e * BS, h * D], bar,
                                        v_smem.index(slot * NB + j), pred)


@gluon.jit
def _scores(q_a, k_tile, ks_tile, qk_scale, BLOCK_G: gl.constexpr, BS: gl.constexpr,
            D: gl.constexpr, MMA: gl.constexpr, B_OP: gl.constexpr):
    """S = q K^T for one block (log2 units, K's scales on their columns)."""
    # K^T straight from the copy into the B layout: its k pairs (d) are contiguous in a key's row
    kt = k_tile.permute((1, 0)).load(B_OP).to(gl.float16)
    s = mma_v2(q_a, kt, gl.zeros([BLOCK_G, BS], gl.float32, MMA))
    return s * (_scales(ks_tile, BS, MMA) * qk_scale)[None, :]


@gluon.jit
def _scales(tile, BS: gl.constexpr, MMA: gl.constexpr):
    """A block's BS scales (a [1, BS] tile in shared memory) on the columns of MMA's layout."""
    ROW: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 1], [1, 0])
    return gl.convert_layout(gl.sum(tile.load(ROW), 0), gl.SliceLayout(0, MMA))


@gluon.jit
def _pv(acc, p, w, v_tile, V_ROWS: gl.constexpr, A_OP: gl.constexpr, B_OP: gl.constexpr):
    """acc + P~ diag(w) V for one block: V read 16 bytes a thread, converted in registers, then
    put in the B layout as 16-bit data."""
    v = gl.convert_layout(v_tile.load(V_ROWS).to(gl.float16), B_OP)
    pa = gl.convert_layout((p * w[None, :]).to(gl.float16), A_OP)
    return mma_v2(pa, v, acc)


@gluon.jit
def _gluon_decode(q_ptr, k_desc, v_desc, ks_desc, vs_desc, table_ptr, o_ptr, lse_ptr, n_kv_heads,
                  group, iters, stride_tb, qk_scale,
                  D: gl.constexpr, BS: gl.constexpr, BLOCK_G: gl.constexpr,
                  STAGES: gl.constexpr, NB: gl.constexpr, KW: gl.constexpr):
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1],
                                                  instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    # q K^T with four consecutive d a register (K's bytes read 4 at a time, as Triton does)
    A_QK: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=KW)
    B_QK: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=KW)
    ROWS: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [1, 1], [1, 0])
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1, 1], [1, 0])
    ROW_S: gl.constexpr = gl.SliceLayout(1, MMA)

    bh = gl.program_id(0)
    split = gl.program_id(1)
    b = bh // n_kv_heads
    h = bh % n_kv_heads
    offs_g = gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, Q_L))
    cols_q = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    q_rows = b.to(gl.int64) * n_kv_heads * group + h * group + offs_g
    q = gl.load(q_ptr + q_rows[:, None] * D + cols_q[None, :], mask=(offs_g < group)[:, None],
                other=0.0)
    q_a = gl.convert_layout(q, A_QK)  # once: the loop reads no q from shared memory

    k_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * NB, BS, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES * NB, BS, D], v_desc.layout)
    # a block's scales are 64 bytes, a TMA destination 128-byte aligned: two rows a buffer
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES * NB, 2, BS], ks_desc.layout)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES * NB, 2, BS], vs_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()

    row = table_ptr + b.to(gl.int64) * stride_tb + split * iters * NB
    for s in gl.static_range(STAGES):
        e0, e1, e2, e3 = _entries(row, s, iters, NB)
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, ready.index(s),
               s, e0, e1, e2, e3, h, n_kv_heads, s < iters, D, BS, NB)
    n0, n1, n2, n3 = _entries(row, STAGES, iters, NB)  # the first refill's, one iteration early

    m_i = gl.full([BLOCK_G], float("-inf"), gl.float32, ROW_S)
    l_i = gl.zeros([BLOCK_G], gl.float32, ROW_S)
    acc = gl.zeros([BLOCK_G, D], gl.float32, MMA)
    s_acc = qk_scale * 0.0 + 1.0  # acc's unit: the last iteration's largest V scale
    for it in range(iters):
        slot = it % STAGES
        mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
        s0 = _scores(q_a, k_smem.index(slot * NB), ks_smem.index(slot * NB).slice(0, 1), qk_scale,
                     BLOCK_G, BS, D, MMA, B_QK)
        s1 = _scores(q_a, k_smem.index(slot * NB + 1),
                     ks_smem.index(slot * NB + 1).slice(0, 1), qk_scale, BLOCK_G, BS, D, MMA,
                     B_QK)
        s2 = _scores(q_a, k_smem.index(slot * NB + 2),
                     ks_smem.index(slot * NB + 2).slice(0, 1), qk_scale, BLOCK_G, BS, D, MMA,
                     B_QK)
        s3 = _scores(q_a, k_smem.index(slot * NB + 3),
                     ks_smem.index(slot * NB + 3).slice(0, 1), qk_scale, BLOCK_G, BS, D, MMA,
                     B_QK)
        m_new = gl.maximum(gl.maximum(gl.maximum(m_i, gl.max(s0, 1)), gl.max(s1, 1)),
                           gl.maximum(gl.max(s2, 1), gl.max(s3, 1)))
        alpha = gl.exp2(m_i - m_new)
        s0 = gl.exp2(s0 - m_new[:, None])
        s1 = gl.exp2(s1 - m_new[:, None])
        s2 = gl.exp2(s2 - m_new[:, None])
        s3 = gl.exp2(s3 - m_new[:, None])
        l_i = l_i * alpha + (gl.sum(s0, 1) + gl.sum(s1, 1)) + (gl.sum(s2, 1) + gl.sum(s3, 1))
        w0 = _scales(vs_smem.index(slot * NB).slice(0, 1), BS, MMA)
        w1 = _scales(vs_smem.index(slot * NB + 1).slice(0, 1), BS, MMA)
        w2 = _scales(vs_smem.index(slot * NB + 2).slice(0, 1), BS, MMA)
        w3 = _scales(vs_smem.index(slot * NB + 3).slice(0, 1), BS, MMA)
        s_max = gl.maximum(gl.maximum(gl.max(w0, 0), gl.max(w1, 0)),
                           gl.maximum(gl.max(w2, 0), gl.max(w3, 0)))
        r = 1.0 / s_max
        acc = acc * gl.convert_layout(alpha * (s_acc * r), ROW_S)[:, None]
        acc = _pv(acc, s0, w0 * r, v_smem.index(slot * NB), ROWS, A_OP, B_OP)
        acc = _pv(acc, s1, w1 * r, v_smem.index(slot * NB + 1), ROWS, A_OP, B_OP)
        acc = _pv(acc, s2, w2 * r, v_smem.index(slot * NB + 2), ROWS, A_OP, B_OP)
        acc = _pv(acc, s3, w3 * r, v_smem.index(slot * NB + 3), ROWS, A_OP, B_OP)
        s_acc = s_max
        m_i = m_new
        # every read of this slot is in registers: refill it with iteration it + STAGES
        gl.thread_barrier()
        _issue(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem,
               ready.index(slot), slot, n0, n1, n2, n3, h, n_kv_heads, it + STAGES < iters, D,
               BS, NB)
        n0, n1, n2, n3 = _entries(row, it + STAGES + 1, iters, NB)

    out = acc * (s_acc / l_i)[:, None]
    n_splits = gl.num_programs(1)
    offs_o = gl.arange(0, BLOCK_G, layout=ROW_S)
    cols_o = gl.arange(0, D, layout=gl.SliceLayout(0, MMA))
    o_rows = (b.to(gl.int64) * n_kv_heads * group + h * group + offs_o) * n_splits + split
    ok = offs_o < group
    gl.store(o_ptr + o_rows[:, None] * D + cols_o[None, :], out, mask=ok[:, None])
    gl.store(lse_ptr + o_rows, (m_i + gl.log2(l_i)) * LN2, mask=ok)


def descriptor(pool: torch.Tensor):
    """The pool (blocks, BS, Hkv, D) as rows of Hkv D bytes; a box is one block's BS slots of one
    head's D columns (Gluon's descriptor: its shared layout chosen here)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows = pool.view(pool.shape[0] * pool.shape[1], pool.shape[2] * pool.shape[3])
    box = [pool.shape[1], pool.shape[3]]
    layout = gl.NVMMASharedLayout.get_default_for(box, gl.float8e4nv)
    return TensorDescriptor(rows, list(rows.shape), list(rows.stride()), box, layout)


def scale_descriptor(scale: torch.Tensor):
    """Scales (blocks, BS, Hkv), stored head-major in a block, as rows of BS floats (one a block
    and head); a box is one row."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    nb, bs, hkv = scale.shape
    rows = scale.transpose(1, 2)
    assert rows.is_contiguous(), "scales must be head-major in a block"
    rows = rows.reshape(nb * hkv, bs)
    # no swizzle: a row of 64 bytes
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return TensorDescriptor(rows, list(rows.shape), list(rows.stride()), [1, bs], layout)


def launch_args(q, k_pool, v_pool, table, k_scale, v_scale, splits, stages, kw=4):
    b, hq, d = q.shape
    hkv, bs = k_pool.shape[2], k_pool.shape[1]
    group = hq // hkv
    blocks = table.shape[1]
    assert k_pool.dtype == torch.float8_e4m3fn and q.dtype == torch.float16
    assert blocks % (NB * splits) == 0 and k_scale.stride(1) == 1 and v_scale.stride(1) == 1
    assert k_scale.stride() == v_scale.stride()
    o = torch.empty(b * hq * splits, d, device=q.device, dtype=torch.float32)
    lse = torch.empty(b * hq * splits, device=q.device, dtype=torch.float32)
    args = (q, descriptor(k_pool), descriptor(v_pool), scale_descriptor(k_scale),
            scale_descriptor(v_scale), table, o, lse, hkv, group, blocks // (NB * splits),
            table.stride(0), d**-0.5 * LOG2E)
    meta = dict(D=d, BS=bs, BLOCK_G=max(16, triton.next_power_of_2(group)), STAGES=stages, NB=NB,
                KW=kw, num_warps=1)
    return (b * hkv, splits), args, meta, o, lse


def gluon_decode(q, k_pool, v_pool, table, k_scale, v_scale, splits=2, stages=2):
    grid, args, meta, o, lse = launch_args(q, k_pool, v_pool, table, k_scale, v_scale, splits,
                                           stages)
    _gluon_decode[grid](*args, **meta)
    b, hq, d = q.shape
    if splits == 1:
        return o.view(b, hq, d).to(q.dtype)
    o, lse = o.view(b, hq, splits, d), lse.view(b, hq, splits)
    w = torch.softmax(lse, dim=-1)  # the merge: O = sum_u exp(lse_u - lse) O_u
    return (w[..., None] * o).sum(2).to(q.dtype)


def compile_gluon(kernel, args, meta):
    """A Gluon kernel compiled for sm_90 without a GPU, as its JIT would compile this launch:
    args the runtime arguments in order (a pointer's type from its tensor, a Python int i32, a
    float fp32, a descriptor its Gluon type, None a constexpr), meta the constexprs and
    num_warps (scripts/ptx_hopper.py compiles the Hopper kernel this way)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    pointer = {torch.float16: "*fp16", torch.float32: "*fp32", torch.int32: "*i32"}
    signature, constexprs = {}, {}
    for i, p in enumerate(p.name for p in kernel.params):
        a = args[i] if i < len(args) else None
        if p in meta or a is None:
            signature[p], constexprs[(i,)] = "constexpr", meta.get(p)
        elif isinstance(a, torch.Tensor):
            signature[p] = pointer[a.dtype]
        elif isinstance(a, float):
            signature[p] = "fp32"
        elif isinstance(a, int):
            signature[p] = "i32"
        else:
            signature[p] = mangle_type(a)
    src = GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": meta["num_warps"]})


def compile_report():
    """Compiled for sm_90 without a GPU: registers, spills and the main loop's instructions."""
    import collections

    import fp8_sass as fs

    nb = 64
    q = torch.zeros(B, HQ, D, dtype=torch.float16)
    pools = [torch.zeros(nb, BS, HKV, D, dtype=torch.float16).to(torch.float8_e4m3fn)
             for _ in "kv"]
    sc = [torch.ones(nb, HKV, BS).transpose(1, 2) for _ in "kv"]
    table = torch.zeros(B, N // BS, dtype=torch.int32)
    for stages in (2, 3):
        grid, args, meta, _, _ = launch_args(q, *pools, table, *sc, 2, stages)
        compiled = compile_gluon(_gluon_decode, args, meta)
        text, _, _ = fs.ptxas_v(compiled.asm["ptx"])
        lines = fs.sass_lines(fs.sass(compiled.asm["cubin"]))
        loop = fs.main_loop(lines)
        ops = collections.Counter(op for _, op, *_ in loop)
        print(f"stages={stages}: {text}; shared {compiled.metadata.shared} B; main loop "
              f"{len(loop)} = {len(loop) / (NB * BS):.1f} warp instructions a key")
        print("   ", ops.most_common(16))


def time_it(out_path):
    """On the H200, at bench.fp8_decode's shape: this kernel against the shipped paged_decode
    (8- and 16-bit) and scratch/tma_paged.py, graph replays in turns, each output checked first
    against the shipped 8-bit kernel's."""
    from tma_paged import tma_paged_decode

    from bench import core
    from bench.fp8_decode import N as NK
    from bench.fp8_decode import cache
    from minimodel import paged_attention as pa

    c = cache()
    s8 = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    fns = {
        "shipped_fp8": lambda: pa.paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t,
                                               max_context_len=NK, **s8),
        "shipped_fp16": lambda: pa.paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t,
                                                max_context_len=NK),
        "tma_paged_fp8": lambda: tma_paged_decode(c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t,
                                                  max_context_len=NK, num_splits=2, **s8)[0],
    }
    for sp in (1, 2, 4):
        for st in (2, 3):
            fns[f"gluon_fp8_split{sp}_s{st}"] = lambda sp=sp, st=st: gluon_decode(
                c.q, c.k_pool8, c.v_pool8, c.table, c.k_scale, c.v_scale, splits=sp, stages=st)
    records = {}
    base = fns["shipped_fp8"]()
    for name, fn in fns.items():
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - a variant that fails to build is data too
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        ref = base if "fp16" not in name else fns["shipped_fp16"]()
        diff = (out.float() - ref.float()).abs().max().item()
        print(f"{name}: max diff vs shipped {diff:.2e}", flush=True)
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    fns = {k: f for k, f in fns.items()
           if k in records and records[k]["max_diff_vs_shipped"] < 1e-2}
    core.in_turns({k: records[k] for k in fns}, fns, 3, must_capture=True)
    copy = core.copy_rate()
    core.save(Path(out_path), {"environment": core.environment(), "copy_bytes_per_s": copy,
                               "records": list(records.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", default="gluon-decode.json")
    a = ap.parse_args()
    if a.compile:
        compile_report()
    if a.time:
        time_it(a.out)

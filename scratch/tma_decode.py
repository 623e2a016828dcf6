"""Issues 23 and 27 study: a decode kernel that loads each block's K and V with one TMA copy
(a host TensorDescriptor over the pool seen as rows of Hkv d elements, a box of the block's 16
slots by d columns at its kv head), so that no K/V address is computed per key. The shipped
kernel's 8-bit loop issues about 54 warp instructions a key, 31 of them integer/address work
(scratch/fp8_sass.txt: 1,000 of 1,721 per 128-key tile, 4 warps); at the copy rate an SM has
about 62 issue slots a key for 8-bit K and V, so the loop is issue-bound. This probe asks how
many instructions a key are left when the addresses go to the copy engine.

One program per (sequence, kv head) and split, one 16-key block per iteration (one table entry,
two copies), the pipeliner's stages over the blocks; 8-bit pools dequantised as the shipped
kernel does (K's scale on its score column, V's on P~'s column). Full blocks only (every context
a multiple of 16: the probe's shapes), so no key is masked; a partial split is written as
(O_u, lse_u) and merged by torch.

Timed on the H200: data/tma-probe-h200.json (ffd4cac, with --mqa) and data/tma-probe2-h200.json
(eda23db: two splits of one-warp programs, merged by PyTorch, 169.3 us). The variants merged by
the shipped merge kernel (tma_decode_kmerge) are checked in the interpreter, not yet timed:

    PYTHONPATH=src:scratch:. python scratch/tma_decode.py --time \
        --only tma_fp8_w1_s3,tma_fp8_w1_s2_split,tma_fp8_w1_s3_split --out $OUT/tma-probe3.json

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch:. .venv/bin/python \
        scratch/tma_decode.py --compile
    TRITON_INTERPRET=1 PYTHONPATH=src:scratch:. .venv/bin/python scratch/tma_decode.py --check
"""

import argparse
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

LOG2E = tl.constexpr(1.4426950408889634)
B, N, HQ, HKV, D, BS = 64, 4096, 32, 8, 128, 16


@triton.jit
def _scores(
    q,
    k_desc,
    ks_ptr,
    phys,
    h,
    stride_sblk,
    stride_sh,
    qk_scale,
    D: tl.constexpr,
    BS: tl.constexpr,
    FP8: tl.constexpr,
):
    k = k_desc.load([phys * BS, h * D])  # [BS, D]: the block's keys of kv head h
    s = tl.dot(q, tl.trans(k.to(tl.float16)))
    if FP8:
        s = (
            s
            * tl.load(ks_ptr + phys.to(tl.int64) * stride_sblk + h * stride_sh + tl.arange(0, BS))[
                None, :
            ]
        )
    return s * qk_scale


@triton.jit
def _pv(
    acc,
    p,
    v_desc,
    vs_ptr,
    phys,
    h,
    stride_sblk,
    stride_sh,
    D: tl.constexpr,
    BS: tl.constexpr,
    FP8: tl.constexpr,
):
    v = v_desc.load([phys * BS, h * D])
    if FP8:
        p = (
            p
            * tl.load(vs_ptr + phys.to(tl.int64) * stride_sblk + h * stride_sh + tl.arange(0, BS))[
                None, :
            ]
        )
    return tl.dot(p.to(tl.float16), v.to(tl.float16), acc)


@triton.jit
def _tma_decode(
    q_ptr,
    k_desc,
    v_desc,
    ks_ptr,
    vs_ptr,
    table_ptr,
    o_ptr,
    lse_ptr,
    n_kv_heads,
    group,
    blocks_per_split,
    stride_tb,
    stride_sblk,
    stride_sh,
    qk_scale,
    D: tl.constexpr,
    BS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    FP8: tl.constexpr,
    STAGES: tl.constexpr,
):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // n_kv_heads
    h = bh % n_kv_heads
    offs_g = tl.arange(0, BLOCK_G)
    cols = tl.arange(0, D)
    g_ok = offs_g < group
    heads = h * group + offs_g
    rows = b.to(tl.int64) * n_kv_heads * group + heads
    q = tl.load(q_ptr + rows[:, None] * D + cols[None, :], mask=g_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    first = split * blocks_per_split
    row = table_ptr + b * stride_tb
    # four blocks (64 keys) an iteration, each its own two copies and products: one softmax
    # update and one rescale of acc for the four
    # the table entries one iteration ahead (loop-carried), so that no copy's coordinates wait
    # on a load of its own iteration and the pipeliner can give the copies their own stages
    last = first + blocks_per_split - 4
    n0, n1 = tl.load(row + first), tl.load(row + first + 1)
    n2, n3 = tl.load(row + first + 2), tl.load(row + first + 3)
    for i in tl.range(first, first + blocks_per_split, 4, num_stages=STAGES):
        p0, p1, p2, p3 = n0, n1, n2, n3
        nxt = tl.minimum(i + 4, last)  # the last iteration reloads its own entries
        n0, n1 = tl.load(row + nxt), tl.load(row + nxt + 1)
        n2, n3 = tl.load(row + nxt + 2), tl.load(row + nxt + 3)
        s0 = _scores(q, k_desc, ks_ptr, p0, h, stride_sblk, stride_sh, qk_scale, D, BS, FP8)
        s1 = _scores(q, k_desc, ks_ptr, p1, h, stride_sblk, stride_sh, qk_scale, D, BS, FP8)
        s2 = _scores(q, k_desc, ks_ptr, p2, h, stride_sblk, stride_sh, qk_scale, D, BS, FP8)
        s3 = _scores(q, k_desc, ks_ptr, p3, h, stride_sblk, stride_sh, qk_scale, D, BS, FP8)
        m_new = tl.maximum(
            tl.maximum(tl.maximum(m_i, tl.max(s0, 1)), tl.max(s1, 1)),
            tl.maximum(tl.max(s2, 1), tl.max(s3, 1)),
        )
        alpha = tl.math.exp2(m_i - m_new)
        e0 = tl.math.exp2(s0 - m_new[:, None])
        e1 = tl.math.exp2(s1 - m_new[:, None])
        e2 = tl.math.exp2(s2 - m_new[:, None])
        e3 = tl.math.exp2(s3 - m_new[:, None])
        l_i = l_i * alpha + (tl.sum(e0, 1) + tl.sum(e1, 1)) + (tl.sum(e2, 1) + tl.sum(e3, 1))
        acc = acc * alpha[:, None]
        acc = _pv(acc, e0, v_desc, vs_ptr, p0, h, stride_sblk, stride_sh, D, BS, FP8)
        acc = _pv(acc, e1, v_desc, vs_ptr, p1, h, stride_sblk, stride_sh, D, BS, FP8)
        acc = _pv(acc, e2, v_desc, vs_ptr, p2, h, stride_sblk, stride_sh, D, BS, FP8)
        acc = _pv(acc, e3, v_desc, vs_ptr, p3, h, stride_sblk, stride_sh, D, BS, FP8)
        m_i = m_new
    out = acc / l_i[:, None]
    n_splits = tl.num_programs(1)
    o_rows = rows * n_splits + split
    tl.store(
        o_ptr + o_rows[:, None] * D + cols[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=g_ok[:, None],
    )
    tl.store(lse_ptr + o_rows, (m_i + tl.math.log2(l_i)) / LOG2E, mask=g_ok)


def descriptor(pool: torch.Tensor) -> TensorDescriptor:
    """The pool (blocks, BS, Hkv, D) as rows of Hkv D elements; a box is one block's BS slots of
    one head's D columns."""
    rows = pool.view(pool.shape[0] * pool.shape[1], pool.shape[2] * pool.shape[3])
    return TensorDescriptor(
        rows, list(rows.shape), list(rows.stride()), [pool.shape[1], pool.shape[3]]
    )


def launch_args(q, k_pool, v_pool, table, k_scale=None, v_scale=None, splits=1, stages=3, warps=4):
    b, hq, d = q.shape
    hkv, bs = k_pool.shape[2], k_pool.shape[1]
    group = hq // hkv
    blocks = table.shape[1]
    assert blocks % (4 * splits) == 0
    fp8 = k_pool.element_size() == 1
    o = torch.empty(
        b * hq * splits, d, device=q.device, dtype=torch.float32 if splits > 1 else q.dtype
    )
    lse = torch.empty(b * hq * splits, device=q.device, dtype=torch.float32)
    ks = k_scale if fp8 else q
    vs = v_scale if fp8 else q
    stride_sblk, stride_sh = (k_scale.stride(0), k_scale.stride(2)) if fp8 else (0, 0)
    grid = (b * hkv, splits)
    args = (
        q,
        descriptor(k_pool),
        descriptor(v_pool),
        ks,
        vs,
        table,
        o,
        lse,
        hkv,
        group,
        blocks // splits,
        table.stride(0),
        stride_sblk,
        stride_sh,
        d**-0.5 * LOG2E.value,
    )
    meta = dict(
        D=d,
        BS=bs,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        FP8=fp8,
        STAGES=stages,
        num_warps=warps,
        num_stages=stages,
    )
    return grid, args, meta, o, lse


def tma_decode(q, k_pool, v_pool, table, k_scale=None, v_scale=None, splits=1, stages=3, warps=4):
    """Every sequence's context is its whole table row (no lengths: the probe's shapes), split in
    `splits` runs of whole four-block iterations."""
    grid, args, meta, o, lse = launch_args(
        q, k_pool, v_pool, table, k_scale, v_scale, splits, stages, warps
    )
    _tma_decode[grid](*args, **meta)
    b, hq, d = q.shape
    if splits == 1:
        return o.view(b, hq, d)
    o, lse = o.view(b, hq, splits, d), lse.view(b, hq, splits)
    w = torch.softmax(lse, dim=-1)  # the merge: O = sum_u exp(lse_u - lse) O_u
    return (w[..., None] * o).sum(2).to(q.dtype)


def tma_decode_kmerge(
    q, k_pool, v_pool, table, k_scale=None, v_scale=None, splits=2, stages=2, warps=1
):
    """tma_decode with its splits merged by the shipped merge kernel (paged_attention's
    _merge_splits, the launch a captured split call makes), not by PyTorch."""
    from minimodel.paged_attention import MERGE_BLOCK_S, _merge_splits

    grid, args, meta, o, lse = launch_args(
        q, k_pool, v_pool, table, k_scale, v_scale, splits, stages, warps
    )
    _tma_decode[grid](*args, **meta)
    b, hq, d = q.shape
    o_part, lse_part = o.view(b, hq, splits, d), lse.view(b, hq, splits)
    out = torch.empty_like(q)
    _merge_splits[(b * hq,)](
        o_part,
        lse_part,
        out,
        lse_part,
        splits,
        hq,
        *o_part.stride(),
        *lse_part.stride(),
        *out.stride(),
        0,
        0,
        D=d,
        HEAD_DIM=d,
        BLOCK_S=MERGE_BLOCK_S,
        LSE=False,
        num_warps=4,
    )
    return out


def compile_report():
    """Compile for sm_90 without a GPU, the shipped fp8/fp16 variants' way (fp8_sass.py); the
    MQA shape's group of 32 (16-bit) after them."""
    import fp8_sass as fs

    from minimodel.paged_attention import FP8_DTYPE

    for label, fp8, hkv in (("fp8", True, HKV), ("fp16", False, HKV), ("mqa16", False, 1)):
        dt = FP8_DTYPE if fp8 else torch.float16
        nb = 64
        q = torch.zeros(B, HQ, D, dtype=torch.float16)
        pools = [torch.zeros(nb, BS, hkv, D, dtype=torch.float16).to(dt) for _ in "kv"]
        table = torch.zeros(B, N // BS, dtype=torch.int32)
        scales = [torch.ones(nb, hkv, BS).transpose(1, 2) for _ in "kv"] if fp8 else [None] * 2
        for stages, warps in ((3, 4), (4, 4), (3, 2), (3, 1)):
            grid, args, meta, _, _ = launch_args(
                q, *pools, table, *scales, stages=stages, warps=warps
            )
            compiled, *_ = fs.compile_like_jit(_tma_decode, args, meta)
            text, regs, spills = fs.ptxas_v(compiled.asm["ptx"])
            lines = fs.sass_lines(fs.sass(compiled.asm["cubin"]))
            loop = fs.main_loop(lines)  # the backward branch whose body holds the most MMAs
            classes = {}
            for _, op, *_ in loop:
                c = fs.classify(op)
                classes[c] = classes.get(c, 0) + 1
            per_key = meta["num_warps"] * len(loop) / (4 * BS)  # four blocks an iteration
            print(
                f"{label} stages={stages} warps={warps}: {text}; SASS {len(lines)}; loop "
                f"{len(loop)} an iteration of 4 blocks = {per_key:.1f} warp instructions a key; "
                f"shared {compiled.metadata.shared} B; "
                f"{dict(sorted(classes.items(), key=lambda x: -x[1]))}"
            )


def check():
    """Under the interpreter (CPU): against the float64 reference, 16- and 8-bit pools."""
    from minimodel.paged_attention import dequantize_kv, quantize_kv

    torch.manual_seed(0)
    b, hkv, n, nb = 3, 2, 128, 32
    q = torch.randn(b, hkv * 4, D).half()
    k, v = torch.randn(b, hkv, n, D), torch.randn(b, hkv, n, D)
    perm = torch.randperm(nb)[: b * n // BS].view(b, n // BS).to(torch.int32)

    def pool_of(x):  # (b, hkv, n, d) -> (nb, BS, hkv, d) at perm
        p = torch.zeros(nb, BS, hkv, D, dtype=x.dtype)
        blocks = x.view(b, hkv, n // BS, BS, D).permute(0, 2, 3, 1, 4)
        p[perm.long().flatten()] = blocks.reshape(-1, BS, hkv, D)
        return p

    def ref(kk, vv):
        kr = kk.double().repeat_interleave(4, 1)
        vr = vv.double().repeat_interleave(4, 1)
        s = torch.einsum("bhd,bhnd->bhn", q.double(), kr) * D**-0.5
        return torch.einsum("bhn,bhnd->bhd", torch.softmax(s, -1), vr)

    for splits in (1, 2):
        out = tma_decode(q, pool_of(k.half()), pool_of(v.half()), perm, splits=splits)
        err = (out.double() - ref(k.half(), v.half())).abs().max().item()
        print(f"fp16 splits={splits}: max error {err:.2e}")
        assert err < 2e-3
        (k8, ks), (v8, vs) = quantize_kv(k), quantize_kv(v)  # (b, hkv, n, d), (b, hkv, n)
        spool = [pool_of(s[..., None].expand(-1, -1, -1, D).contiguous())[..., 0] for s in (ks, vs)]
        spool = [s.transpose(1, 2).contiguous().transpose(1, 2) for s in spool]  # head-major
        out = tma_decode(
            q,
            pool_of(k8.view(torch.uint8)).view(k8.dtype),
            pool_of(v8.view(torch.uint8)).view(v8.dtype),
            perm,
            *spool,
            splits=splits,
        )
        err = (out.double() - ref(dequantize_kv(k8, ks), dequantize_kv(v8, vs))).abs().max().item()
        print(f"fp8 splits={splits}: max error {err:.2e}")
        assert err < 2e-3


def mqa_fns():
    """Issue 23's MQA shape (B = 64, 4,096 keys, 32 query heads on one kv head, d = 128, blocks
    of 16): the shipped decode, cuDNN's on the contiguous cache, and this kernel split 2 to 8
    ways (the merge in torch, inside the timed call), 2 or 4 warps."""
    from bench import core
    from minimodel.paged_attention import paged_decode

    q, k, v = core.qkv(B, HQ, 1, N, D)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [N] * B, BS)
    fns = {
        "mqa_shipped": lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=N),
        "mqa_sdpa_cudnn": lambda: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0],
    }
    for sp in (2, 4, 8):
        for w in (2, 4):
            for st in (2, 3):
                fns[f"mqa_tma_split{sp}_w{w}_s{st}"] = lambda sp=sp, w=w, st=st: tma_decode(
                    q, k_pool, v_pool, table, splits=sp, warps=w, stages=st
                )
    return fns


def time_it(out_path, mqa=False, only=()):
    """On the H200: this kernel against paged_decode at bench.fp8_decode's shape (and with
    --mqa at issue 23's MQA shape), graph replays in turns, each output first checked against
    the shipped kernel's."""
    from bench import core
    from bench.fp8_decode import cache
    from minimodel.paged_attention import paged_decode

    c = cache()
    fns = {
        "shipped_fp8": lambda: paged_decode(
            c.q,
            c.k_pool8,
            c.v_pool8,
            c.table,
            c.lens_t,
            max_context_len=N,
            k_scale=c.k_scale,
            v_scale=c.v_scale,
        ),
        "shipped_fp16": lambda: paged_decode(
            c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t, max_context_len=N
        ),
    }
    for w in (1, 2, 4):  # one split: 512 programs
        for st in (2, 3, 4):
            fns[f"tma_fp8_w{w}_s{st}"] = lambda w=w, st=st: tma_decode(
                c.q, c.k_pool8, c.v_pool8, c.table, c.k_scale, c.v_scale, warps=w, stages=st
            )
        fns[f"tma_fp16_w{w}"] = lambda w=w: tma_decode(
            c.q, c.k_pool16, c.v_pool16, c.table, warps=w
        )
    for st in (2, 3):  # two splits: 1,024 one-warp programs, the merge in torch
        fns[f"tma_fp8_w1_s{st}_split2"] = lambda st=st: tma_decode(
            c.q, c.k_pool8, c.v_pool8, c.table, c.k_scale, c.v_scale, splits=2, warps=1, stages=st
        )
    for sp in (2, 4):  # the splits merged by the shipped merge kernel
        for st in (2, 3):
            fns[f"tma_fp8_w1_s{st}_split{sp}_kmerge"] = lambda sp=sp, st=st: tma_decode_kmerge(
                c.q, c.k_pool8, c.v_pool8, c.table, c.k_scale, c.v_scale, sp, st, 1
            )
    if mqa:
        fns |= mqa_fns()
    if only:  # the shipped kernels and the variants named
        fns = {k: f for k, f in fns.items() if k.startswith(("shipped", "mqa_shipped", *only))}
    base = {"fp8": fns["shipped_fp8"](), "fp16": fns["shipped_fp16"]()}
    if mqa:
        base["mqa"] = fns["mqa_shipped"]()
    records = {}
    for name, fn in list(fns.items()):
        kind = "mqa" if name.startswith("mqa") else "fp8" if "fp8" in name else "fp16"
        try:
            diff = (fn().float() - base[kind].float()).abs().max().item()
        except Exception as e:  # a variant that fails to compile or launch is reported, not timed
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            del fns[name]
            continue
        print(f"{name}: max diff vs shipped {diff:.2e}", flush=True)
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    core.in_turns(records, fns, 2, must_capture=True)  # graph_ms: the median of the rounds
    for r in records.values():
        print(f"{r['impl']:24s} {r['graph_ms'] * 1e3:7.1f} us", flush=True)
    copy = core.copy_rate()
    print(f"copy {copy / 1e9:.0f} GB/s", flush=True)
    core.save(
        Path(out_path),
        {
            "environment": core.environment(),
            "copy_bytes_per_s": copy,
            "records": list(records.values()),
        },
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--mqa", action="store_true", help="with --time: the MQA shape too")
    ap.add_argument("--only", default="", help="with --time: name prefixes, comma-separated")
    ap.add_argument("--out", default="tma-probe.json")
    a = ap.parse_args()
    if a.compile:
        compile_report()
    if a.check:
        check()
    if a.time:
        time_it(a.out, a.mqa, tuple(a.only.split(",")) if a.only else ())

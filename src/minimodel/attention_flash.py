# ~/~ begin <<docs/lab/02-flash-triton.md#src/minimodel/attention_flash.py>>[init]
"""FlashAttention forward in Triton: tiles of Q stay on chip, K/V tiles stream through the online
softmax, S and P never reach device memory.

Tangled from docs/lab/02-flash-triton.md; edit the page, not this file.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from minimodel.kernels import (
    INTERPRET,
    LN2,
    LOG2E,
    MAX_GRID_Y,
    SUPPORTED_DTYPES,
    check_forward_only,
    key_range,
    padded_width,
    tma_layout,
    tma_strides,
)
from minimodel.reference import check_attention_inputs, check_mask_args, resolve_scale

__all__ = ["flash_attention"]

# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-inner-loop>>[init]
@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q, desc_k, desc_v, off_b, off_hkv, offs_m, lo, hi,
    qk_scale, n_k, shift, window,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Stream key/value tiles [lo, hi) of one kv head through the online softmax of one Q tile."""
    offs_n = tl.arange(0, BLOCK_N)
    pos_i = offs_m + shift  # pos_i: the key position each query row stands at
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # q_i.k_j = S_ij / tau
        if MASKED:  # a boundary tile: hide the pairs the reference hides, then guard empty rows
            j = start_n + offs_n[None, :]
            visible = j < n_k
            if CAUSAL:
                visible &= j <= pos_i[:, None]
            if WINDOWED:
                visible &= j > pos_i[:, None] - window
            s = tl.where(visible, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing
            p_tilde = tl.math.exp2(s - m_use[:, None])  # P~_ij = 2^(tau' q_i.k_j - m'_i^new)
        else:  # interior tile: every pair visible, so the max is finite and no guard is needed
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # tau' > 0 commutes with max
            m_use = m_new
            p_tilde = tl.math.exp2(qk * qk_scale - m_use[:, None])  # P~; one FMA per score
        alpha = tl.math.exp2(m_i - m_use)  # alpha_i = 2^(m'_i - m'_i^new)
        l_i = l_i * alpha + tl.sum(p_tilde, 1)  # l_i^new = alpha_i l_i + sum_j P~_ij
        v = desc_v.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc = acc * alpha[:, None]
        acc = tl.dot(p_tilde.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # acc^new += P~ V
        m_i = m_new
    return acc, l_i, m_i
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-kernel>>[init]
# Integer arguments are not specialised (Triton would otherwise compile separate variants for
# values that are 1 or multiples of 16): lengths vary per call, and the TMA makes alignment moot.
@triton.jit(do_not_specialize=["n_q", "n_k", "n_heads", "group", "window", "stride_lse_b",
                               "stride_lse_h", "N_Q_BUCKET", "N_K_BUCKET"])
def _attn_fwd(
    desc_q, desc_k, desc_v, desc_o, lse_ptr,
    qk_scale, n_q, n_k, n_heads, group, window, stride_lse_b, stride_lse_h,
    N_Q_BUCKET, N_K_BUCKET,  # autotuning keys only
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)  # heaviest (last) query tiles first
    off_bh = tl.program_id(1)
    off_b, off_h = off_bh // n_heads, off_bh % n_heads
    off_hkv = off_h // group  # GQA: query head h reads kv head h // (Hq / Hkv)
    i0 = start_m * BLOCK_M
    offs_m = i0 + tl.arange(0, BLOCK_M)
    shift = n_k - n_q  # query i stands at key position pos_i = i + shift

    _, lo, full_lo, full_hi, hi = key_range(i0, n_q, n_k, window, BLOCK_M, BLOCK_N, CAUSAL,
                                            WINDOWED)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max m'_i (base-2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum l_i
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # running sum of P~ V
    q = desc_q.load([off_b, off_h, i0, 0]).reshape(BLOCK_M, HEAD_DIM)  # stays on chip

    acc, l_i, m_i = _attn_fwd_inner(  # the window's edge: masked
        acc, l_i, m_i, q, desc_k, desc_v, off_b, off_hkv, offs_m, lo, full_lo,
        qk_scale, n_k, shift, window, BLOCK_N, HEAD_DIM, True, CAUSAL, WINDOWED, DOT_PRECISION)
    acc, l_i, m_i = _attn_fwd_inner(  # the interior: no mask at all
        acc, l_i, m_i, q, desc_k, desc_v, off_b, off_hkv, offs_m, full_lo, full_hi,
        qk_scale, n_k, shift, window, BLOCK_N, HEAD_DIM, False, CAUSAL, WINDOWED, DOT_PRECISION)
    acc, l_i, m_i = _attn_fwd_inner(  # the diagonal and the ragged end: masked
        acc, l_i, m_i, q, desc_k, desc_v, off_b, off_hkv, offs_m, full_hi, hi,
        qk_scale, n_k, shift, window, BLOCK_N, HEAD_DIM, True, CAUSAL, WINDOWED, DOT_PRECISION)

    empty = l_i == 0.0  # rows that saw no key: O = 0 and lse = -inf, never NaN
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    desc_o.store([off_b, off_h, i0, 0], out.to(q.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)  # 4 bytes a row
    # int64: lse (B, Hq, Nq) may pass 2^31 elements (the descriptors address in 64 bits already)
    tl.store(lse_ptr + off_b.to(tl.int64) * stride_lse_b + off_h.to(tl.int64) * stride_lse_h
             + offs_m, lse, mask=offs_m < n_q)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-config-space>>[init]
# (BLOCK_M, BLOCK_N, num_warps, num_stages) by HEAD_DIM (the padded head dim).
FLASH_CONFIGS = {
    64: [(64, 128, 4, 2), (64, 64, 4, 2), (64, 128, 4, 3), (128, 128, 4, 3)],  # HEAD_DIM <= 64
    128: [(128, 64, 4, 2)],
    256: [(64, 64, 4, 2), (64, 32, 4, 2)],
}


def _head_dim_class(head_dim: int) -> int:
    return 64 if head_dim <= 64 else head_dim
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-configs>>[init]
def _set_block_shapes(nargs):
    """Autotune pre-hook: give each descriptor the tile shape of the config being run."""
    bm, bn, hd = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [1, 1, bm, hd]
    nargs["desc_o"].block_shape = [1, 1, bm, hd]
    nargs["desc_k"].block_shape = [1, 1, bn, hd]
    nargs["desc_v"].block_shape = [1, 1, bn, hd]


SMEM_BUDGET = 200 * 1024  # of the 227 KiB per block on Hopper, leaving room for the compiler


def _configs() -> list[triton.Config]:
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, pre_hook=_set_block_shapes)]
    every = sorted({cfg for cfgs in FLASH_CONFIGS.values() for cfg in cfgs})
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s,
                      pre_hook=_set_block_shapes)
        for bm, bn, w, s in every
    ]


def _prune(configs, named_args, **kwargs):
    """The candidates of this head dim whose Q tile and K/V pipeline fit in shared memory."""
    if INTERPRET:
        return configs
    head_dim = kwargs["HEAD_DIM"]
    elem = named_args["desc_q"].base.element_size()
    mine = FLASH_CONFIGS[_head_dim_class(head_dim)]
    candidates = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                         c.num_stages) in mine]
    return [c for c in candidates
            if smem_bytes(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, head_dim, elem)
            <= SMEM_BUDGET]


def smem_bytes(block_m: int, block_n: int, stages: int, head_dim: int, elem: int) -> int:
    """Shared memory of one program: its Q tile plus `stages` K tiles and V tiles in flight."""
    return elem * head_dim * (block_m + 2 * stages * block_n)


_attn_fwd_tuned = triton.autotune(
    configs=_configs(),
    key=["N_Q_BUCKET", "N_K_BUCKET", "HEAD_DIM", "CAUSAL", "WINDOWED", "DOT_PRECISION"],
    prune_configs_by={"early_config_prune": _prune},
)(_attn_fwd)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-validate>>[init]
def _check_kernel_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int) -> None:
    check_forward_only("flash_attention", q, k, v, why="the backward pass is out of scope")
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported: use float16, bfloat16 or float32")
    if INTERPRET:
        if q.dtype == torch.bfloat16:
            raise ValueError(
                "bfloat16 is refused under TRITON_INTERPRET=1: Triton's interpreter computes it "
                "wrongly. Use float16 or float32 on the CPU, or run on a GPU"
            )
        if q.device.type != "cpu":
            raise ValueError(
                f"under TRITON_INTERPRET=1 the kernel takes CPU tensors, got device {q.device}"
            )
    elif q.device.type != "cuda":
        raise ValueError(
            f"flash_attention needs CUDA tensors, got device {q.device}. Without a GPU, set "
            "TRITON_INTERPRET=1 before triton is imported to run the kernel in the interpreter"
        )
    elif (cc := torch.cuda.get_device_capability(q.device)) < (9, 0):
        raise ValueError(
            "flash_attention reads its tiles with tensor descriptors (the TMA), which need "
            f"compute capability 9.0 (Hopper) or newer; got {cc[0]}.{cc[1]} on {q.device}"
        )
    if not 1 <= d <= 256:
        raise ValueError(f"head_dim must be in [1, 256], got d={d}")


def _descriptor(t: torch.Tensor, head_dim: int) -> TensorDescriptor:
    """A (B, H, N, d) descriptor of a `tma_ready` tensor; the tile spans head_dim >= d columns,
    and the TMA fills the columns past d with zeros (and drops them on a store)."""
    return TensorDescriptor(t, list(t.shape), tma_strides(t), [1, 1, 16, head_dim])  # tile: config
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-wrapper>>[init]
# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-interface>>[init]
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward: the function `attention_ref` specifies, in one Triton kernel.

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d), Hq % Hkv == 0 (GQA/MQA read the shared kv head in
    place). float16 / bfloat16 / float32 (no bfloat16 under the interpreter); any d in [1, 256].
    causal aligns bottom-right; window=W (causal only) keeps the W latest keys; the default scale
    is 1/sqrt(d).

    Any strides are accepted. The solution reads its tiles through the TMA: a view whose
    head_dim has unit stride, whose other strides are multiples of 16 bytes and whose start is
    16-byte aligned (a transposed (B, N, H, d) layout, one head of a packed QKV tensor) is read
    in place, and any other input costs one copy into a contiguous buffer whose rows are padded
    with zeros to a multiple of 16 bytes: a strided head_dim, an odd stride, an unaligned start,
    and so a contiguous input whose d is not a multiple of 8 (16-bit) or 4 (float32).

    Returns O: (B, Hq, Nq, d) in q's dtype (the solution's O is contiguous when a row of d
    elements is a multiple of 16 bytes, else a view of the first d columns of such a padded
    buffer: call .contiguous() for a copy) and, with return_lse, the natural-log log-sum-exp
    (B, Hq, Nq) in float32. A row with no visible key gives zeros and lse = -inf.

    Raises ValueError for d outside [1, 256], float64, inputs that require grad, a device the
    kernel cannot run on, B * Hq above 65,535 (one program per pair on a grid axis), and the
    reference's own checks (ranks, shapes, masks, scale).
    """
# ~/~ end
    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    if b * hq > MAX_GRID_Y:  # one program per (batch, head) pair on the grid's second axis
        raise ValueError(f"flash_attention: B * Hq = {b} * {hq} = {b * hq} programs on the grid's "
                         f"second axis, more than CUDA's {MAX_GRID_Y}")
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)  # 1/sqrt(d) of the caller's d, whatever the padding
    _check_kernel_inputs(q, k, v, d)
    q, k, v = (tma_layout(t) for t in (q, k, v))  # in place where the TMA can read them
    head_dim = max(16, triton.next_power_of_2(d))  # the tile's width; TMA zero-fills d..head_dim

    width = padded_width(d, q.element_size())  # d itself unless a row of d is off 16 bytes
    o = torch.empty((b, hq, nq, width), dtype=q.dtype, device=q.device)[..., :d]
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device)
    grid = lambda meta: (triton.cdiv(nq, meta["BLOCK_M"]), b * hq)
    _attn_fwd_tuned[grid](
        *(_descriptor(t, head_dim) for t in (q, k, v, o)), lse,
        # a window past every key changes nothing: min(window, nk) keeps it in int32
        tau * LOG2E, nq, nk, hq, hq // hkv, min(window or 0, nk), lse.stride(0), lse.stride(1),
        triton.next_power_of_2(nq), triton.next_power_of_2(nk),
        HEAD_DIM=head_dim, CAUSAL=causal, WINDOWED=window is not None,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # no TF32 for fp32 input
    )
    return (o, lse) if return_lse else o
# ~/~ end
# ~/~ end

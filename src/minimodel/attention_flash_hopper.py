# ~/~ begin <<docs/lab/02b-flash-hopper.md#src/minimodel/attention_flash_hopper.py>>[init]
"""FlashAttention forward with FlashAttention-3's schedule, written in Gluon for Hopper GPUs: a
loader warp feeding K and V through mbarriers, two consumer warpgroups taking turns on the
tensor cores, the next S = QK^T issued under the current softmax, a persistent grid.

Tangled from docs/lab/02b-flash-hopper.md; edit the page, not this file.
"""

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import _aggregate as aggregate
from triton.language.core import base_value
from triton.runtime.jit import constexpr_function

from minimodel.kernels import (
    INTERPRET,
    LN2,
    LOG2E,
    Prepared,
    TmaArg,
    capability,
    cdiv,
    check_forward_only,
    keep,
    launch,
    num_sms,
    padded_width,
    planned,
    signature,
    tma_layout,
    tma_strides,
)
from minimodel.reference import check_attention_inputs, check_mask_args, resolve_scale

__all__ = ["flash_attention_hopper"]

# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-key-range>>[init]
@gluon.jit
def _key_range(i0, n_q, n_k, window, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               CAUSAL: gl.constexpr, WINDOWED: gl.constexpr):
    """kernels.key_range in Gluon: (lo_seen, lo, full_lo, full_hi, hi) of query rows
    [i0, i0 + BLOCK_M)."""
    shift = n_k - n_q  # query i stands at key position pos_i = i + shift
    lo_seen = 0
    lo = 0
    full_lo = 0
    hi = n_k
    full_hi = n_k // BLOCK_N * BLOCK_N
    if CAUSAL:
        pos_first = i0 + shift
        pos_last = i0 + BLOCK_M - 1 + shift
        hi = gl.maximum(gl.minimum(n_k, pos_last + 1), 0)  # keys past pos_last: invisible to all
        if WINDOWED:
            lo_seen = gl.maximum(0, pos_first - window + 1)
            lo = lo_seen // BLOCK_N * BLOCK_N
            full_lo = gl.maximum(0, pos_last - window + 1)
            full_lo = gl.minimum((full_lo + BLOCK_N - 1) // BLOCK_N * BLOCK_N, gl.maximum(hi, lo))
        full_hi = gl.maximum(gl.minimum(n_k, pos_first + 1), 0) // BLOCK_N * BLOCK_N
        full_hi = gl.minimum(gl.maximum(full_hi, full_lo), gl.maximum(hi, full_lo))
    return lo_seen, lo, full_lo, full_hi, hi


@gluon.jit
def _phase(count, STAGES: gl.constexpr):
    """The phase to wait for at the count-th use of a ring of STAGES slots (slot count % STAGES):
    the slot has completed count // STAGES rounds before, so the parity of that count."""
    return (count // STAGES) & 1
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-work-item>>[init]
@gluon.jit
def _work_item(sh, item):
    """Work item `item`: its batch, head and kv head, first query row i0, key range [lo, hi) in
    n_tiles key tiles, and the interior [full_lo, full_hi) where no pair is masked."""
    BLOCK_N: gl.constexpr = sh.BLOCK_N
    off_bh = item // sh.n_m  # consecutive items: the query tiles of one head (K, V stay in L2)
    j = item % sh.n_m
    if sh.CAUSAL:  # zigzag: items 2p and 2p + 1 hold n_m + 1 key tiles together (n_m even)
        start_m = gl.where(j % 2 == 0, sh.n_m - 1 - j // 2, j // 2)
    else:
        start_m = sh.n_m - 1 - j
    off_b = off_bh // sh.n_heads
    off_h = off_bh % sh.n_heads
    off_hkv = off_h // sh.group  # GQA: query head h reads kv head h // (Hq / Hkv)
    i0 = start_m * sh.BLOCK_M
    # The same bounds as part 1's kernel (kernels.key_range), for the whole 128-row tile.
    _, lo, full_lo, full_hi, hi = _key_range(i0, sh.n_q, sh.n_k, sh.window, sh.BLOCK_M, BLOCK_N,
                                             sh.CAUSAL, sh.WINDOWED)
    n_tiles = gl.maximum(hi - lo + BLOCK_N - 1, 0) // BLOCK_N
    return off_b, off_h, off_hkv, i0, lo, full_lo, full_hi, n_tiles
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-shared>>[init]
@aggregate
class Shared:
    """What every partition of one program takes: the descriptors of Q, K, V and O and the lse
    pointer; the shared buffers and their barriers; the problem's sizes; the constants."""

    desc_q: tma.tensor_descriptor
    desc_k: tma.tensor_descriptor
    desc_v: tma.tensor_descriptor
    desc_o: tma.tensor_descriptor
    lse_ptr: gl.tensor
    q_smem: gl.shared_memory_descriptor  # Q's two 64-row halves
    k_smem: gl.shared_memory_descriptor  # the K ring: STAGES slots
    v_smem: gl.shared_memory_descriptor  # the V ring
    o_smem: gl.shared_memory_descriptor  # O's two halves, one per consumer
    q_ready: gl.shared_memory_descriptor  # the barriers: one for Q ...
    q_empty: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor  # ... one per slot of each ring ...
    k_empty: gl.shared_memory_descriptor
    v_ready: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    turn: gl.shared_memory_descriptor  # ... and the ping-pong's two turns
    qk_scale: gl.tensor
    n_q: gl.tensor
    n_k: gl.tensor
    n_heads: gl.tensor
    group: gl.tensor
    window: gl.tensor
    n_m: gl.tensor
    n_items: gl.tensor
    stride_lse_b: gl.tensor
    stride_lse_h: gl.tensor
    BLOCK_M: gl.constexpr
    BLOCK_N: gl.constexpr
    HEAD_DIM: gl.constexpr
    STAGES: gl.constexpr
    CAUSAL: gl.constexpr
    WINDOWED: gl.constexpr
    PINGPONG: gl.constexpr

    @constexpr_function
    def __init__(self, **fields):
        for name, value in fields.items():  # constants arrive unwrapped: wrap them again
            setattr(self, name, value if isinstance(value, base_value) else gl.constexpr(value))
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-loader>>[init]
@gluon.jit
def _loader(sh):
    """The producer warp: per work item, Q once, then K_j and V_j into rings of STAGES slots."""
    HALF: gl.constexpr = sh.BLOCK_M // 2
    STAGES: gl.constexpr = sh.STAGES
    kv = 0  # key tiles loaded so far over all items: slot kv % STAGES, round kv // STAGES
    done = 0  # items done by this program
    for pair in range(gl.program_id(0), (sh.n_items + 1) // 2, gl.num_programs(0)):
        for item in range(2 * pair, gl.minimum(2 * pair + 2, sh.n_items)):
            off_b, off_h, off_hkv, i0, lo, full_lo, full_hi, n_tiles = _work_item(sh, item)
            mbarrier.wait(sh.q_empty, (done & 1) ^ 1)  # both consumers are done with the last Q
            mbarrier.expect(sh.q_ready, 2 * sh.desc_q.block_type.nbytes)
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0, 0], sh.q_ready,
                                            sh.q_smem.index(0))
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0 + HALF, 0], sh.q_ready,
                                            sh.q_smem.index(1))
            for t in range(n_tiles):
                slot = kv % STAGES
                before = _phase(kv, STAGES) ^ 1  # the phase before this round's
                start_n = lo + t * sh.BLOCK_N
                mbarrier.wait(sh.k_empty.index(slot), before)  # K_{j-STAGES} is multiplied
                mbarrier.expect(sh.k_ready.index(slot), sh.desc_k.block_type.nbytes)
                tma.async_copy_global_to_shared(sh.desc_k, [off_b, off_hkv, start_n, 0],
                                                sh.k_ready.index(slot), sh.k_smem.index(slot))
                mbarrier.wait(sh.v_empty.index(slot), before)  # P~ V_{j-STAGES} is done
                mbarrier.expect(sh.v_ready.index(slot), sh.desc_v.block_type.nbytes)
                tma.async_copy_global_to_shared(sh.desc_v, [off_b, off_hkv, start_n, 0],
                                                sh.v_ready.index(slot), sh.v_smem.index(slot))
                kv += 1
            done += 1
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-softmax>>[init]
@gluon.jit
def _softmax_step(sh, s, m_i, l_i, start_n, full_lo, full_hi, offs_n, pos_i):
    """The online softmax on raw scores s = q_i.k_j of the key tile at start_n: returns P~,
    alpha_i, m'_i^new and l_i^new (m' in base-2 units, as in part 1)."""
    if (start_n < full_lo) | (start_n + s.shape[1] > full_hi):  # a boundary tile: mask
        if sh.CAUSAL:  # j <= i and j < N_k: one comparison with the row's last visible column
            last = gl.minimum(pos_i - start_n, sh.n_k - 1 - start_n)
            visible = offs_n[None, :] <= last[:, None]
        else:
            visible = start_n + offs_n[None, :] < sh.n_k
        if sh.WINDOWED:  # j > i - W, in the tile's columns
            visible = visible & (offs_n[None, :] > (pos_i - sh.window - start_n)[:, None])
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * sh.qk_scale)  # tau' > 0 commutes with max
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing
    p_tilde = gl.exp2(s * sh.qk_scale - m_use[:, None])  # P~_ij = 2^(tau' q_i.k_j - m'_i^new)
    alpha = gl.exp2(m_i - m_use)  # alpha_i = 2^(m'_i - m'_i^new)
    l_i = l_i * alpha + gl.sum(p_tilde, 1)  # l_i^new = alpha_i l_i + sum_j P~_ij
    return p_tilde, alpha, m_new, l_i
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-consumer>>[init]
@gluon.jit
def _consumer(sh, WG: gl.constexpr):
    """Consumer warpgroup WG: rows [i0 + 64 WG, i0 + 64 WG + 64) of every work item."""
    HALF: gl.constexpr = sh.BLOCK_M // 2
    BLOCK_N: gl.constexpr = sh.BLOCK_N
    HEAD_DIM: gl.constexpr = sh.HEAD_DIM
    STAGES: gl.constexpr = sh.STAGES
    dtype: gl.constexpr = sh.desc_o.dtype
    # wgmma accumulators: S is 64 x BLOCK_N, acc is 64 x HEAD_DIM, one warpgroup along M
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    q = sh.q_smem.index(WG).reshape([HALF, HEAD_DIM])
    o_tile = sh.o_smem.index(WG)

    kv = 0  # key tiles consumed so far over all items
    done = 0
    turn_phase = 1 - WG  # warpgroup 0 takes the first turn
    for pair in range(gl.program_id(0), (sh.n_items + 1) // 2, gl.num_programs(0)):
        for item in range(2 * pair, gl.minimum(2 * pair + 2, sh.n_items)):
            off_b, off_h, off_hkv, i0, lo, full_lo, full_hi, n_tiles = _work_item(sh, item)
            i0 = i0 + WG * HALF
            offs_m = i0 + gl.arange(0, HALF, layout=row_s)
            pos_i = offs_m + (sh.n_k - sh.n_q)
            m_i = gl.full([HALF], float("-inf"), gl.float32, layout=row_s)  # m'_i
            l_i = gl.zeros([HALF], gl.float32, layout=row_s)  # l_i
            acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)  # sum of P~ V
            mbarrier.wait(sh.q_ready, done & 1)
            if n_tiles > 0:
                # prologue: S_0 = Q K_0^T, then its softmax
                slot = kv % STAGES
                mbarrier.wait(sh.k_ready.index(slot), _phase(kv, STAGES))
                k_t = sh.k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
                s = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
                s = warpgroup_mma_wait(0, deps=[s])
                mbarrier.arrive(sh.k_empty.index(slot))
                p_tilde, alpha, m_i, l_i = _softmax_step(
                    sh, s, m_i, l_i, lo, full_lo, full_hi, offs_n, pos_i)
                p = gl.convert_layout(p_tilde.to(dtype), p_layout)
                for t in range(n_tiles - 1):
                    cur = (kv + t) % STAGES
                    nxt = (kv + t + 1) % STAGES
                    if sh.PINGPONG:  # issue only in this warpgroup's turn
                        mbarrier.wait(sh.turn.index(WG), turn_phase)
                        turn_phase ^= 1
                    mbarrier.wait(sh.k_ready.index(nxt), _phase(kv + t + 1, STAGES))
                    k_t = sh.k_smem.index(nxt).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
                    s = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)  # S_{t+1}
                    mbarrier.wait(sh.v_ready.index(cur), _phase(kv + t, STAGES))
                    v_t = sh.v_smem.index(cur).reshape([BLOCK_N, HEAD_DIM])
                    acc = warpgroup_mma(p, v_t, acc, is_async=True)  # acc += P~_t V_t
                    if sh.PINGPONG:
                        mbarrier.arrive(sh.turn.index(1 - WG))
                    s = warpgroup_mma_wait(1, deps=[s])  # S_{t+1} done; P~_t V_t may run on
                    mbarrier.arrive(sh.k_empty.index(nxt))
                    p_tilde, alpha, m_i, l_i = _softmax_step(  # under P~_t V_t
                        sh, s, m_i, l_i, lo + (t + 1) * BLOCK_N, full_lo, full_hi, offs_n, pos_i)
                    acc, p = warpgroup_mma_wait(0, deps=[acc, p])  # keeps P~_t's registers
                    mbarrier.arrive(sh.v_empty.index(cur))
                    acc = acc * gl.convert_layout(alpha, row_o)[:, None]  # acc^new = alpha acc
                    p = gl.convert_layout(p_tilde.to(dtype), p_layout)
                mbarrier.arrive(sh.q_empty)  # the item's last S is done: the next Q may load
                last = (kv + n_tiles - 1) % STAGES
                mbarrier.wait(sh.v_ready.index(last), _phase(kv + n_tiles - 1, STAGES))
                v_t = sh.v_smem.index(last).reshape([BLOCK_N, HEAD_DIM])
                acc = warpgroup_mma(p, v_t, acc, is_async=True)
                acc, p = warpgroup_mma_wait(0, deps=[acc, p])
                mbarrier.arrive(sh.v_empty.index(last))
                if sh.PINGPONG:  # one turn per key tile, as the other warpgroup takes
                    mbarrier.wait(sh.turn.index(WG), turn_phase)
                    turn_phase ^= 1
                    mbarrier.arrive(sh.turn.index(1 - WG))
            else:
                mbarrier.arrive(sh.q_empty)
            kv += n_tiles
            done += 1

            empty = l_i == 0.0  # rows that saw no key: O = 0 and lse = -inf, never NaN
            l_safe = gl.where(empty, 1.0, l_i)
            out = acc * gl.convert_layout(1.0 / l_safe, row_o)[:, None]  # O_i = acc_i / l_i
            tma.store_wait(0)  # the previous item's O has left o_tile
            o_tile.reshape([HALF, HEAD_DIM]).store(out.to(dtype))
            fence_async_shared()  # the TMA (async proxy) reads what these threads wrote
            tma.async_copy_shared_to_global(sh.desc_o, [off_b, off_h, i0, 0], o_tile)
            lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_safe)) * LN2)
            gl.store(sh.lse_ptr + off_b.to(gl.int64) * sh.stride_lse_b  # int64: past 2^31
                     + off_h.to(gl.int64) * sh.stride_lse_h + offs_m, lse, mask=offs_m < sh.n_q)
    tma.store_wait(0)
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-kernel>>[init]
@gluon.jit(do_not_specialize=["n_q", "n_k", "n_heads", "group", "window", "n_m", "n_items",
                              "stride_lse_b", "stride_lse_h"])
def _attn_fwd_ws(desc_q, desc_k, desc_v, desc_o, lse_ptr,
                 qk_scale, n_q, n_k, n_heads, group, window, n_m, n_items,
                 stride_lse_b, stride_lse_h,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOWED: gl.constexpr,
                 PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    dtype: gl.constexpr = desc_q.dtype
    HALF: gl.constexpr = BLOCK_M // 2
    # each buffer keeps the descriptor's (1, 1, rows, HEAD_DIM) tile shape, one per slot
    q_smem = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF, HEAD_DIM], desc_q.layout)
    o_smem = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF, HEAD_DIM], desc_o.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_DIM], desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_DIM], desc_v.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)  # the TMA completes it
    mbarrier.init(q_empty, count=2)  # both consumers release it
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)

    sh = Shared(desc_q=desc_q, desc_k=desc_k, desc_v=desc_v, desc_o=desc_o, lse_ptr=lse_ptr,
                q_smem=q_smem, k_smem=k_smem, v_smem=v_smem, o_smem=o_smem, q_ready=q_ready,
                q_empty=q_empty, k_ready=k_ready, k_empty=k_empty, v_ready=v_ready,
                v_empty=v_empty, turn=turn, qk_scale=qk_scale, n_q=n_q, n_k=n_k,
                n_heads=n_heads, group=group, window=window, n_m=n_m, n_items=n_items,
                stride_lse_b=stride_lse_b, stride_lse_h=stride_lse_h, BLOCK_M=BLOCK_M,
                BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, STAGES=STAGES, CAUSAL=CAUSAL,
                WINDOWED=WINDOWED, PINGPONG=PINGPONG)
    gl.warp_specialize([(_consumer, (sh, 0)), (_consumer, (sh, 1)), (_loader, (sh,))],
                       [4, 1], [CONSUMER_REGS, 24])
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-config>>[init]
MAX_HEAD_DIM = 128  # the K/V ring of d = 256 would not fit in shared memory
BLOCK_M = 128  # two consumer warpgroups of 64 rows
BLOCK_N = 128
STAGES = 2
CONSUMER_REGS = 240  # the loader keeps 24: 2 x 4 x 32 x 240 + 4 x 32 x 24 < 64 Ki
SMEM_LIMIT = 227 * 1024  # per block on Hopper


def smem_bytes(head_dim: int, elem: int, block_n: int = BLOCK_N, stages: int = STAGES) -> int:
    """Shared memory of one program: Q and O (two 64-row halves each) and the K and V rings."""
    return elem * head_dim * (2 * BLOCK_M + 2 * stages * block_n)
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-wrapper>>[init]
_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


_FORWARD_ONLY = "the backward pass is out of scope"


def _check_hopper_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int) -> None:
    check_forward_only("flash_attention_hopper", q, k, v, why=_FORWARD_ONLY)
    if q.dtype not in _GL_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported by flash_attention_hopper: use "
                         "float16 or bfloat16 (flash_attention also takes float32)")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"flash_attention_hopper takes head_dim in [1, {MAX_HEAD_DIM}], got "
                         f"d={d}: its K/V ring does not fit in shared memory beyond; "
                         "flash_attention takes up to 256")
    if INTERPRET or q.device.type != "cuda":
        raise ValueError(
            f"flash_attention_hopper needs a Hopper GPU (compute capability 9.x), got device "
            f"{q.device}{' under TRITON_INTERPRET=1' if INTERPRET else ''}: Gluon kernels do not "
            "run in Triton's interpreter. flash_attention runs there"
        )
    if (cc := capability(q.device))[0] != 9:
        raise ValueError(
            "flash_attention_hopper issues Hopper's warpgroup MMA (wgmma) and register "
            f"reallocation, which only compute capability 9.x has; got {cc[0]}.{cc[1]} on "
            f"{q.device}. flash_attention runs on any GPU with the TMA (9.0 and newer)"
        )


def _descriptor(t: torch.Tensor, rows: int, head_dim: int) -> TmaArg:
    """A (B, H, N, d) descriptor of a TMA-ready tensor with a (1, 1, rows, head_dim) tile."""
    return TmaArg(t, list(t.shape), tma_strides(t), [1, 1, rows, head_dim],
                  _tile_layout(rows, head_dim, t.dtype))


@functools.cache
def _tile_layout(rows: int, head_dim: int, dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The shared-memory layout of a (1, 1, rows, head_dim) tile: built once per tile shape and
    dtype, as building it costs more host time than the rest of a descriptor."""
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, head_dim], _GL_DTYPES[dtype])


def flash_attention_hopper(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    persistent: bool = True,
    pingpong: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward with FlashAttention-3's schedule, for Hopper GPUs.

    The function `attention_ref` specifies, like `flash_attention`: q: (B, Hq, Nq, d); k, v:
    (B, Hkv, Nk, d), Hq % Hkv == 0; causal aligns bottom-right; window=W (causal only) keeps the
    W latest keys; the default scale is 1/sqrt(d). float16 or bfloat16, any d in [1, 128], on a
    GPU of compute capability 9.x. Inputs the TMA cannot read in place (a strided head_dim, an
    odd stride, an unaligned start, a row of d elements off 16 bytes) cost one padded copy, as in
    `flash_attention`.

    persistent=False launches one program per pair of work items instead of one per SM, and
    pingpong=False lets the two consumer warpgroups issue their products in any order: both
    exist to measure what each step of the schedule buys, and change no result.

    Returns O: (B, Hq, Nq, d) in q's dtype (contiguous when a row of d elements is a multiple of
    16 bytes, else a view of a padded buffer) and, with return_lse, the natural-log log-sum-exp
    (B, Hq, Nq) in float32. A row with no visible key gives zeros and lse = -inf.
    """
    key = signature((q, k, v), causal, window, scale, persistent, pingpong, *_settings())
    plan = planned(_PLANS, key)
    if plan is not None:  # checked before: grad mode is all that is left
        check_forward_only("flash_attention_hopper", q, k, v, why=_FORWARD_ONLY)
        o_shape, d, run = plan
        o = torch.empty(o_shape, dtype=q.dtype, device=q.device)
        if o_shape[-1] != d:  # rows padded to 16 bytes; a view only then (a view costs host time)
            o = o[..., :d]
        lse = torch.empty(o_shape[:3], dtype=torch.float32, device=q.device)
        run(q, k, v, o, lse)
        return (o, lse) if return_lse else o
    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)  # 1/sqrt(d) of the caller's d
    _check_hopper_inputs(q, k, v, d)
    ready = [tma_layout(t) for t in (q, k, v)]
    head_dim = 64 if d <= 64 else 128  # the tile's width; the TMA zero-fills d..head_dim

    width = padded_width(d, q.element_size())
    o = torch.empty((b, hq, nq, width), dtype=q.dtype, device=q.device)
    if width != d:  # rows padded to 16 bytes; a view only then (a view costs host time)
        o = o[..., :d]
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device)
    n_m = cdiv(nq, BLOCK_M)
    n_items = n_m * b * hq
    pairs = cdiv(n_items, 2)
    grid = (min(pairs, num_sms(q.device)) if persistent else pairs,)
    args = (
        _descriptor(ready[0], BLOCK_M // 2, head_dim), _descriptor(ready[1], BLOCK_N, head_dim),
        _descriptor(ready[2], BLOCK_N, head_dim), _descriptor(o, BLOCK_M // 2, head_dim), lse,
        tau * LOG2E, nq, nk, hq, hq // hkv, min(window or 0, nk), n_m, n_items,  # int32
        lse.stride(0), lse.stride(1))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=head_dim, STAGES=STAGES,
                CAUSAL=causal, WINDOWED=window is not None, PINGPONG=pingpong,
                CONSUMER_REGS=CONSUMER_REGS, num_warps=4)
    launch(_attn_fwd_ws, grid, *args, **meta)
    # A signature's first call leaves a mark, its second a plan (a prompt length seen once pays
    # for none); only for inputs the TMA reads in place (a copy is no plan's to make)
    if all(r is t for r, t in zip(ready, (q, k, v), strict=True)):
        keep(_PLANS, key, lambda: ((b, hq, nq, width), d, Prepared(_attn_fwd_ws, grid, args, meta)))
    return (o, lse) if return_lse else o


# A call's plan, kept per signature (kernels.signature: shapes, strides, dtypes, device,
# alignment, options): O's buffer shape, d and the launch, prepared (kernels.Prepared).
_PLANS: dict[tuple, object] = {}


def _settings() -> tuple:
    """The module's settings a plan depends on: part of its key, so that a benchmark that
    changes one plans anew."""
    return BLOCK_M, BLOCK_N, STAGES, CONSUMER_REGS, num_sms
# ~/~ end
# ~/~ end

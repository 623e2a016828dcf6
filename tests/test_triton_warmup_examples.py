# ~/~ begin <<docs/lab/01b-triton-warmup.md#tests/test_triton_warmup_examples.py>>[init]
"""Worked examples of the rest of triton.language that Labs 02 and 03 use, each with its check
(tangled from docs/lab/01b-triton-warmup.md)."""

import pytest
import torch
import triton
import triton.language as tl

from minimodel.triton_warmup import row_sum

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)

# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-scores>>[init]
@triton.jit
def _scores_kernel(q_ptr, k_ptr, s_ptr, n_q, n_k, d, scale,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   DOT_PRECISION: tl.constexpr):
    """S = scale * Q K^T for Q (n_q, d), K (n_k, d), both contiguous; one program per tile of S."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(0, d, BLOCK_K, num_stages=3):
        start = tl.multiple_of(start, BLOCK_K)
        offs_k = start + tl.arange(0, BLOCK_K)
        q = tl.load(q_ptr + offs_m[:, None] * d + offs_k[None, :],
                    mask=(offs_m[:, None] < n_q) & (offs_k[None, :] < d), other=0.0)
        k = tl.load(k_ptr + offs_n[:, None] * d + offs_k[None, :],
                    mask=(offs_n[:, None] < n_k) & (offs_k[None, :] < d), other=0.0)
        acc = tl.dot(q, tl.trans(k), acc, input_precision=DOT_PRECISION)  # acc += Q_tile K_tile^T
    tl.store(s_ptr + offs_m[:, None] * n_k + offs_n[None, :], acc * scale,
             mask=(offs_m[:, None] < n_q) & (offs_n[None, :] < n_k))


@pytest.mark.parametrize(("n_q", "n_k", "d"), [(1, 1, 1), (20, 33, 37), (17, 40, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_scores_tile_by_tile(n_q, n_k, d, dtype):
    gen = torch.Generator().manual_seed(d)
    q = torch.randn(n_q, d, generator=gen).to(dtype=dtype, device=DEVICE)
    k = torch.randn(n_k, d, generator=gen).to(dtype=dtype, device=DEVICE)
    s = torch.empty(n_q, n_k, device=DEVICE)
    grid = (triton.cdiv(n_q, 16), triton.cdiv(n_k, 16))
    precision = "ieee" if dtype == torch.float32 else "tf32"  # as Lab 02 passes it
    _scores_kernel[grid](q, k, s, n_q, n_k, d, 0.125, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16,
                         DOT_PRECISION=precision)
    expected = 0.125 * q.double() @ k.double().T
    torch.testing.assert_close(s.double(), expected, atol=1e-4, rtol=1e-4)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-logsumexp>>[init]
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): e^x = 2^(x log2 e)
LN2 = tl.constexpr(0.6931471805599453)  # ln(2): log(x) = log2(x) ln 2


@triton.jit
def _logsumexp_kernel(x_ptr, lse_ptr, n_rows, n_cols,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """lse_i = log sum_j e^(x_ij) of a contiguous (n_rows, n_cols) x, in one pass over tiles."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max m'_i (base-2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum l_i
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask,
                    other=float("-inf"))
        s = x * LOG2E  # s'_ij = x_ij log2(e)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing
        alpha = tl.math.exp2(m_i - m_use)  # alpha_i = 2^(m'_i - m'_i^new)
        l_i = l_i * alpha + tl.sum(tl.math.exp2(s - m_use[:, None]), 1)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    tl.store(lse_ptr + rows, lse, mask=rows < n_rows)


@pytest.mark.parametrize(("n_rows", "n_cols"), [(1, 1), (5, 100), (19, 1000)])
def test_online_logsumexp_over_tiles(n_rows, n_cols):
    gen = torch.Generator().manual_seed(n_cols)
    x = (10 * torch.randn(n_rows, n_cols, generator=gen)).to(DEVICE)
    x[0, : n_cols // 2] = float("-inf")  # masked entries
    if n_rows > 1:
        x[1] = float("-inf")  # a row that sees nothing: -inf, not NaN
    lse = torch.empty(n_rows, device=DEVICE)
    _logsumexp_kernel[(triton.cdiv(n_rows, 16),)](x, lse, n_rows, n_cols, BLOCK_M=16,
                                                  BLOCK_N=32)
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.double(), 1), atol=1e-5,
                               rtol=1e-6)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-merge>>[init]
@triton.jit
def _merge_kernel(o_a_ptr, lse_a_ptr, o_b_ptr, lse_b_ptr, o_ptr, lse_ptr, n_rows,
                  D: tl.constexpr, BLOCK_M: tl.constexpr):
    """Merge two (O_u, lse_u) of contiguous (n_rows, D) outputs into (O, lse)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < n_rows
    cols = tl.arange(0, D)
    lse_a = tl.load(lse_a_ptr + rows, mask=ok, other=float("-inf"))
    lse_b = tl.load(lse_b_ptr + rows, mask=ok, other=float("-inf"))
    m = tl.maximum(lse_a, lse_b)
    m = tl.where(m == float("-inf"), 0.0, m)  # both shares empty: weights e^(-inf) = 0
    w_a = tl.exp(lse_a - m)
    w_b = tl.exp(lse_b - m)
    w = w_a + w_b
    o_a = tl.load(o_a_ptr + rows[:, None] * D + cols[None, :], mask=ok[:, None], other=0.0)
    o_b = tl.load(o_b_ptr + rows[:, None] * D + cols[None, :], mask=ok[:, None], other=0.0)
    w_safe = tl.where(w == 0.0, 1.0, w)
    o = (w_a[:, None] * o_a + w_b[:, None] * o_b) / w_safe[:, None]
    tl.store(o_ptr + rows[:, None] * D + cols[None, :], o, mask=ok[:, None])
    tl.store(lse_ptr + rows, tl.where(w == 0.0, float("-inf"), m + tl.log(w_safe)), mask=ok)


def partial(scores, values):
    """(O, lse) of softmax(scores) @ values, row by row; zeros and -inf for an empty share."""
    lse = torch.logsumexp(scores, dim=1)
    p = torch.exp(scores - lse[:, None]).nan_to_num(0.0)
    return p @ values, lse


def test_merging_two_shares_gives_the_whole():
    gen = torch.Generator().manual_seed(7)
    scores, values = torch.randn(21, 40, generator=gen), torch.randn(40, 16, generator=gen)
    scores[3, 25:] = float("-inf")  # row 3 sees nothing in share b
    scores[4] = float("-inf")  # row 4 sees nothing at all
    (o_a, lse_a), (o_b, lse_b) = partial(scores[:, :25], values[:25]), partial(scores[:, 25:],
                                                                                values[25:])
    o, lse = torch.empty(21, 16), torch.empty(21)
    args = [t.to(DEVICE) for t in (o_a, lse_a, o_b, lse_b, o, lse)]
    _merge_kernel[(triton.cdiv(21, 8),)](*args, 21, D=16, BLOCK_M=8)
    o_whole, lse_whole = partial(scores, values)
    torch.testing.assert_close(args[4].cpu(), o_whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(args[5].cpu(), lse_whole, atol=1e-5, rtol=1e-5)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-flags>>[init]
@triton.jit
def _clamp_and_flag_kernel(index_ptr, out_ptr, flag_ptr, n, n_rows, BLOCK: tl.constexpr):
    """out = index clamped into [0, n_rows); flag |= 1 if any entry was outside."""
    step = tl.num_programs(0) * BLOCK  # the grid's programs take turns, block by block
    for start in tl.range(tl.program_id(0) * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < n
        idx = tl.load(index_ptr + offs, mask=ok, other=0)
        outside = ok & ((idx < 0) | (idx >= n_rows))
        tl.store(out_ptr + offs, tl.minimum(tl.maximum(idx, 0), n_rows - 1), mask=ok)
        tl.atomic_or(flag_ptr, tl.max(outside.to(tl.int32), 0))  # one word, many programs


@pytest.mark.parametrize(("bad", "programs"), [(False, 1), (True, 2), (True, 5)])
def test_clamp_and_flag(bad, programs):
    index = torch.tensor([0, 9, 3, 12, 5, -2, 7] * 5 if bad else [0, 9, 3, 5] * 9,
                         dtype=torch.int32, device=DEVICE)
    out = torch.empty_like(index)
    flag = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    _clamp_and_flag_kernel[(programs,)](index, out, flag, index.numel(), 10, BLOCK=4)
    assert torch.equal(out, index.clamp(0, 9)) and flag.item() == int(bad)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-last-program>>[init]
@triton.jit
def _sum_by_the_last_program(x_ptr, partial_ptr, count_ptr, out_ptr, n, BLOCK: tl.constexpr,
                             BLOCK_P: tl.constexpr):
    """out = sum(x): each program sums its block into partial[pid]; the last to finish adds
    the partials and sets the counter back to 0 for the next launch."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(partial_ptr + pid, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), 0))
    tl.debug_barrier()  # every thread of this program has stored before the count
    done = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")  # the count before ours
    if done == tl.num_programs(0) - 1:  # the last: every other program has counted itself
        tl.debug_barrier()  # and every thread of this one reads after the count
        parts = tl.arange(0, BLOCK_P)
        mine = tl.load(partial_ptr + parts, mask=parts < tl.num_programs(0), other=0.0)
        tl.store(out_ptr, tl.sum(mine, 0))
        tl.store(count_ptr, 0)


@pytest.mark.parametrize("n", [1, 37, 300])
def test_the_last_program_adds_the_partials(n):
    x = torch.randn(n, device=DEVICE)
    programs = triton.cdiv(n, 8)
    partial, out = torch.empty(programs, device=DEVICE), torch.empty(1, device=DEVICE)
    count = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    for _ in range(2):  # the second launch counts from the 0 the first one left
        _sum_by_the_last_program[(programs,)](x, partial, count, out, n, BLOCK=8, BLOCK_P=64)
        torch.testing.assert_close(out, x.sum()[None], atol=1e-5, rtol=1e-5)
        assert count.item() == 0
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-per-block>>[init]
@triton.jit
def _slots_kernel(table_ptr, out_ptr, n_keys, BLOCK_N: tl.constexpr, BS: tl.constexpr):
    """out[j] = table[j // BS] * BS + j % BS for the keys j < n_keys: one tile per program."""
    start = tl.program_id(0) * BLOCK_N
    keys = start + tl.arange(0, BLOCK_N)
    blk = start // BS + tl.arange(0, BLOCK_N // BS)  # the tile's blocks, one load each
    entry = tl.load(table_ptr + blk, mask=blk * BS < n_keys, other=0)
    per_key = tl.reshape(tl.broadcast_to(entry[:, None], [BLOCK_N // BS, BS]), [BLOCK_N])
    tl.store(out_ptr + keys, per_key * BS + keys % BS, mask=keys < n_keys)


@pytest.mark.parametrize("n_keys", [1, 16, 45, 64])
def test_one_load_per_block_gives_every_key_its_slot(n_keys):
    bs = 4
    table = torch.randperm(32, device=DEVICE, dtype=torch.int64)[: triton.cdiv(n_keys, bs)]
    out = torch.full((n_keys,), -1, dtype=torch.int64, device=DEVICE)
    _slots_kernel[(triton.cdiv(n_keys, 16),)](table, out, n_keys, BLOCK_N=16, BS=bs)
    j = torch.arange(n_keys, device=DEVICE)
    assert torch.equal(out, table[j // bs] * bs + j % bs)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-sort>>[init]
@triton.jit
def _order_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[r] = the index of the r-th largest of x[0..n) (x: int32 >= 0), ties by index."""
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0).to(tl.int64)
    key = tl.where(i < n, x * BLOCK + (BLOCK - 1 - i), -1)  # value, then index reversed
    key = tl.sort(key, descending=True)
    tl.store(out_ptr + i, BLOCK - 1 - key % BLOCK, mask=i < n)


@pytest.mark.parametrize("values", [[3, 1, 4, 1, 5, 9, 2, 6], [7] * 5, list(range(20)), [0]])
def test_sorting_packed_keys_orders_indices_by_value(values):
    n = len(values)
    x = torch.tensor(values, dtype=torch.int32, device=DEVICE)
    out = torch.full((n,), -1, dtype=torch.int64, device=DEVICE)
    _order_kernel[(1,)](x, out, n, BLOCK=triton.next_power_of_2(max(n, 2)))
    assert out.tolist() == sorted(range(n), key=lambda r: (-values[r], r))
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-example-missing-mask>>[init]
@triton.jit
def _row_sum_unmasked(x_ptr, out_ptr, n_cols, stride_row, BLOCK_N: tl.constexpr):
    """A bug on purpose: the tile's lanes past n_cols are read and summed."""
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * stride_row + tl.arange(0, BLOCK_N))  # no mask
    tl.store(out_ptr + row, tl.sum(x, 0))


def test_a_missing_mask_reads_the_canary():
    buf = torch.full((3, 64), float("nan"), device=DEVICE)  # rows 64 apart, NaN after col 36
    x = buf[:, :37]
    x.fill_(1.0)
    out = torch.empty(3, device=DEVICE)
    _row_sum_unmasked[(3,)](x, out, 37, x.stride(0), BLOCK_N=64)
    assert out.isnan().all()  # the lanes 37..63 of each row read its own NaN, inside the buffer
    assert torch.equal(row_sum(x), torch.full((3,), 37.0, device=DEVICE))
# ~/~ end
# ~/~ end

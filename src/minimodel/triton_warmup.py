# ~/~ begin <<docs/lab/01b-triton-warmup.md#src/minimodel/triton_warmup.py>>[init]
"""A Triton warm-up: four small kernels, one idea of the language each (Lab 01b).

Tangled from docs/lab/01b-triton-warmup.md; edit the page, not this file.
"""

import os

import torch
import triton
import triton.language as tl

__all__ = ["MAX_SOFTMAX_COLS", "add", "gather_rows", "row_sum", "softmax_rows"]

# Read when this module is imported, like triton itself reads it: set it before importing.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
MAX_SOFTMAX_COLS = 65536  # the longest row softmax_rows takes: one row is one tile

# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-validate>>[init]
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def _check(t: object, name: str, dims: int, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    """t as a tensor the kernels can read, or TypeError / ValueError naming what is wrong."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name} has dtype {t.dtype}; the kernels take "
                         f"{', '.join(str(d) for d in dtypes)}")
    if t.requires_grad:
        raise ValueError(f"{name} requires grad: the kernels are forward-only "
                         "(call them under torch.no_grad())")
    if INTERPRET:
        if t.device.type != "cpu":
            raise ValueError(f"under TRITON_INTERPRET=1 the kernels take CPU tensors, got {name} "
                             f"on device {t.device}")
        if t.dtype == torch.bfloat16:
            raise ValueError(f"{name} is torch.bfloat16, which Triton's interpreter computes "
                             "wrongly: use float16 or float32 on the CPU, or run on a GPU")
    elif t.device.type != "cuda":
        raise ValueError(f"{name} is on device {t.device}: the kernels need CUDA tensors. "
                         "Without a GPU, set TRITON_INTERPRET=1 before triton is imported to "
                         "run them in the interpreter")
    return t


def _same_device(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    if a.device != b.device:
        raise ValueError(f"{names} must be on one device, got {a.device} and {b.device}")
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-add-kernel>>[init]
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # which block of BLOCK elements this program owns
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # the indices of its elements
    mask = offs < n  # the last block is ragged: its lanes past n touch no memory
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    y = tl.load(y_ptr + offs * stride_y, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-add>>[init]
# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-add-interface>>[init]
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y for two 1-D tensors of one length, dtype and device: a new contiguous tensor.

    x, y: (n,), any strides, float16 / bfloat16 / float32 (no bfloat16 under the interpreter).
    n = 0 gives an empty tensor. One program per block of elements; the last block is ragged.
    """
# ~/~ end
    _check(x, "x", 1, FLOAT_DTYPES)
    _check(y, "y", 1, FLOAT_DTYPES)
    _same_device(x, y, "x and y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one length, got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if x.dtype != y.dtype:
        raise ValueError(f"x and y must have one dtype, got {x.dtype} and {y.dtype}")
    n = x.shape[0]
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    if n == 0:
        return out
    block = 1024
    _add_kernel[(triton.cdiv(n, block),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=block)
    return out
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-row-sum-kernel>>[init]
@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_cols, stride_row, stride_col, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # one program per row
    x_row = x_ptr + row * stride_row
    acc = tl.zeros([BLOCK_N], tl.float32)  # one partial sum per lane
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols.to(tl.int64) * stride_col, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float32)  # padding lanes add other=0.0
    tl.store(out_ptr + row, tl.sum(acc, axis=0))  # the reduction: a block to a scalar
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-row-sum>>[init]
# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-row-sum-interface>>[init]
def row_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x, accumulated in float32: shape (M,), dtype float32.

    x: (M, N), any strides, float16 / bfloat16 / float32 (no bfloat16 under the interpreter).
    A row of N = 0 entries sums to 0. One program per row, walking its columns in tiles.
    """
# ~/~ end
    _check(x, "x", 2, FLOAT_DTYPES)
    m, n = x.shape
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        return out
    block_n = min(1024, max(16, triton.next_power_of_2(n)))
    _row_sum_kernel[(m,)](x, out, n, x.stride(0), x.stride(1), BLOCK_N=block_n)
    return out
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-softmax-rows-kernel>>[init]
@triton.jit
def _softmax_rows_kernel(x_ptr, out_ptr, n_cols, stride_xr, stride_xc, stride_or, stride_oc,
                         BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    mask = cols < n_cols
    # padding lanes read -inf: masked entries, probability 0
    x = tl.load(x_ptr + row * stride_xr + cols * stride_xc, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=0)  # m_i = max_j x_ij
    m = tl.where(m == float("-inf"), 0.0, m)  # a row of -inf: e^(x - 0) = 0, not e^NaN
    e = tl.exp(x - m)
    l = tl.sum(e, axis=0)  # noqa: E741  l_i = sum_j e^(x_ij - m_i)
    p = e / tl.where(l == 0.0, 1.0, l)
    tl.store(out_ptr + row * stride_or + cols * stride_oc, p.to(out_ptr.dtype.element_ty),
             mask=mask)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-softmax-rows>>[init]
# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-softmax-rows-interface>>[init]
def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """The softmax of each row of x: p_ij = e^(x_ij - m_i) / sum_j e^(x_ij - m_i), m_i = max_j x_ij.

    x: (M, N), any strides, float16 / bfloat16 / float32 (no bfloat16 under the interpreter),
    1 <= N <= MAX_SOFTMAX_COLS (a row is one tile). Computed in float32, returned in x's dtype,
    shape (M, N), contiguous. An entry -inf gets probability 0; a row of -inf only gives zeros
    (the course's convention for a row that sees nothing), never NaN. Raises ValueError for
    N = 0 and N > MAX_SOFTMAX_COLS, naming N.
    """
# ~/~ end
    _check(x, "x", 2, FLOAT_DTYPES)
    m, n = x.shape
    if not 1 <= n <= MAX_SOFTMAX_COLS:
        raise ValueError(f"softmax_rows takes rows of 1 to {MAX_SOFTMAX_COLS} entries, got "
                         f"N={n}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    block_n = triton.next_power_of_2(n)
    # more warps for a longer row: fewer of its elements per thread (the interpreter ignores it)
    num_warps = 4 if block_n <= 2048 else 8 if block_n <= 8192 else 16
    _softmax_rows_kernel[(m,)](x, out, n, x.stride(0), x.stride(1), out.stride(0),
                               out.stride(1), BLOCK_N=block_n, num_warps=num_warps)
    return out
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-gather-rows-kernel>>[init]
@triton.jit
def _gather_rows_kernel(table_ptr, index_ptr, out_ptr, n, n_rows, d,
                        stride_tr, stride_tc, stride_i, stride_or, stride_oc,
                        BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_i = tl.program_id(0).to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I)  # output rows
    offs_d = tl.program_id(1).to(tl.int64) * BLOCK_D + tl.arange(0, BLOCK_D)  # columns
    i_ok = offs_i < n
    rows = tl.load(index_ptr + offs_i * stride_i, mask=i_ok, other=0).to(tl.int64)
    follow = i_ok & (rows >= 0) & (rows < n_rows)  # never an entry outside the table
    d_ok = offs_d[None, :] < d
    # a pointer per row: a column of row starts plus a row of column offsets
    vals = tl.load(table_ptr + rows[:, None] * stride_tr + offs_d[None, :] * stride_tc,
                   mask=follow[:, None] & d_ok, other=0.0)
    tl.store(out_ptr + offs_i[:, None] * stride_or + offs_d[None, :] * stride_oc, vals,
             mask=i_ok[:, None] & d_ok)
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-gather-rows>>[init]
# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-gather-rows-interface>>[init]
def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index]: out[i, :] = table[index[i], :], a new contiguous (n, D) tensor.

    table: (R, D), any strides, float16 / bfloat16 / float32 (no bfloat16 under the
    interpreter); index: (n,), int32 or int64, any stride, on table's device. Every entry must
    lie in [0, R): one device sync checks them, and the first one outside raises ValueError
    naming its position i and its value. The kernel itself never follows an entry outside the
    table.
    """
# ~/~ end
    _check(table, "table", 2, FLOAT_DTYPES)
    _check(index, "index", 1, INDEX_DTYPES)
    _same_device(table, index, "table and index")
    r, d = table.shape
    n = index.shape[0]
    bad = ((index < 0) | (index >= r)).nonzero()
    if bad.numel():  # one device sync: the checked path
        i = int(bad[0, 0])
        raise ValueError(f"index[{i}] = {int(index[i])} is outside the table's rows [0, {r})")
    out = torch.empty((n, d), dtype=table.dtype, device=table.device)
    if n == 0 or d == 0:
        return out
    block_i, block_d = 16, min(128, max(16, triton.next_power_of_2(d)))
    grid = (triton.cdiv(n, block_i), triton.cdiv(d, block_d))
    _gather_rows_kernel[grid](table, index, out, n, r, d, table.stride(0), table.stride(1),
                              index.stride(0), out.stride(0), out.stride(1),
                              BLOCK_I=block_i, BLOCK_D=block_d)
    return out
# ~/~ end
# ~/~ end

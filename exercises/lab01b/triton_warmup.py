# ~/~ begin <<docs/lab/01b-triton-warmup.md#exercises/lab01b/triton_warmup.py>>[init]
"""Lab 01b: a Triton warm-up. Write a kernel for each function and fill in its wrapper.

Skeleton tangled from docs/lab/01b-triton-warmup.md (`make exercise LAB=01b` copies it to
mywork/); check it with `make check-mine LAB=01b`. Without a GPU the tests set TRITON_INTERPRET=1
before importing triton, which runs your kernels in Triton's interpreter on CPU tensors.
"""

import torch
import triton  # noqa: F401  (your kernels: @triton.jit)
import triton.language as tl  # noqa: F401

MAX_SOFTMAX_COLS = 65536  # the longest row softmax_rows takes: one row is one tile


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-add-interface>>[init]
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y for two 1-D tensors of one length, dtype and device: a new contiguous tensor.

    x, y: (n,), any strides, float16 / bfloat16 / float32 (no bfloat16 under the interpreter).
    n = 0 gives an empty tensor. One program per block of elements; the last block is ragged.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: add: validate, then one program per block of elements, masked"
    )


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-row-sum-interface>>[init]
def row_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x, accumulated in float32: shape (M,), dtype float32.

    x: (M, N), any strides, float16 / bfloat16 / float32 (no bfloat16 under the interpreter).
    A row of N = 0 entries sums to 0. One program per row, walking its columns in tiles.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: row_sum: one program per row, a float32 accumulator over column tiles"
    )


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
    raise NotImplementedError(
        "not written yet: softmax_rows: one program per row, the row in one tile, other=-inf"
    )


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
    raise NotImplementedError(
        "not written yet: gather_rows: check the index, then load table rows by pointer"
    )
# ~/~ end

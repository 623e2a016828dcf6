# ~/~ begin <<docs/lab/01b-triton-warmup.md#tests/test_triton_warmup.py>>[init]
"""Checks of the Triton warm-up (tangled from docs/lab/01b-triton-warmup.md)."""

import pytest
import torch

from minimodel.triton_warmup import MAX_SOFTMAX_COLS, add, gather_rows, row_sum, softmax_rows

pytestmark = pytest.mark.lab("01b")  # the task's tests: `make check-mine LAB=01b` runs them

# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-check-helpers>>[init]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)
DTYPES = [torch.float32, torch.float16]


def fenced(t, poison=float("nan")):
    """t as a view into a buffer filled with poison: every other element (every other column),
    with a poisoned element or row before and after it. A kernel that ignores a stride or reads
    past an end reads poison."""
    if t.dim() == 1:
        buf = torch.full((2 * t.shape[0] + 3,), poison, dtype=t.dtype, device=t.device)
        view = buf[1 : 2 * t.shape[0] + 1 : 2]
    else:
        rows, cols = t.shape
        buf = torch.full((rows + 2, 2 * cols + 3), poison, dtype=t.dtype, device=t.device)
        view = buf[1 : rows + 1, 1 : 2 * cols + 1 : 2]
    view.copy_(t)
    return view


def randn(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype=dtype, device=DEVICE)


def raises_naming(error, call, *values):
    """call() raises `error` whose message names every value (the words are not checked). A shape
    may be written as a tuple, (4,), or as a list, [4], as in torch.Size([4])."""
    with pytest.raises(error) as info:
        call()
    for value in values:
        forms = [str(value), str(list(value))] if isinstance(value, tuple) else [str(value)]
        assert any(form in str(info.value) for form in forms), (value, str(info.value))
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-check-values>>[init]
@pytest.mark.parametrize("n", [1, 7, 1000, 1025, 4099])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_matches_torch(n, dtype):
    x, y = randn(n, dtype=dtype, seed=n), randn(n, dtype=dtype, seed=n + 1)
    out = add(fenced(x), fenced(y))
    assert out.shape == (n,) and out.dtype == dtype
    assert torch.equal(out, x + y)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (3, 7), (2, 1000), (2, 2500), (3, 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_sum_matches_torch(m, n, dtype):
    x = randn(m, n, dtype=dtype, seed=m * n)
    out = row_sum(fenced(x))
    assert out.shape == (m,) and out.dtype == torch.float32
    expected = x.double().sum(dim=1)
    torch.testing.assert_close(out.double(), expected, atol=1e-5 * max(n, 1) ** 0.5, rtol=1e-5)


def test_row_sum_reads_a_transposed_matrix():
    x = randn(37, 5, seed=3)
    torch.testing.assert_close(row_sum(fenced(x).t()), x.t().sum(dim=1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (3, 7), (4, 100), (2, 1000), (2, 3000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_matches_torch(m, n, dtype):
    x = 4 * randn(m, n, dtype=dtype, seed=m + n)
    out = softmax_rows(fenced(x))
    assert out.shape == (m, n) and out.dtype == dtype
    expected = torch.softmax(x.double(), dim=1).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def test_softmax_rows_masked_entries_and_rows():
    x = randn(3, 9, seed=4)
    x[0, ::2] = float("-inf")  # masked entries: probability 0
    x[0, 1::2] = 2.0  # the four others: 1/4 each
    x[1] = float("-inf")  # a row that sees nothing: zeros, not NaN
    x[2] = torch.tensor([1e4, -1e4, 1e4, 0, 0, 0, 0, 0, 0])  # huge logits stay finite
    out = softmax_rows(fenced(x))
    assert torch.equal(out[0, ::2], torch.zeros(5, device=DEVICE))
    torch.testing.assert_close(out[0, 1::2], torch.full((4,), 0.25, device=DEVICE))
    assert torch.equal(out[1], torch.zeros(9, device=DEVICE))
    torch.testing.assert_close(out[2], torch.softmax(x[2].double(), 0).float())


@pytest.mark.parametrize(("r", "d", "n"), [(1, 1, 1), (10, 7, 25), (100, 100, 37), (5, 33, 0),
                                           (3, 200, 17)])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gather_rows_matches_torch(r, d, n, index_dtype):
    table = randn(r, d, seed=r + d)
    gen = torch.Generator().manual_seed(n)
    index = torch.randint(0, r, (n,), generator=gen).to(dtype=index_dtype, device=DEVICE)
    out = gather_rows(fenced(table), fenced(index, poison=-1))
    assert out.shape == (n, d) and out.dtype == table.dtype
    assert torch.equal(out, table[index.long()])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_rows_repeats_and_reverses(dtype):
    table = randn(6, 40, dtype=dtype, seed=6)
    index = torch.tensor([5, 0, 0, 5, 3, 3, 3, 1, 2, 4, 5, 0, 1, 2, 3, 4, 5, 2], device=DEVICE)
    assert torch.equal(gather_rows(fenced(table), fenced(index, poison=-1)), table[index])
# ~/~ end


# ~/~ begin <<docs/lab/01b-triton-warmup.md#warmup-check-errors>>[init]
def test_an_index_outside_the_table_is_refused():
    table = randn(5, 3)
    index = torch.tensor([0, 4, 2, 17, -1], device=DEVICE)
    raises_naming(ValueError, lambda: gather_rows(table, index), 3, 17)
    raises_naming(ValueError, lambda: gather_rows(table, index[4:]), 0, -1)
    raises_naming(ValueError, lambda: gather_rows(randn(0, 3), index[:1]), 0)


def test_wrong_types_ranks_and_shapes_are_refused():
    x = randn(4)
    raises_naming(TypeError, lambda: add([1.0], x), "x")
    raises_naming(TypeError, lambda: row_sum(None), "x")
    raises_naming(TypeError, lambda: gather_rows(randn(3, 2), [0, 1]), "index")
    raises_naming(ValueError, lambda: add(x, randn(5)), (4,), (5,))
    raises_naming(ValueError, lambda: add(randn(2, 2), randn(2, 2)), (2, 2))
    raises_naming(ValueError, lambda: row_sum(x), (4,))
    raises_naming(ValueError, lambda: softmax_rows(randn(2, 3, 4)), (2, 3, 4))
    raises_naming(ValueError, lambda: gather_rows(x, torch.tensor([0], device=DEVICE)), (4,))


def test_wrong_dtypes_are_refused():
    x = randn(4)
    raises_naming(ValueError, lambda: add(x, x.double()), "torch.float64")
    raises_naming(ValueError, lambda: add(x, x.half()), "torch.float32", "torch.float16")
    raises_naming(ValueError, lambda: row_sum(torch.ones(2, 2, dtype=torch.int32, device=DEVICE)),
                  "torch.int32")
    index = torch.tensor([0.0], device=DEVICE)
    raises_naming(ValueError, lambda: gather_rows(randn(2, 2), index), "torch.float32")


def test_softmax_rows_row_lengths():
    raises_naming(ValueError, lambda: softmax_rows(randn(3, 0)), 0)
    too_long = MAX_SOFTMAX_COLS + 1
    raises_naming(ValueError, lambda: softmax_rows(torch.zeros(1, too_long, device=DEVICE)),
                  too_long)


def test_empty_inputs_give_empty_results():
    assert add(randn(0), randn(0)).shape == (0,)
    assert row_sum(randn(0, 5)).shape == (0,)
    assert softmax_rows(randn(0, 5)).shape == (0, 5)
    assert gather_rows(randn(3, 4), torch.zeros(0, dtype=torch.int64, device=DEVICE)).shape \
        == (0, 4)


def test_other_devices_and_autograd_are_refused():
    meta = torch.empty(4, device="meta")  # neither the CPU nor CUDA: refused everywhere
    raises_naming(ValueError, lambda: add(meta, meta), "meta")
    other = "cpu" if DEVICE == "cuda" else "meta"
    raises_naming(ValueError, lambda: gather_rows(randn(3, 2),
                                                  torch.zeros(1, dtype=torch.int64,
                                                              device=other)), other)
    x = randn(4).requires_grad_()
    with pytest.raises(ValueError):
        add(x, x)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's refusal (CPU only)")
def test_bfloat16_is_refused_by_the_interpreter():
    raises_naming(ValueError, lambda: row_sum(torch.ones(2, 2, dtype=torch.bfloat16)),
                  "bfloat16")


@pytest.mark.gpu
def test_gpu_bfloat16_and_larger_shapes():
    x = randn(3, 70_001, dtype=torch.bfloat16)
    torch.testing.assert_close(row_sum(x), x.float().sum(dim=1), atol=1e-2, rtol=1e-3)
    y = randn(1_000_003, dtype=torch.bfloat16, seed=1)
    assert torch.equal(add(x[0, :1_000], y[:1_000]), x[0, :1_000] + y[:1_000])
    assert torch.equal(add(y, y), y + y)
    s = randn(257, MAX_SOFTMAX_COLS, seed=2)
    torch.testing.assert_close(softmax_rows(s), torch.softmax(s.double(), 1).float(),
                               atol=1e-6, rtol=1e-5)
    table = randn(10_000, 130, dtype=torch.bfloat16, seed=3)
    index = torch.randint(0, 10_000, (5_003,), device=DEVICE)
    assert torch.equal(gather_rows(table, index), table[index])
# ~/~ end
# ~/~ end

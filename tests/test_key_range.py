# ~/~ begin <<docs/lab/02-flash-triton.md#tests/test_key_range.py>>[init]
"""The key range of a query tile, once per language: minimodel.kernels.key_range (Triton), its
Python twin minimodel.roofline.key_range and the Hopper kernel's Gluon twin, against the
reference mask and each other (tangled from docs/lab/02-flash-triton.md)."""

import ast
import inspect
import textwrap

import pytest
import torch
import triton
import triton.language as tl

from minimodel import attention_flash_hopper, kernels
from minimodel.kernels import key_range as triton_key_range
from minimodel.reference import visible_mask
from minimodel.roofline import key_range

DEVICE = "cpu" if kernels.INTERPRET else "cuda"


# ~/~ begin <<docs/lab/02-flash-triton.md#kernels-check-key-range>>[init]
@triton.jit
def _key_range_probe(out_ptr, n_q, n_k, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, WINDOWED: tl.constexpr):
    t = tl.program_id(0)
    lo_seen, lo, full_lo, full_hi, hi = triton_key_range(t * BLOCK_M, n_q, n_k, window, BLOCK_M,
                                                         BLOCK_N, CAUSAL, WINDOWED)
    tl.store(out_ptr + 5 * t, lo_seen)
    tl.store(out_ptr + 5 * t + 1, lo)
    tl.store(out_ptr + 5 * t + 2, full_lo)
    tl.store(out_ptr + 5 * t + 3, full_hi)
    tl.store(out_ptr + 5 * t + 4, hi)


CASES = [  # (nq, nk, causal, window, block_m, block_n): Nq above, below and at Nk; windows of 1,
    # inside a tile and wider than a query tile; tiles taller and wider than each other
    (37, 37, False, None, 16, 16), (37, 37, True, None, 16, 16), (29, 53, True, None, 16, 32),
    (53, 29, True, None, 32, 16), (64, 100, True, 1, 16, 16), (70, 70, True, 20, 16, 16),
    (70, 90, True, 40, 32, 16), (90, 70, True, 7, 16, 32), (45, 120, True, 50, 16, 16),
    (1, 33, True, 5, 16, 16), (33, 1, True, None, 16, 16),
]


@pytest.mark.parametrize(("nq", "nk", "causal", "window", "block_m", "block_n"), CASES)
def test_the_key_range_holds_the_mask_and_the_twins_agree(nq, nk, causal, window, block_m,
                                                          block_n):
    tiles = triton.cdiv(nq, block_m)
    out = torch.full((tiles, 5), -1, dtype=torch.int32, device=DEVICE)
    _key_range_probe[(tiles,)](out, nq, nk, window or 0, BLOCK_M=block_m, BLOCK_N=block_n,
                               CAUSAL=causal, WINDOWED=window is not None)
    mask = visible_mask(nq, nk, causal=causal, window=window)
    for t, row in enumerate(out.tolist()):
        i0 = t * block_m
        assert tuple(row) == key_range(i0, nq, nk, window, block_m, block_n, causal=causal)
        lo_seen, lo, full_lo, full_hi, hi = row
        seen = mask[i0 : i0 + block_m].any(0).nonzero().flatten().tolist()
        if seen:  # the tile's visible keys are exactly [lo_seen, hi) at its ends
            assert (lo_seen, hi) == (seen[0], seen[-1] + 1), (t, row, seen[0], seen[-1])
        assert mask[i0 : i0 + block_m, full_lo:full_hi].all(), (t, row)  # interior: no mask
        assert lo % block_n == 0 and lo <= lo_seen and lo <= full_lo <= full_hi <= hi, (t, row)
        assert all(x % block_n == 0 or x == hi for x in (full_lo, full_hi)), (t, row)


def _body(fn) -> str:
    """The statements of a jit function's source, its docstring dropped, `gl` read as `tl`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn.fn)).replace("gl.", "tl."))
    body = tree.body[0].body
    return ast.dump(ast.Module(body=body[1:], type_ignores=[]))


def test_the_gluon_key_range_is_the_triton_one():
    assert _body(attention_flash_hopper._key_range) == _body(kernels.key_range)
# ~/~ end
# ~/~ end

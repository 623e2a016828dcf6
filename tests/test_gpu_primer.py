# ~/~ begin <<docs/gpu-primer.md#tests/test_gpu_primer.py>>[init]
"""The primer's worked example (tangled from docs/gpu-primer.md)."""

import torch
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)

# ~/~ begin <<docs/gpu-primer.md#primer-grid-stride>>[init]
@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    """out = factor * x over n elements, whatever the grid's size."""
    for start in tl.range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + offs, factor * x, mask=offs < n)
# ~/~ end


def test_a_grid_stride_loop_covers_every_element():
    x = torch.arange(1000, dtype=torch.float32, device=DEVICE)
    out = torch.full((1000,), float("nan"), device=DEVICE)
    _scale_kernel[(3,)](x, out, 1000, 0.5, BLOCK=64)
    assert torch.equal(out, 0.5 * x)
# ~/~ end

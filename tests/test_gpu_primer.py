# ~/~ begin <<docs/gpu-primer.md#tests/test_gpu_primer.py>>[init]
"""The primer's worked example (tangled from docs/gpu-primer.md)."""

import pytest
import torch
import triton
import triton.language as tl

from minimodel import kernels

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


# ~/~ begin <<docs/gpu-primer.md#kernels-launch-tests>>[init]
@pytest.mark.gpu
def test_launch_keeps_tritons_specialisation():
    x = torch.arange(1, 1002, dtype=torch.float32, device="cuda")
    # aligned n % 16 = 8, unaligned, n = 1, n % 16 = 0: four keys, each launched twice
    for src, n in [(x, 1000), (x[1:], 1000), (x, 1), (x, 992), (x[1:], 1000)]:
        for _ in range(2):
            out = torch.full((1000,), float("nan"), device="cuda")
            kernels.launch(_scale_kernel, (3,), src, out, n, 0.5, BLOCK=64)
            assert torch.equal(out[:n], 0.5 * src[:n]), (n, src.data_ptr())
            assert out[n:].isnan().all(), (n, src.data_ptr())
    keys = [k for k in kernels._COMPILED if k[0] == id(_scale_kernel)]
    assert not kernels._DIRECT or len(keys) == 4


@pytest.mark.gpu
def test_launch_leaves_a_profilers_hook_to_the_jit():
    x, seen = torch.ones(16, device="cuda"), []
    hook = seen.append  # called with the launch's metadata, by the JIT's path only
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        for _ in range(2):
            kernels.launch(_scale_kernel, (1,), x, torch.empty_like(x), 16, 0.5, BLOCK=64)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 2


@pytest.mark.gpu
def test_launch_refuses_a_constexpr_by_position():
    x = torch.ones(16, device="cuda")
    with pytest.raises(TypeError, match="every constexpr by name"):
        kernels.launch(_scale_kernel, (1,), x, torch.empty_like(x), 16, 0.5, 64)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/02b-flash-hopper.md#tests/test_attention_flash_hopper.py>>[init]
"""Checks of the Gluon Hopper kernel (tangled from docs/lab/02b-flash-hopper.md): its refusals
on any machine, its results against the reference on a Hopper GPU."""

import pytest
import torch
from test_attention_flash import attention_same_dtype, make_qkv

from minimodel import attention_flash_hopper, kernels
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.reference import attention_ref


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-check-refusals>>[init]
def test_shared_memory_fits_one_program_per_sm():
    for head_dim in (64, 128):
        assert attention_flash_hopper.smem_bytes(head_dim, 2) <= attention_flash_hopper.SMEM_LIMIT
    # d = 128, fp16: Q and O halves (4 x 16 KiB) and two stages of K and V (4 x 32 KiB)
    assert attention_flash_hopper.smem_bytes(128, 2) == 4 * 16 * 1024 + 4 * 32 * 1024


@pytest.mark.parametrize("make, kwargs, message", [
    (lambda: make_qkv(1, 2, 2, 8, 8, 64, dtype=torch.float32, device="cpu"), {},
     r"dtype torch.float32 is not supported by flash_attention_hopper"),
    (lambda: make_qkv(1, 2, 2, 8, 8, 160, dtype=torch.float16, device="cpu"), {},
     r"head_dim in \[1, 128\], got d=160"),
    (lambda: make_qkv(1, 2, 2, 8, 8, 64, dtype=torch.float16, device="cpu"), {},
     r"needs a Hopper GPU .* got device cpu"),
    (lambda: make_qkv(1, 2, 2, 8, 8, 64, dtype=torch.float16, device="cpu"), {"window": 4},
     r"window"),
])
def test_refusals(make, kwargs, message):
    if torch.cuda.is_available() and "device cpu" in message:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match=message):
        flash_attention_hopper(*make(), **kwargs)


def test_refuses_inputs_that_require_grad():
    q, k, v = make_qkv(1, 2, 2, 8, 8, 64, dtype=torch.float16, device="cpu")
    with pytest.raises(ValueError, match="forward-only"):
        flash_attention_hopper(q.requires_grad_(), k, v)
# ~/~ end


# ~/~ begin <<docs/lab/02b-flash-hopper.md#flash-hopper-check-gpu>>[init]
def check_hopper(q, k, v, **kwargs):
    mask = {key: kwargs[key] for key in ("causal", "window") if key in kwargs}
    out, lse = flash_attention_hopper(q, k, v, **kwargs, return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape
    ref, ref_lse = attention_ref(q.double(), k.double(), v.double(), **mask, return_lse=True)
    err = (out.double() - ref).abs().max().item()
    torch_err = (attention_same_dtype(q, k, v, **mask).double() - ref).abs().max().item()
    assert not out.isnan().any()
    assert err <= 2 * torch_err + 1e-6, (err, torch_err)
    if q.dtype == torch.float16:
        torch.testing.assert_close(out.float(), ref.float(), atol=1e-3, rtol=1e-3)
    assert torch.equal(lse.isinf(), ref_lse.isinf())
    finite = ref_lse.isfinite()
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=1e-4, rtol=1e-4)


HOPPER_SHAPES = [  # (B, Hq, Hkv, Nq, Nk, d)
    (2, 4, 2, 1000, 1000, 128), (1, 4, 4, 77, 300, 64), (1, 4, 1, 300, 129, 128),
    (3, 2, 2, 64, 64, 64), (1, 2, 2, 200, 100, 128), (1, 8, 2, 2048, 2048, 128),
    (3, 3, 3, 257, 257, 64),  # 3 items per head x 9 heads: 27, an odd number (a pair of one)
    (4, 40, 8, 513, 513, 128),  # 800 items: each program loops over several pairs
    (1, 2, 1, 1, 4097, 128),  # one query row against many keys
]
MASKS = [{}, {"causal": True}, {"causal": True, "window": 200}]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", HOPPER_SHAPES)
@pytest.mark.parametrize("mask", MASKS)
def test_gpu_matches_reference(shape, dtype, mask):
    check_hopper(*make_qkv(*shape, dtype=dtype, device="cuda"), **mask)


@pytest.mark.gpu
@pytest.mark.parametrize("switches", [{"persistent": False}, {"pingpong": False},
                                      {"persistent": False, "pingpong": False}])
@pytest.mark.parametrize("mask", MASKS[:2])
def test_gpu_switches_change_no_result(switches, mask):
    check_hopper(*make_qkv(2, 8, 4, 700, 700, 128, dtype=torch.float16, device="cuda"),
                 **mask, **switches)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [1, 20, 64, 72, 100, 128])
def test_gpu_any_head_dim(d):
    check_hopper(*make_qkv(2, 4, 2, 300, 300, d, dtype=torch.float16, device="cuda"),
                 causal=True)


@pytest.mark.gpu
def test_gpu_strided_inputs_and_empty_rows():
    q, k, v = make_qkv(1, 4, 4, 300, 200, 64, dtype=torch.bfloat16, device="cuda")
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)  # a (B, N, H, d) layout, read in place
    check_hopper(q_t, k, v, causal=True)  # Nq > Nk: the first 100 rows see no key
    check_hopper(q[..., ::2][..., :20], k[..., :20], v[..., :20])  # a strided d: one copy


@pytest.mark.gpu
def test_gpu_a_planned_call_refuses_and_computes_as_the_first(monkeypatch):
    """A signature's first call leaves a mark, its second a plan; later calls of it compute on
    their own tensors (through launch, then the bound C launcher) and still refuse what the
    signature does not decide (grad mode), or a call that differs only in an option's type.
    At MAX_PLANS plans and marks, all are dropped."""
    monkeypatch.setattr(attention_flash_hopper, "_PLANS", {})
    monkeypatch.setattr(kernels, "MAX_PLANS", 3)
    plans = attention_flash_hopper._PLANS
    for _ in range(5):  # new tensors each time, one signature
        check_hopper(*make_qkv(2, 4, 2, 300, 300, 64, dtype=torch.float16, device="cuda"),
                     causal=True, window=100)
    assert len(plans) == 1 and next(iter(plans.values())) is not kernels.SEEN
    q, k, v = make_qkv(2, 4, 2, 300, 300, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="forward-only"):
        flash_attention_hopper(q, k.requires_grad_(), v, causal=True, window=100)
    for _ in range(3):  # window=1 planned and run under its plan...
        flash_attention_hopper(q, k.detach(), v, causal=True, window=1)
    with pytest.raises(ValueError, match="window"):  # ...True == 1, but a bool is no window
        flash_attention_hopper(q, k.detach(), v, causal=True, window=True)
    check_hopper(*make_qkv(1, 2, 2, 70, 70, 128, dtype=torch.bfloat16, device="cuda"))
    assert len(plans) == 3
    check_hopper(*make_qkv(1, 2, 2, 71, 70, 128, dtype=torch.bfloat16, device="cuda"))
    assert len(plans) == 1  # a fourth signature: the three were dropped
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/02-flash-triton.md#tests/test_attention_flash_solution.py>>[init]
"""Checks of this page's solution itself, beyond the task's interface: its configurations and
shared-memory budget, the copies its TMA loads need, its interpreter switch, and other tile
shapes (tangled from docs/lab/02-flash-triton.md; not run by `make check-mine`)."""

import pytest
import torch
import triton
from test_attention_flash import DEVICE, check_against_reference, make_qkv

from minimodel import attention_flash, kernels
from minimodel.attention_flash import flash_attention


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-solution>>[init]
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("elem", [2, 4])
def test_every_head_dim_has_a_config_that_fits(head_dim, elem):
    configs = attention_flash.FLASH_CONFIGS[attention_flash._head_dim_class(head_dim)]
    assert any(attention_flash.smem_bytes(bm, bn, s, head_dim, elem) <= attention_flash.SMEM_BUDGET
               for bm, bn, _, s in configs)


def test_shared_memory_counts_q_and_every_stage_of_k_and_v():
    # one Q tile of 128 x 64 fp16 (16 KiB), and 3 stages of a K and a V tile of 64 x 64 (8 KiB each)
    assert attention_flash.smem_bytes(128, 64, 3, 64, 2) == 16 * 1024 + 3 * 2 * 8 * 1024


@pytest.fixture
def described(monkeypatch):
    """The data pointers of the tensors flash_attention hands to the TMA, in call order."""
    pointers = []

    def recording(t, head_dim):
        pointers.append(t.data_ptr())
        return describe(t, head_dim)

    describe = attention_flash._descriptor
    monkeypatch.setattr(attention_flash, "_descriptor", recording)
    return pointers


@pytest.mark.parametrize("make", [
    lambda: torch.randn(1, 2, 32, 8, device=DEVICE).transpose(-1, -2),  # head_dim stride 8
    lambda: torch.randn(1 * 2 * 8 * 32 + 1, device=DEVICE)[1:].view(1, 2, 8, 32),  # start +4 B
    lambda: torch.randn(1, 2, 8, 34, device=DEVICE)[..., :32],  # rows 136 bytes apart
])
def test_layouts_the_tma_cannot_read_are_copied(make, described):
    q, (_, k, v) = make(), make_qkv(1, 2, 2, 8, 8, 32)
    check_against_reference(q, k, v)
    assert described[0] != q.data_ptr()  # q went through an aligned copy
    assert described[1:3] == [k.data_ptr(), v.data_ptr()]  # k and v were fine as they were


def test_rows_off_16_bytes_are_copied(described):
    q, k, v = make_qkv(1, 2, 2, 8, 8, 20, dtype=torch.float16)  # rows of 40 bytes
    check_against_reference(q, k, v)
    assert not set(described[:3]) & {q.data_ptr(), k.data_ptr(), v.data_ptr()}


def test_views_the_tma_can_read_are_read_in_place(described):
    qkv = torch.randn(2, 40, 3, 4, 64, device=DEVICE)
    transposed = [qkv[:, :, i].transpose(1, 2) for i in range(3)]  # (B, N, H, d) storage
    packed = list(torch.randn(1, 2, 50, 3 * 48, device=DEVICE).split(48, dim=-1))
    out = flash_attention(*make_qkv(1, 2, 2, 50, 50, 20, dtype=torch.float16))
    padded = [out] + [torch.randn(1, 2, 50, 24, device=DEVICE).half()[..., :20] for _ in "kv"]
    for q, k, v in (transposed, packed, padded):
        described.clear()
        check_against_reference(q, k, v, causal=True)
        assert described[:3] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]


def test_output_is_contiguous_unless_its_rows_need_padding():
    assert flash_attention(*make_qkv(1, 2, 2, 9, 9, 24)).is_contiguous()  # 96-byte rows
    assert flash_attention(*make_qkv(1, 2, 2, 9, 9, 24, dtype=torch.float16)).is_contiguous()
    out = flash_attention(*make_qkv(1, 2, 2, 9, 9, 20, dtype=torch.float16))  # 40-byte rows
    assert out.shape == (1, 2, 9, 20) and out.stride() == (2 * 9 * 24, 9 * 24, 24, 1)


def test_the_padding_past_d_is_never_read():
    # q and k are the first 20 columns of rows of 24 whose last 4 are NaN: the TMA reads them
    # in place, and a NaN read past d would poison every score
    q, k, v = make_qkv(1, 2, 2, 40, 40, 20, dtype=torch.float16)
    q_nan, k_nan = (torch.full((1, 2, 40, 24), float("nan"), dtype=torch.float16, device=DEVICE)
                    for _ in range(2))
    q_nan[..., :20], k_nan[..., :20] = q, k
    check_against_reference(q_nan[..., :20], k_nan[..., :20], v, causal=True)


@pytest.mark.parametrize(("d", "elem", "width"), [(1, 2, 8), (20, 2, 24), (24, 2, 24),
                                                  (1, 4, 4), (20, 4, 20), (33, 4, 36)])
def test_padded_width_makes_rows_of_16_bytes(d, elem, width):
    assert kernels.padded_width(d, elem) == width


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(attention_flash, "INTERPRET", False)
    with pytest.raises(ValueError, match=r"needs CUDA tensors, got device cpu.*TRITON_INTERPRET"):
        flash_attention(*make_qkv(1, 2, 2, 8, 8, 32, device="cpu"))


@pytest.mark.skipif(not attention_flash.INTERPRET, reason="bfloat16 is refused only under the "
                    "interpreter; on a GPU it is tested by test_gpu_matches_reference")
def test_bfloat16_is_refused_under_the_interpreter():
    with pytest.raises(ValueError, match=r"bfloat16 is refused under TRITON_INTERPRET=1"):
        flash_attention(*make_qkv(1, 2, 2, 8, 8, 32, dtype=torch.bfloat16))


@pytest.mark.gpu
def test_gpus_without_tma_are_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match=r"compute capability 9.0 .* got 8.0"):
        flash_attention(*make_qkv(1, 2, 2, 8, 8, 32, device="cuda"))


# Tile configurations other than the interpreter's default (32 x 16): each run boundary falls
# elsewhere, so each exposes other off-by-one errors in the tile bounds. The longest sweeps
# (the most offsets, the smallest query tiles) are in the slow set.
SLOW = pytest.mark.slow
OTHER_TILES = [(16, 16), pytest.param(16, 32, marks=SLOW), (64, 32)]


@pytest.mark.skipif(not attention_flash.INTERPRET, reason="the GPU autotunes its own configs")
@pytest.mark.parametrize(("block_m", "block_n"), OTHER_TILES)
@pytest.mark.parametrize("mask", [{"causal": True},
                                  pytest.param({"causal": True, "window": 40}, marks=SLOW)])
def test_other_tiles_across_a_whole_tile_of_offsets(monkeypatch, block_m, block_n, mask):
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n},
                           pre_hook=attention_flash._set_block_shapes)
    monkeypatch.setattr(attention_flash._attn_fwd_tuned, "configs", [config])
    for nk in range(100, 100 + block_n + 1):
        check_against_reference(*make_qkv(1, 2, 1, 100, nk, 32, seed=nk), **mask)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-solution-messages>>[init]
@pytest.mark.parametrize(
    ("make", "kwargs", "match"),
    [
        (lambda: make_qkv(1, 2, 2, 8, 8, 32)[:2] + (torch.randn(1, 2, 8, device=DEVICE),), {},
         r"v must have rank 4"),
        (lambda: make_qkv(1, 3, 2, 8, 8, 32), {}, r"Hq=3 must be a multiple of kv heads Hkv=2"),
        (lambda: make_qkv(1, 2, 2, 8, 8, 0), {}, r"q must not be empty, got shape \(1, 2, 8, 0\)"),
        (lambda: make_qkv(1, 2, 2, 8, 8, 257), {}, r"got d=257"),
        (lambda: make_qkv(1, 2, 2, 8, 8, 264), {}, r"got d=264"),
        (lambda: make_qkv(1, 2, 2, 8, 8, 32), {"window": 4}, r"window=4 needs causal=True"),
        (lambda: make_qkv(1, 2, 2, 8, 8, 32, dtype=torch.float64), {},
         r"dtype torch.float64 is not supported"),
        (lambda: (*make_qkv(1, 2, 2, 8, 8, 32)[:2], make_qkv(1, 2, 2, 8, 8, 32)[2].half()), {},
         r"share one dtype"),
        (lambda: (*make_qkv(1, 2, 2, 8, 8, 32)[:2], torch.randn(1, 2, 8, 32, device="meta")), {},
         r"must be on one device"),
        (lambda: make_qkv(2048, 32, 32, 1, 1, 8), {}, r"B \* Hq = 2048 \* 32 = 65536"),
    ],
)
def test_the_solutions_messages(make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        flash_attention(*make(), **kwargs)


def test_the_solutions_grad_message():
    q, k, v = make_qkv(1, 2, 2, 8, 8, 32)
    with pytest.raises(ValueError, match=r"forward-only"):
        flash_attention(q.requires_grad_(), k, v)
# ~/~ end
# ~/~ end

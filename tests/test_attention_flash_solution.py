# ~/~ begin <<docs/lab/02-flash-triton.md#tests/test_attention_flash_solution.py>>[init]
"""Checks of this page's solution itself, beyond the task's interface: its configurations and
shared-memory budget, the refusals its TMA loads need, its interpreter switch, and other tile
shapes (tangled from docs/lab/02-flash-triton.md; not run by `make check-mine`)."""

import pytest
import torch
import triton
from test_attention_flash import DEVICE, check_against_reference, make_qkv

from minimodel import attention_flash
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


@pytest.mark.parametrize(("make", "match"), [
    (lambda: torch.randn(1, 2, 32, 8, device=DEVICE).transpose(-1, -2),
     r"q has strides \(512, 256, 1, 8\).*unit stride along head_dim"),
    (lambda: torch.randn(1 * 2 * 8 * 32 + 1, device=DEVICE)[1:].view(1, 2, 8, 32),
     r"16-byte aligned start"),
    (lambda: torch.randn(1, 2, 8, 34, device=DEVICE)[..., :32],  # rows 136 bytes apart
     r"q has strides \(544, 272, 34, 1\).*16-byte multiples"),
])
def test_layouts_the_tma_cannot_read_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        flash_attention(make(), *make_qkv(1, 2, 2, 8, 8, 32)[1:])


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
# elsewhere, so each exposes other off-by-one errors in the tile bounds.
OTHER_TILES = [(16, 16), (16, 32), (64, 32)]


@pytest.mark.skipif(not attention_flash.INTERPRET, reason="the GPU autotunes its own configs")
@pytest.mark.parametrize(("block_m", "block_n"), OTHER_TILES)
@pytest.mark.parametrize("mask", [{"causal": True}, {"causal": True, "window": 40}])
def test_other_tiles_across_a_whole_tile_of_offsets(monkeypatch, block_m, block_n, mask):
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n},
                           pre_hook=attention_flash._set_block_shapes)
    monkeypatch.setattr(attention_flash._attn_fwd_tuned, "configs", [config])
    for nk in range(100, 100 + block_n + 1):
        check_against_reference(*make_qkv(1, 2, 1, 100, nk, 32, seed=nk), **mask)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/02-flash-triton.md#tests/test_attention_flash.py>>[init]
"""Checks of the Triton Flash forward kernel (tangled from docs/lab/02-flash-triton.md)."""

import itertools
import re

import pytest
import torch

from minimodel.attention_flash import flash_attention
from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig
from minimodel.reference import attention_ref, visible_mask
from minimodel.verbs import tokenizer, verb_sequence

pytestmark = pytest.mark.lab("02")  # the task's tests: `make check-mine LAB=02` runs them

# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-helpers>>[init]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)


def make_qkv(b, hq, hkv, nq, nk, d, dtype=torch.float32, device=DEVICE, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(b, hq, nq, d, generator=g, device=device).to(dtype)
    k = torch.randn(b, hkv, nk, d, generator=g, device=device).to(dtype)
    v = torch.randn(b, hkv, nk, d, generator=g, device=device).to(dtype)
    return q, k, v


def attention_same_dtype(q, k, v, *, causal=False, window=None, scale=None):
    """PyTorch's own attention in the inputs' dtype: the error budget the kernel is held to."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = (q * (scale or q.shape[-1] ** -0.5)) @ k.transpose(-1, -2)
    mask = visible_mask(q.shape[2], k.shape[2], causal=causal, window=window, device=q.device)
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return p @ v


def check_against_reference(q, k, v, *, causal=False, window=None, scale=None, fp16_bar=True):
    """Output and lse against the float64 reference; error at most 2x PyTorch's own."""
    mask = {"causal": causal, "window": window}
    out, lse = flash_attention(q, k, v, **mask, scale=scale, return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    ref, ref_lse = attention_ref(q.double(), k.double(), v.double(), **mask, scale=scale,
                                 return_lse=True)
    err = (out.double() - ref).abs().max().item()
    torch_err = attention_same_dtype(q, k, v, **mask, scale=scale).double() - ref
    assert not out.isnan().any()
    assert err <= 2 * torch_err.abs().max().item() + 1e-6, (err, torch_err.abs().max().item())
    if q.dtype == torch.float16 and fp16_bar:  # the phase's definition of done
        torch.testing.assert_close(out.float(), ref.float(), atol=1e-3, rtol=1e-3)
    assert torch.equal(lse.isinf(), ref_lse.isinf())  # -inf exactly on the rows that see nothing
    finite = ref_lse.isfinite()
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=1e-4, rtol=1e-4)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-cpu>>[init]
LENGTHS = [(1, 1), (17, 17), (64, 64), (100, 100), (130, 130), (1, 100), (17, 130), (130, 17),
           (64, 100), (100, 64)]
HEAD_DIMS = [16, 32, 48, 64, 80, 128]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA
MASKS = [{}, {"causal": True}, {"causal": True, "window": 24}]
GRID = [
    (nq, nk, HEAD_DIMS[i % len(HEAD_DIMS)], HEADS[i % len(HEADS)], mask)
    for i, ((nq, nk), mask) in enumerate(itertools.product(LENGTHS, MASKS))
]


@pytest.mark.parametrize(("nq", "nk", "d", "heads", "mask"), GRID)
def test_matches_reference_float32(nq, nk, d, heads, mask):
    check_against_reference(*make_qkv(2, *heads, nq, nk, d), **mask)


@pytest.mark.parametrize(("nq", "nk", "d", "heads", "mask"), GRID[::3])
def test_matches_reference_float16(nq, nk, d, heads, mask):
    check_against_reference(*make_qkv(1, *heads, nq, nk, d, dtype=torch.float16), **mask)


def test_non_contiguous_views():
    # (B, N, H, d) storage read as (B, H, N, d), and one head of a packed QKV tensor.
    qkv = torch.randn(2, 100, 3, 4, 64, device=DEVICE)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    check_against_reference(q, k, v, causal=True)
    packed = torch.randn(2, 2, 130, 3 * 48, device=DEVICE)  # q, k, v side by side in head_dim
    q, k, v = packed.split(48, dim=-1)
    assert not q.is_contiguous()
    check_against_reference(q, k, v)


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    q, k, v = make_qkv(1, 2, 1, 100, 30, 32)  # Nq > Nk: the first 70 queries see nothing
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert (out[:, :, :70] == 0).all() and (lse[:, :, :70] == float("-inf")).all()
    check_against_reference(q, k, v, causal=True)


def test_window_limits():
    q, k, v = make_qkv(1, 2, 2, 90, 90, 32)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, window=1), v)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, window=500),
                               flash_attention(q, k, v, causal=True))


def test_custom_scale_and_large_logits():
    q, k, v = make_qkv(1, 2, 2, 70, 70, 64)
    check_against_reference(q * 30, k, v, scale=0.3)  # scores in the hundreds: no overflow
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-head-dims>>[init]
ODD_HEAD_DIMS = [1, 3, 7, 20, 33, 100, 200, 256]


@pytest.mark.parametrize("d", ODD_HEAD_DIMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_any_head_dim(d, dtype):
    # (37, 45): past the interpreter's 32 x 16 tile both ways; (9, 20): past a 16-key tile
    nq, nk = (37, 45) if d <= 64 else (9, 20)
    q, k, v = make_qkv(1, 4, 2, nq, nk, d, dtype=dtype, seed=d)
    check_against_reference(q, k, v)
    check_against_reference(q, k, v, causal=True)


def storage_offset_by_one(*shape, dtype=torch.float32):
    """A contiguous (shape) tensor whose data starts one element into its storage."""
    n = torch.Size(shape).numel()
    return torch.randn(n + 1, device=DEVICE).to(dtype)[1:].view(*shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("mask", [{}, {"causal": True}])
def test_any_strides(dtype, mask):
    def randn(*shape):
        return torch.randn(*shape, device=DEVICE).to(dtype)

    strided = [randn(1, 4, 40, 2 * 24)[..., ::2], randn(1, 2, 50, 2 * 24)[..., ::2],
               randn(1, 2, 50, 48)[..., 1::2]]  # head_dim with stride 2
    offset = [storage_offset_by_one(1, 4, 40, 32, dtype=dtype),
              storage_offset_by_one(1, 2, 50, 32, dtype=dtype), randn(1, 2, 50, 32)]
    odd_rows = [randn(1, 4, 40, 34)[..., :32], randn(1, 2, 50, 35)[..., 3:],
                randn(1, 2, 50, 33)[..., 1:]]  # rows 34, 35 or 33 elements apart
    transposed = [randn(1, n, h, 20).transpose(1, 2) for n, h in ((40, 4), (50, 2), (50, 2))]
    assert offset[0].storage_offset() == 1 and offset[0].is_contiguous()
    for q, k, v in (strided, offset, odd_rows, transposed):
        check_against_reference(q, k, v, **mask)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-minigpt>>[init]
def test_minigpt_prefill_and_decode_on_the_kernel():
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=tokenizer().vocab_size, max_seq_len=64, n_kv_heads=2)
    model = MiniGPT(config).to(DEVICE).eval()
    tokens = torch.tensor([verb_sequence()], device=DEVICE)
    with torch.no_grad():
        expected = model(tokens)  # one pass, attention_ref
        cache = KVCache(config, batch=1, device=DEVICE)
        steps = [model(tokens[:, :48], torch.arange(48, device=DEVICE)[None], cache,
                       attn=flash_attention)]
        steps += [model(tokens[:, i : i + 1], torch.tensor([[i]], device=DEVICE), cache,
                        attn=flash_attention) for i in range(48, 64)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-4, rtol=1e-4)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-errors>>[init]
def named(value: str, message: str) -> bool:
    """Whether the message names value as a whole word or number (2 is not named by 32 or 2.5)."""
    before = r"(?<![A-Za-z0-9_])" if value[0].isalpha() else r"(?<![A-Za-z0-9.])"
    return re.search(before + re.escape(value) + r"(?![A-Za-z0-9_]|\.\d)", message) is not None


@pytest.mark.parametrize(
    ("make", "kwargs", "names"),
    [
        (lambda: make_qkv(1, 2, 2, 8, 8, 32)[:2] + (torch.randn(1, 2, 8, device=DEVICE),), {},
         ["v", "(1, 2, 8)"]),
        (lambda: make_qkv(1, 3, 2, 8, 8, 32), {}, ["3", "2"]),
        (lambda: make_qkv(1, 2, 2, 8, 8, 0), {}, ["q", "(1, 2, 8, 0)"]),
        (lambda: make_qkv(1, 2, 2, 8, 8, 257), {}, ["257"]),
        (lambda: make_qkv(1, 2, 2, 8, 8, 264), {}, ["264"]),
        (lambda: make_qkv(1, 2, 2, 8, 8, 32), {"window": 4}, ["window", "causal"]),
        (lambda: make_qkv(1, 2, 2, 8, 8, 32, dtype=torch.float64), {}, ["float64"]),
        (lambda: (*make_qkv(1, 2, 2, 8, 8, 32)[:2], make_qkv(1, 2, 2, 8, 8, 32)[2].half()), {},
         ["float32", "float16"]),
        (lambda: (*make_qkv(1, 2, 2, 8, 8, 32)[:2], torch.randn(1, 2, 8, 32, device="meta")), {},
         [DEVICE, "meta"]),
    ],
)
def test_bad_input_raises(make, kwargs, names):
    with pytest.raises(ValueError) as error:
        flash_attention(*make(), **kwargs)
    message = str(error.value)
    missing = [name for name in names if not named(name, message)]
    assert not missing, f"{message!r} should name {missing}"


def test_inputs_that_require_grad_are_refused():
    q, k, v = make_qkv(1, 2, 2, 8, 8, 32)
    with pytest.raises(ValueError):
        flash_attention(q.requires_grad_(), k, v)
    with torch.no_grad():
        flash_attention(q, k, v)  # no graph is being built: fine
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-offsets>>[init]
# Every residue of N_k - N_q modulo a key tile of up to KEY_TILE keys: the solution's tile is 16
# keys in the interpreter and at most 128 on a GPU. A learner's wider tile in the interpreter is
# swept through part of its residues only (a wider sweep would slow the CPU run).
KEY_TILE = 128 if DEVICE == "cuda" else 16


@pytest.mark.parametrize("mask", [{"causal": True}, {"causal": True, "window": 40},
                                  {"causal": True, "window": 71}])
@pytest.mark.parametrize("nk", range(100, 101 + KEY_TILE))
def test_offsets_through_a_whole_tile(nk, mask):
    check_against_reference(*make_qkv(1, 2, 1, 100, nk, 32, seed=nk), **mask)
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-check-gpu>>[init]
GPU_SHAPES = [  # (B, Hq, Hkv, Nq, Nk, d)
    (2, 8, 8, 1023, 1023, 64), (1, 8, 2, 2048, 2048, 128), (1, 4, 1, 4097, 4097, 96),
    (1, 2, 2, 8192, 8192, 128), (1, 4, 4, 2048, 2048, 256), (1, 8, 8, 1, 8192, 128),
    (1, 8, 2, 300, 4096, 80),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("mask", MASKS[:2] + [{"causal": True, "window": 1000}])
def test_gpu_matches_reference(shape, dtype, mask):
    check_against_reference(*make_qkv(*shape, dtype=dtype, device="cuda"), **mask)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [1, 20, 72, 100, 200, 256])
@pytest.mark.parametrize("mask", MASKS[:2])
def test_gpu_any_head_dim(d, dtype, mask):
    check_against_reference(*make_qkv(2, 4, 2, 300, 300, d, dtype=dtype, device="cuda"), **mask)
# ~/~ end
# ~/~ end

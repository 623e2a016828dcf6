# ~/~ begin <<docs/lab/03b-paged-kernels.md#tests/test_paged_fp8.py>>[init]
"""Checks of the 8-bit paged KV cache (tangled from docs/lab/03b-paged-kernels.md): the
interpreter's e4m3, quantize_kv, the kernels against the arithmetic of what the cache stands
for, the rounding's bound and its typical size against the 16-bit cache, the refusals,
KernelPagedKVCache in 8 bits, and MiniGPT decoding the verb sequence through it. Not part of
`make check-mine`: the extension is the solution's."""

import contextlib
from typing import NamedTuple
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl
from test_attention_flash import attention_same_dtype
from test_paged_attention import DEVICE, NAN, fenced, make_cache, make_q

from minimodel import paged_attention as pa
from minimodel import paged_attention_hopper
from minimodel.attention import KernelPagedKVCache
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.paged_attention import (
    FP8_DTYPE,
    dequantize_kv,
    paged_decode,
    paged_prefill,
    quantize_kv,
)
from minimodel.reference import attention_ref
from minimodel.verbs import tokenizer, verb_sequence

# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-helpers>>[init]
U8 = 2.0**-4  # e4m3's unit roundoff (3 mantissa bits): float16's is 2^-11


class Fp8Cache(NamedTuple):
    k: torch.Tensor  # (B, Hkv, N, d) the keys as drawn, float32
    v: torch.Tensor
    k_hat: torch.Tensor  # (B, Hkv, N, d) what the 8-bit cache stands for, float64
    v_hat: torch.Tensor
    k_pool: torch.Tensor  # (num_blocks, block_size, Hkv, d) float8_e4m3fn, inside NaN
    v_pool: torch.Tensor
    k_scale: torch.Tensor  # (num_blocks, block_size, Hkv) float32, head-major, inside NaN
    v_scale: torch.Tensor
    table: torch.Tensor
    lens: torch.Tensor

    def scales(self) -> dict:
        return {"k_scale": self.k_scale, "v_scale": self.v_scale}


def make_fp8_cache(lens, hkv, d, block_size, *, kv=None, device=DEVICE, seed=0,
                   first_kept=None) -> Fp8Cache:
    """make_cache's recipe (its table, its freed blocks) in 8 bits: the keys and values (drawn,
    or kv = (k, v) given, (B, Hkv, max(lens), d)) quantised per token and kv head into pools
    and scales that sit in NaN-filled storage one block longer at each end."""
    k, v, k16, _, table, lens_t = make_cache(lens, hkv, d, block_size, device=device, seed=seed,
                                             first_kept=first_kept)
    if kv is not None:
        k, v = (t.to(device=device, dtype=torch.float32) for t in kv)
    (k8, ks), (v8, vs) = quantize_kv(k), quantize_kv(v)
    num_blocks = k16.shape[0]
    pools = [torch.full((num_blocks + 2, block_size, hkv, d), NAN, dtype=FP8_DTYPE,
                        device=device)[1:-1] for _ in "kv"]
    scales = [torch.full((num_blocks + 2, hkv, block_size), NAN, device=device)[1:-1]
              .transpose(1, 2) for _ in "kv"]
    for seq, n in enumerate(lens):
        for logical in range(triton.cdiv(n, block_size)):
            phys = int(table[seq, logical])
            if phys < 0:  # freed behind a window
                continue
            lo, hi = logical * block_size, min(n, (logical + 1) * block_size)
            for pool, scale, x8, s in zip(pools, scales, (k8, v8), (ks, vs), strict=True):
                pool[phys, : hi - lo] = x8[seq, :, lo:hi].transpose(0, 1)
                scale[phys, : hi - lo] = s[seq, :, lo:hi].transpose(0, 1)
    return Fp8Cache(k, v, dequantize_kv(k8, ks, torch.float64),
                    dequantize_kv(v8, vs, torch.float64), *pools, *scales, table, lens_t)


def spare(cache: Fp8Cache) -> int:
    """A block no sequence owns (all NaN), for the fenced table's poison."""
    used = set(cache.table[cache.table >= 0].tolist())
    return next(i for i in range(cache.k_pool.shape[0]) if i not in used)


def check_fp8_rows(out, lse, q4, k_hat4, v_hat4, *, causal=True, window=None):
    """Rows of one sequence (out (Hq, Nq, d), lse (Hq, Nq)) against the float64 reference on
    the values the cache stands for: at most twice PyTorch's own error in q's dtype on those
    values (+1e-6); lse to 1e-4, -inf exactly where the reference's is."""
    mask = {"causal": causal, "window": window}
    ref, ref_lse = attention_ref(q4.double(), k_hat4, v_hat4, **mask, return_lse=True)
    same = attention_same_dtype(q4, k_hat4.to(q4.dtype), v_hat4.to(q4.dtype), **mask)
    torch_err = (same[0].double() - ref[0]).abs().max().item()
    assert not out.isnan().any()
    err = (out.double() - ref[0]).abs().max().item()
    assert err <= 2 * torch_err + 1e-6, (err, torch_err)
    assert torch.equal(lse.isinf(), ref_lse[0].isinf())
    finite = ref_lse[0].isfinite()
    torch.testing.assert_close(lse[finite].double(), ref_lse[0][finite], atol=1e-4, rtol=1e-4)


def fp8_decode(q, cache: Fp8Cache, **kwargs):
    """paged_decode on the cache, its index tensors fenced (strided, poison around them)."""
    return paged_decode(q, cache.k_pool, cache.v_pool, fenced(cache.table, spare(cache)),
                        fenced(cache.lens, 10**6), return_lse=True, **cache.scales(), **kwargs)


def check_fp8_decode(q, cache: Fp8Cache, lens, *, window=None, **kwargs):
    out, lse = fp8_decode(q, cache, window=window, **kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.shape == q.shape[:2]
    for seq, n in enumerate(lens):
        if n == 0:
            assert (out[seq] == 0).all() and (lse[seq] == float("-inf")).all()
            continue
        check_fp8_rows(out[seq, :, None], lse[seq, :, None], q[seq : seq + 1, :, None],
                       cache.k_hat[seq : seq + 1, :, :n], cache.v_hat[seq : seq + 1, :, :n],
                       window=window)
    return out, lse


def check_fp8_prefill(ctx_lens, q_lens, hq, hkv, d, block_size, *, dtype=torch.float32,
                      causal=True, window=None, first_kept=None, cache=None):
    """Chunks of q_lens[b] new tokens against contexts of ctx_lens[b] keys of an 8-bit cache
    (made here unless given), each sequence against the arithmetic it stands for; returns
    the output."""
    if cache is None:
        cache = make_fp8_cache(ctx_lens, hkv, d, block_size, first_kept=first_kept)
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    q = torch.randn(sum(q_lens), hq, d, generator=gen, device=DEVICE).to(dtype)
    offsets = [0]
    for n in q_lens:
        offsets.append(offsets[-1] + n)
    starts = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    out, lse = paged_prefill(q, cache.k_pool, cache.v_pool, fenced(cache.table, spare(cache)),
                             fenced(cache.lens, 10**6), fenced(starts, -7), causal=causal,
                             window=window, return_lse=True, **cache.scales())
    for seq, (n, nq) in enumerate(zip(ctx_lens, q_lens, strict=True)):
        rows = slice(offsets[seq], offsets[seq + 1])
        if nq == 0:
            continue
        check_fp8_rows(out[rows].transpose(0, 1), lse[rows].transpose(0, 1),
                       q[rows].transpose(0, 1)[None], cache.k_hat[seq : seq + 1, :, :n],
                       cache.v_hat[seq : seq + 1, :, :n], causal=causal, window=window)
    return out
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-format>>[init]
@triton.jit
def _convert_fp8(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))


def test_every_e4m3_bit_pattern_loads_as_pytorch_reads_it_except_nan_under_the_interpreter():
    # All 256 patterns through a kernel's load and conversion. The finite ones are exact
    # everywhere; the two NaN patterns (0x7F, 0xFF) read as NaN on a GPU and as +-480 under
    # Triton 3.6's interpreter. If this fails, Triton changed: revisit the page's paragraph.
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(FP8_DTYPE).to(DEVICE)
    out = torch.empty(256, device=DEVICE)
    _convert_fp8[(1,)](x, out, N=256)
    want = x.float()
    finite = want.isfinite()
    assert finite.sum() == 254
    assert torch.equal(out[finite], want[finite])
    if pa.INTERPRET:
        assert out[~finite].tolist() == [480.0, -480.0]
    else:
        assert out[~finite].isnan().all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_quantize_kv_rounds_each_row_to_nearest_within_its_bound(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, 40, generator=gen) * torch.logspace(-30, 4, 18).view(6, 3, 1)
    x[0, 0] = 0.0  # a row of zeros
    x[1, 1, :5] = 1e-12 * x[1, 1, 5]  # values far below their row's largest: subnormal in e4m3
    x = x.to(dtype)
    x8, scale = quantize_kv(x)
    assert x8.dtype == FP8_DTYPE and x8.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == x.shape[:-1]
    xd, back = x.double(), dequantize_kv(x8, scale, torch.float64)
    amax = xd.abs().amax(-1)
    tiny = torch.finfo(torch.float32).tiny
    torch.testing.assert_close(scale.double(), (amax / 448).clamp(min=tiny), rtol=2e-7, atol=0)
    assert (scale > 0).all() and x8[0, 0].float().eq(0).all()
    # the largest of each row lands on 448; every element within 2^-4 |x| + 2^-10 s
    top = x8.float().abs().amax(-1)
    assert (top[amax > 0] == 448).all()
    bound = U8 * xd.abs() + 2.0**-10 * scale.double()[..., None]
    assert ((back - xd).abs() <= bound * (1 + 1e-6)).all()
    # and to nearest: no finite e4m3 value lies closer to x / s than the one chosen
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(FP8_DTYPE).double()
    values = values[values.isfinite()]
    r = xd / scale.double()[..., None]
    chosen = (r - x8.double()).abs()
    nearest = (r[..., None] - values).abs().amin(-1)
    assert (chosen <= nearest + 1e-6 * r.abs()).all()


def test_quantize_kv_gives_a_non_finite_row_a_non_finite_scale():
    x = torch.ones(3, 8)
    x[1, 2], x[2, 5] = float("nan"), float("inf")
    _, scale = quantize_kv(x)
    assert scale[0] == 1 / 448 and scale[1].isnan() and scale[2].isinf()


@pytest.mark.parametrize(("x", "named"), [
    (torch.ones(2, 4, dtype=torch.int32), "int32"), (torch.ones(2, 4).to(FP8_DTYPE), "float8"),
    (torch.tensor(1.0), r"\(\)"), (torch.ones(3, 0), r"\(3, 0\)"), ([1.0, 2.0], "list"),
])
def test_quantize_kv_refuses(x, named):
    with pytest.raises(ValueError, match=named):
        quantize_kv(x)


def test_dequantize_kv_refuses_scales_that_do_not_fit():
    x8, scale = quantize_kv(torch.ones(3, 8))
    for bad in (scale[:2], scale.half(), scale[None]):
        with pytest.raises(ValueError, match="scale"):
            dequantize_kv(x8, bad)
    with pytest.raises(ValueError, match="x8"):
        dequantize_kv(x8.float(), scale)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-kernels>>[init]
LENS = [1, 17, 40, 100, 64]
FP8_GRID = [  # (block_size, (Hq, Hkv), d)
    (8, (4, 4), 16), (16, (4, 2), 32), (32, (4, 1), 48), (64, (6, 2), 64), (128, (4, 2), 80),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize(("block_size", "heads", "d"), FP8_GRID)
def test_fp8_decode_computes_what_the_cache_stands_for(block_size, heads, d, dtype):
    (hq, hkv) = heads
    check_fp8_decode(make_q(len(LENS), hq, d, dtype=dtype),
                     make_fp8_cache(LENS, hkv, d, block_size), LENS)


@pytest.mark.parametrize(("window", "num_splits"), [(1, None), (20, 3), (45, 1), (1000, 5)])
def test_fp8_decode_windows_and_splits(window, num_splits):
    lens = [0, 3, 50, 130]
    first_kept = [max(0, n - window) for n in lens]
    cache = make_fp8_cache(lens, 2, 32, 16, first_kept=first_kept)
    check_fp8_decode(make_q(4, 4, 32, dtype=torch.float16), cache, lens, window=window,
                     num_splits=num_splits)


@pytest.mark.parametrize(("ctx", "q_lens", "mask"), [
    ([40, 17, 70], [23, 17, 1], {}),
    ([0, 100], [0, 37], {"window": 30}),
    ([66, 90], [66, 5], {"causal": False}),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_fp8_prefill_computes_what_the_cache_stands_for(ctx, q_lens, mask, dtype):
    first_kept = None
    if "window" in mask:
        first_kept = [max(0, n - q - mask["window"] + 1) for n, q in zip(ctx, q_lens, strict=True)]
    check_fp8_prefill(ctx, q_lens, 4, 2, 32, 16, dtype=dtype, first_kept=first_kept, **mask)


def test_fp8_v_scales_below_float16_normal_range_keep_their_bits():
    # V's scales times 2^-10 (about 7e-6 here, under float16's smallest normal 6.1e-5): the
    # cache stands for exactly 2^-10 times the values, so the output must be 2^-10 times the
    # output, to float16's rounding of it. Folding s_j into P~ directly would round P~ s_j as
    # a float16 subnormal; _scaled_pv takes the tile's largest scale out first.
    lens = [90, 33]
    cache = make_fp8_cache(lens, 2, 32, 16)
    small = cache._replace(v_scale=cache.v_scale * 2**-10, v_hat=cache.v_hat * 2**-10)
    assert small.v_scale[cache.v_scale.isfinite()].max() < 6.1e-5
    q = make_q(2, 4, 32, dtype=torch.float16)
    want, _ = fp8_decode(q, cache)
    got, _ = fp8_decode(q, small)
    torch.testing.assert_close(got.float() * 2**10, want.float(), rtol=2**-9, atol=2**-14)
    want = check_fp8_prefill(lens, [5, 33], 4, 2, 32, 16, dtype=torch.float16, cache=cache)
    got = check_fp8_prefill(lens, [5, 33], 4, 2, 32, 16, dtype=torch.float16, cache=small)
    torch.testing.assert_close(got.float() * 2**10, want.float(), rtol=2**-9, atol=2**-14)


def test_fp8_decode_reads_the_scales_through_their_strides():
    # The scales contiguous (slot-major) rather than head-major: the same output.
    lens = [40, 9]
    cache = make_fp8_cache(lens, 2, 32, 16)
    q = make_q(2, 4, 32, dtype=torch.float16)
    want, _ = fp8_decode(q, cache)
    moved = cache._replace(k_scale=cache.k_scale.contiguous(), v_scale=cache.v_scale.contiguous())
    got, _ = fp8_decode(q, moved)
    assert torch.equal(got, want)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-accuracy>>[init]
VERB_CONFIG = MiniGPTConfig(vocab_size=tokenizer().vocab_size, max_seq_len=64, d_model=64,
                            n_heads=4, n_kv_heads=2, n_layers=2)


def verb_qkv():
    """The running example's attention inputs: MiniGPT (seed 0) on the verb sequence, each
    layer's query of the last token and its keys and values of all 64 tokens, a layer per
    batch row, as the model's `attn` receives them: q (2, 4, 16), k and v (2, 2, 64, 16),
    float32."""
    torch.manual_seed(0)
    seen = []

    def record(q, k, v, **mask):
        seen.append((q[0, :, -1], k[0], v[0]))
        return attention_ref(q, k, v, **mask)

    with torch.no_grad():
        MiniGPT(VERB_CONFIG).eval()(torch.tensor([verb_sequence()]), attn=record)
    q, k, v = (torch.stack(layers) for layers in zip(*seen, strict=True))
    return q, k, v


def rounding_bound(q, k, v, ks, vs, tau):
    """Statement 2 per output element: (B, Hq, d) for q (B, Hq, d), k, v (B, Hkv, N, d) and
    their scales (B, Hkv, N), in float64."""
    g = q.shape[1] // k.shape[1]
    k, v, ks, vs = (t.repeat_interleave(g, dim=1).double() for t in (k, v, ks, vs))
    q = q.double()
    p = torch.softmax(tau * torch.einsum("bhd,bhnd->bhn", q, k), -1)
    o = torch.einsum("bhn,bhnd->bhd", p, v)
    delta = (tau * torch.einsum("bhd,bhnd->bhn", q.abs(), U8 * k.abs() + 2.0**-10 * ks[..., None]))
    spread = torch.einsum("bhn,bhnd->bhd", p, (v - o[:, :, None]).abs())
    from_k = torch.expm1(2 * delta.amax(-1))[..., None] * spread
    from_v = (U8 * v.abs() + 2.0**-10 * vs[..., None]).amax(2)
    return from_k + from_v


def rms(t):
    return t.double().pow(2).mean().sqrt().item()


@pytest.mark.parametrize("source", ["random", "verbs"])
def test_fp8_error_is_bounded_and_about_128_times_the_16_bit_error(source):
    if source == "random":
        lens, hq, hkv, d = [1, 17, 100, 300], 8, 2, 64
        q = make_q(len(lens), hq, d, dtype=torch.float16)
        cache = make_fp8_cache(lens, hkv, d, 16)
    else:
        q32, k, v = (t.to(DEVICE) for t in verb_qkv())
        lens, (_, hq, d), hkv = [64, 64], q32.shape, k.shape[1]
        q = q32.half()
        cache = make_fp8_cache(lens, hkv, d, 16, kv=(k, v))
    k, v = cache.k, cache.v  # as drawn (float32): what both caches round
    out8, _ = fp8_decode(q, cache)
    k16, v16, k_pool, v_pool, table, lens_t = make_cache(lens, hkv, d, 16, dtype=torch.float16)
    if source == "verbs":  # the 16-bit pools hold the running example's keys and values
        k16, v16 = k.half(), v.half()
        for seq, n in enumerate(lens):
            for logical in range(triton.cdiv(n, 16)):
                lo, hi = 16 * logical, min(n, 16 * logical + 16)
                k_pool[table[seq, logical], : hi - lo] = k16[seq, :, lo:hi].transpose(0, 1)
                v_pool[table[seq, logical], : hi - lo] = v16[seq, :, lo:hi].transpose(0, 1)
    assert torch.equal(k16.float(), k.half().float())  # the same keys, rounded to float16
    out16 = paged_decode(q, k_pool, v_pool, table, lens_t)
    (_, ks), (_, vs) = quantize_kv(k), quantize_kv(v)
    tau = d**-0.5
    for seq, n in enumerate(lens):
        ref = attention_ref(q[seq, :, None].double()[None], k[seq : seq + 1, :, :n].double(),
                            v[seq : seq + 1, :, :n].double())[0, :, 0]
        err8, err16 = out8[seq].double() - ref, out16[seq].double() - ref
        bound = rounding_bound(q[seq : seq + 1], k[seq : seq + 1, :, :n],
                               v[seq : seq + 1, :, :n], ks[seq : seq + 1, :, :n],
                               vs[seq : seq + 1, :, :n], tau)[0]
        assert (err8.abs() <= bound + 2 * err16.abs().max()).all()  # statement 2
        if n >= 64:  # statement 3: the typical error, over enough keys to be typical
            assert rms(err8) <= 2 * 2**7 * rms(err16), (rms(err8), rms(err16))
            assert rms(out8[seq] - out16[seq]) <= (2 * 2**7 + 1) * rms(err16)


def verb_logits(model, cache, prefill=16):
    """MiniGPT on the verb sequence through `cache` (sequence 0): a prefill of `prefill` tokens,
    then one token per step, each step fed the sequence's next token; the logits of every
    position, (64, vocab)."""
    tokens = verb_sequence()
    device = next(model.parameters()).device
    cache.allocate(0, tokens[:prefill])
    rows = [model(torch.tensor([tokens[:prefill]], device=device),
                  torch.arange(prefill, device=device)[None], cache.select([0]))[0]]
    for pos in range(prefill, len(tokens)):
        cache.append_slot(0, tokens[pos])
        rows.append(model(torch.tensor([[tokens[pos]]], device=device),
                          torch.tensor([[pos]], device=device), cache.select([0]))[0])
    return torch.cat(rows)


def quantized(x):
    """What an 8-bit cache stands for, rows of x rounded per token and kv head (float64)."""
    return dequantize_kv(*quantize_kv(x), torch.float64)


def test_minigpt_decodes_the_verb_sequence_through_the_fp8_cache():
    torch.manual_seed(0)
    model = MiniGPT(VERB_CONFIG).eval()
    reference = MiniGPT(VERB_CONFIG).double().eval()
    reference.load_state_dict(model.state_dict())
    tokens = torch.tensor([verb_sequence()])
    with torch.no_grad():
        want = reference(tokens)[0]  # float64, one pass, exact keys and values
        as_16 = reference(tokens, attn=lambda q, k, v, **m: attention_ref(
            q, k.half().double(), v.half().double(), **m))[0]
        as_8 = reference(tokens, attn=lambda q, k, v, **m: attention_ref(
            q, quantized(k), quantized(v), **m))[0]
        got = verb_logits(model.to(DEVICE), KernelPagedKVCache(
            VERB_CONFIG, 16, 8, device=DEVICE, kv_dtype=FP8_DTYPE)).double().cpu()
    # the kernels compute the 8-bit arithmetic (float32 model and kernels against float64; a
    # key the float32 model computes a hair off a rounding boundary may round the other way,
    # so the bar is a tenth of the rounding's own effect, not float32's 1e-4)
    assert rms(got - as_8) <= 0.1 * rms(as_8 - want), (rms(got - as_8), rms(as_8 - want))
    # its rounding against the 16-bit cache's: about 2^7 times, as statement 3 says
    assert rms(got - want) <= 2 * 2**7 * rms(as_16 - want), (rms(got - want), rms(as_16 - want))
    # the same next token at every position as the float64 pass and the 16-bit cache
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    assert torch.equal(got.argmax(-1), as_16.argmax(-1))
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-errors>>[init]
def fp8_args(**change):
    """A valid 8-bit decode call's arguments, with some replaced."""
    cache = make_fp8_cache([20, 37], 2, 32, 16)
    args = {"q": make_q(2, 4, 32), "k_pool": cache.k_pool, "v_pool": cache.v_pool,
            "block_tables": cache.table, "context_lens": cache.lens, **cache.scales()}
    args.update(change)
    return args


BAD_SCALE_CALLS = [  # (what to change, given the valid arguments; words the message names)
    (lambda a: {"k_scale": None}, r"missing: k_scale"),
    (lambda a: {"k_scale": None, "v_scale": None}, r"missing: k_scale, v_scale"),
    (lambda a: {"v_pool": a["v_pool"].float()}, r"float8_e4m3fn.*float32|both"),
    (lambda a: {"v_pool": a["v_pool"].half(), "q": a["q"].half()}, r"v_pool torch.float16"),
    (lambda a: {"k_pool": a["k_pool"].to(torch.float8_e5m2),
                "v_pool": a["v_pool"].to(torch.float8_e5m2)}, r"float8_e5m2"),
    (lambda a: {"k_pool": a["k_pool"].half(), "q": a["q"].half()}, r"k_pool torch.float16"),
    (lambda a: {"k_scale": a["k_scale"][:, :8]}, r"k_scale.*\(\d+, 16, 2\).*\(\d+, 8, 2\)"),
    (lambda a: {"v_scale": a["v_scale"][..., None]}, r"v_scale must have rank 3"),
    (lambda a: {"k_scale": a["k_scale"].half()}, r"k_scale must be float32.*float16"),
    (lambda a: {"v_scale": a["v_scale"].double()}, r"v_scale must be float32.*float64"),
    (lambda a: {"k_scale": a["k_scale"].to("meta")}, r"k_scale must be on .*meta"),
    (lambda a: {"v_scale": [1.0]}, r"v_scale must be a torch.Tensor"),
    (lambda a: {"k_scale": a["k_scale"].clone().requires_grad_()}, r"forward-only"),
]


@pytest.mark.parametrize(("change", "named"), BAD_SCALE_CALLS)
def test_fp8_decode_refuses_scales_or_pools_that_do_not_fit(change, named):
    args = fp8_args()
    args.update(change(args))
    with pytest.raises(ValueError, match=named):
        paged_decode(**args)


def test_scales_with_16_bit_pools_are_refused():
    k, v, k_pool, v_pool, table, lens = make_cache([20, 37], 2, 32, 16)
    scale = torch.ones(k_pool.shape[:3], device=DEVICE)
    for kwargs in ({"k_scale": scale, "v_scale": scale}, {"v_scale": scale}):
        with pytest.raises(ValueError, match="float8_e4m3fn pools only.*float32"):
            paged_decode(make_q(2, 4, 32), k_pool, v_pool, table, lens, **kwargs)
        with pytest.raises(ValueError, match="float8_e4m3fn pools only.*float32"):
            paged_prefill(make_q(5, 4, 32), k_pool, v_pool, table, lens,
                          torch.tensor([0, 2, 5], dtype=torch.int32, device=DEVICE), **kwargs)


@pytest.mark.parametrize("value", [NAN, 0.0, -1.0, float("inf")])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
def test_fp8_checked_path_refuses_a_bad_scale_that_a_sequence_reads(value, which):
    cache = make_fp8_cache([20, 37], 2, 32, 16)
    phys, slot = int(cache.table[1, 2]), 3  # key 35 of sequence 1, kv head 1
    getattr(cache, which)[phys, slot, 1] = value
    shown = "nan" if value != value else repr(value)
    with pytest.raises(ValueError, match=rf"{which}\[{phys}, 3, 1\] = {shown}.*sequence 1"):
        fp8_decode(make_q(2, 4, 32), cache)
    starts = torch.tensor([0, 3, 5], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=rf"{which}\[{phys}, 3, 1\] = {shown}.*sequence 1"):
        paged_prefill(make_q(5, 4, 32), cache.k_pool, cache.v_pool, cache.table, cache.lens,
                      starts, **cache.scales())


def test_fp8_checked_path_leaves_alone_the_scales_no_sequence_reads():
    # Past a context, behind a window, in a block no sequence owns: NaN already (the fence),
    # and zero here; every call passes.
    lens = [20, 37]
    cache = make_fp8_cache(lens, 2, 32, 16, first_kept=[0, 16])
    phys = int(cache.table[1, 2])
    cache.k_scale[phys, 5:] = 0.0  # slots past key 36 of sequence 1
    cache.v_scale[spare(cache)] = -1.0
    check_fp8_decode(make_q(2, 4, 32), cache, lens, window=20)


def test_fp8_fast_path_trusts_the_scales():
    # No sync and no refusal: the sequence that reads a NaN scale gets a NaN output, the
    # other is untouched.
    lens = [20, 37]
    cache = make_fp8_cache(lens, 2, 32, 16)
    q = make_q(2, 4, 32)
    want, _ = fp8_decode(q, cache)
    cache.v_scale[int(cache.table[1, 1]), 0, 0] = NAN
    flags = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    got, _ = fp8_decode(q, cache, max_context_len=37, error_flags=flags)
    assert torch.equal(got[0], want[0]) and got[1].isnan().any() and not flags.any()
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-cache>>[init]
SMALL = MiniGPTConfig(vocab_size=10, max_seq_len=40, d_model=64, n_heads=4, n_kv_heads=2,
                      n_layers=2)


def test_the_fp8_cache_holds_8_bit_pools_and_head_major_scales():
    cache = KernelPagedKVCache(SMALL, 10, 8, device=DEVICE, kv_dtype=FP8_DTYPE)
    assert cache.k.dtype == cache.v.dtype == FP8_DTYPE
    assert cache.k.shape == (2, 10, 8, 2, 16)
    for s in (cache.k_scale, cache.v_scale):
        assert s.shape == (2, 10, 8, 2) and s.dtype == torch.float32
        assert s.stride()[2:] == (1, 8)  # one kv head's slots side by side
    plain = KernelPagedKVCache(SMALL, 10, 8, device=DEVICE)
    assert plain.k.dtype == torch.float32 and plain.k_scale is None
    with pytest.raises(ValueError, match="kv_dtype.*float16"):
        KernelPagedKVCache(SMALL, 10, 8, kv_dtype=torch.float16)


def test_the_fp8_cache_stores_what_quantize_kv_makes_and_gathers_it_back():
    cache = KernelPagedKVCache(SMALL, 10, 8, device=DEVICE, kv_dtype=FP8_DTYPE)
    cache.allocate(0, list(range(11)))
    view = cache.select([0])
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    k, v = (torch.randn(1, 2, 11, 16, generator=gen, device=DEVICE) for _ in "kv")
    view.write(1, k, v, torch.arange(11)[None])
    got_k, got_v = view.gather(1, 0, 0, 11)
    for got, x in ((got_k, k), (got_v, v)):
        assert got.dtype == torch.float32 and got.shape == x.shape
        assert torch.equal(got, quantized(x).float())


def test_copy_on_write_carries_the_scales():
    # A fork shares the last, partly filled block; the child's next token gets a copy of it,
    # whose earlier slots must keep their scales.
    cache = KernelPagedKVCache(SMALL, 10, 8, device=DEVICE, kv_dtype=FP8_DTYPE)
    cache.allocate(0, list(range(11)))
    view = cache.select([0])
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    k, v = (torch.randn(1, 2, 11, 16, generator=gen, device=DEVICE) for _ in "kv")
    for layer in range(2):
        view.write(layer, k, v, torch.arange(11)[None])
    cache.manager.mark_computed(0, 11)
    cache.fork(0, 1)
    cache.append_slot(1, 5)
    assert cache.manager.block_table(1)[1] != cache.manager.block_table(0)[1]  # copied
    for layer in range(2):
        got = cache.gather(layer, 1, 0, 11)
        assert torch.equal(got[0], quantized(k).float()) and torch.equal(got[1],
                                                                        quantized(v).float())


def test_a_compiled_decode_step_through_the_fp8_cache():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    model = MiniGPT(SMALL).eval().to(DEVICE)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model.forward, backend=counter, fullgraph=True)
    caches = [KernelPagedKVCache(SMALL, 20, 8, device=DEVICE, kv_dtype=FP8_DTYPE)
              for _ in range(2)]
    prompts = {0: [5, 1, 7, 3, 9, 2, 8, 4, 6], 1: [2, 4, 6]}
    with torch.no_grad():
        for cache in caches:
            for seq, prompt in prompts.items():
                cache.allocate(seq, prompt)
                model(torch.tensor([prompt], device=DEVICE),
                      torch.arange(len(prompt), device=DEVICE)[None], cache.select([seq]))
        lengths = {seq: len(p) for seq, p in prompts.items()}
        for step in range(3):
            outs = []
            for cache in caches:
                for seq in prompts:
                    cache.append_slot(seq, step + 1)
                view = cache.select(list(prompts))
                tokens = torch.full((2, 1), step + 1, device=DEVICE)
                positions = torch.tensor([[lengths[s]] for s in prompts], device=DEVICE)
                if cache is caches[0]:
                    outs.append(model(tokens, positions, view))
                else:
                    outs.append(compiled(tokens, positions, view))
                    view.commit(positions)
                    assert not view.error_flags.any()
            torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
            lengths = {s: n + 1 for s, n in lengths.items()}
    assert counter.frame_count == 1
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-gpu>>[init]
GPU_FP8 = [  # (lengths, Hq, Hkv, d, block_size, window)
    ([1, 4097, 33000, 8191], 32, 8, 128, 16, None),
    ([4096] * 64, 32, 8, 128, 16, None),  # the bars' shape (The measurement)
    ([777, 20000], 16, 1, 64, 128, 4096),
    ([5000, 3, 12345], 8, 8, 256, 32, 1000),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("lens", "hq", "hkv", "d", "block_size", "window"), GPU_FP8)
def test_gpu_fp8_decode_computes_what_the_cache_stands_for(lens, hq, hkv, d, block_size, window,
                                                            dtype):
    first_kept = None if window is None else [max(0, n - window) for n in lens]
    cache = make_fp8_cache(lens, hkv, d, block_size, device="cuda", first_kept=first_kept)
    check_fp8_decode(make_q(len(lens), hq, d, dtype=dtype, device="cuda"), cache, lens,
                     window=window)


@pytest.mark.gpu
def test_gpu_fp8_prefill_computes_what_the_cache_stands_for():
    for dtype in (torch.float16, torch.bfloat16):
        ctx, q_lens = [3000, 517], [1000, 517]
        cache = make_fp8_cache(ctx, 8, 128, 16, device="cuda")
        q = torch.randn(sum(q_lens), 32, 128, device="cuda").to(dtype)
        starts = torch.tensor([0, 1000, 1517], dtype=torch.int32, device="cuda")
        out = paged_prefill(q, cache.k_pool, cache.v_pool, cache.table, cache.lens, starts,
                            **cache.scales())
        for seq, rows in ((0, slice(0, 1000)), (1, slice(1000, 1517))):
            n = ctx[seq]
            k_hat, v_hat = cache.k_hat[seq : seq + 1, :, :n], cache.v_hat[seq : seq + 1, :, :n]
            ref = attention_ref(q[rows].transpose(0, 1)[None].double(), k_hat, v_hat,
                                causal=True)[0].transpose(0, 1)
            same = attention_same_dtype(q[rows].transpose(0, 1)[None], k_hat.to(dtype),
                                        v_hat.to(dtype), causal=True)[0].transpose(0, 1)
            torch_err = (same.double() - ref).abs().max().item()
            assert (out[rows].double() - ref).abs().max().item() <= 2 * torch_err + 1e-6


@pytest.mark.gpu
def test_gpu_a_nan_stored_in_the_pool_reaches_the_output():
    lens = [20, 37]
    cache = make_fp8_cache(lens, 2, 32, 16, device="cuda")
    cache.k_pool[int(cache.table[1, 0]), 4, 0, 7] = NAN  # a key sequence 1 reads
    out, _ = fp8_decode(make_q(2, 4, 32, device="cuda"), cache)
    assert not out[0].isnan().any() and out[1, :2].isnan().all()


@pytest.mark.gpu
def test_gpu_fp8_decode_in_a_cuda_graph():
    lens = [300, 4097, 1]
    cache = make_fp8_cache(lens, 8, 128, 16, device="cuda")
    q = make_q(3, 32, 128, dtype=torch.float16, device="cuda")
    flags = torch.zeros(3, dtype=torch.int32, device="cuda")
    args = (q, cache.k_pool, cache.v_pool, cache.table, cache.lens)
    kwargs = {"max_context_len": 4097, "error_flags": flags, **cache.scales()}
    paged_decode(*args, **kwargs)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = paged_decode(*args, **kwargs)
    q.copy_(make_q(3, 32, 128, dtype=torch.float16, device="cuda", seed=7))
    graph.replay()
    torch.testing.assert_close(out, paged_decode(*args, **cache.scales()))
    assert not flags.any()


@pytest.mark.gpu
def test_gpu_minigpt_decodes_the_verb_sequence_through_the_fp8_and_the_16_bit_cache():
    torch.manual_seed(0)
    model = MiniGPT(VERB_CONFIG).eval().half().cuda()
    reference = MiniGPT(VERB_CONFIG).double().eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = reference(torch.tensor([verb_sequence()]))[0]
        got8 = verb_logits(model, KernelPagedKVCache(VERB_CONFIG, 16, 8, dtype=torch.float16,
                                                     device="cuda", kv_dtype=FP8_DTYPE))
        got16 = verb_logits(model, KernelPagedKVCache(VERB_CONFIG, 16, 8, dtype=torch.float16,
                                                      device="cuda"))
    got8, got16 = got8.double().cpu(), got16.double().cpu()
    assert torch.equal(got8.argmax(-1), got16.argmax(-1))
    assert torch.equal(got8.argmax(-1), want.argmax(-1))
    # the float16 model's own error is in both; the cache's rounding on top of it
    assert rms(got8 - want) <= 2 * 2**7 * rms(got16 - want)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-fp8-check-hopper>>[init]
# A Gluon launch (kernel, args, meta, as launch_args makes them) compiled for sm_90 by Triton's
# NVIDIA backend (no GPU needed); its PTX printed. The tail of a script that sets them up.
SM90_PTX = """
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from minimodel.kernels import _jit_args
pointer = {torch.float16: "*fp16", torch.float32: "*fp32", torch.int32: "*i32"}
signature, constexprs = {}, {}
for i, p in enumerate(p.name for p in kernel.params):
    a = _jit_args(args)[i] if i < len(args) else None
    if p in meta or a is None:
        signature[p], constexprs[(i,)] = "constexpr", meta.get(p)
    else:
        signature[p] = (pointer[a.dtype] if isinstance(a, torch.Tensor) else
                        "fp32" if isinstance(a, float) else
                        "i32" if isinstance(a, int) else mangle_type(a))
src = GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs)
print(triton.compile(src, target=GPUTarget("cuda", 90, 32),
                     options={"num_warps": meta["num_warps"]}).asm["ptx"])
"""


def sm90_ptx(setup: str) -> str:
    """The PTX of the launch the script `setup` makes (SM90_PTX after it), compiled in a
    process of its own, as FOLD_PTX in the solution's checks: conftest's TRITON_INTERPRET=1
    turns every kernel of this one into the interpreter's. Skips where this Triton has no NVIDIA
    backend."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no NVIDIA backend to compile for sm_90 with")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", setup + SM90_PTX], env=env,
                          capture_output=True, text=True, check=True).stdout


# The Hopper kernel at the bars' head dim, two splits.
HOPPER_PTX = """
import torch, triton
from minimodel import paged_attention_hopper as ph
from minimodel.paged_attention import FP8_DTYPE
b, hq, hkv, d, n, nb = 4, 32, 8, 128, 256, 64
q = torch.zeros(b, hq, d, dtype=torch.float16)
k, v = (torch.zeros(nb, 16, hkv, d).to(FP8_DTYPE) for _ in "kv")
ks, vs = (torch.ones(nb, hkv, 16).transpose(1, 2) for _ in "kv")
table, lens = torch.zeros(b, n // 16, dtype=torch.int32), torch.full((b,), n, dtype=torch.int32)
o, lse = torch.empty(b, hq, 2, d), torch.empty(b, hq, 2)
kernel, _, args, meta = ph.launch_args(
    q, k, v, table, lens, o, lse, None, ks, vs, qk_scale=0.1, window=None, split_len=128,
    num_splits=2, capacity=n, strides_o=o.stride(), strides_lse=lse.stride(), store_lse=True,
    flags=(1, 2))
"""


def test_the_hopper_kernel_reads_the_pools_through_the_tma_only():
    """Compiled for sm_90: four TMA copies a block (K, V, their scales), four blocks an
    iteration, in the STAGES iterations that fill the ring and in the loop's refill; no plain
    load of an 8-bit element."""
    import re

    ptx = sm90_ptx(HOPPER_PTX)
    assert ptx.count("cp.async.bulk.tensor.2d") == 4 * 4 * (paged_attention_hopper.STAGES + 1)
    assert not re.search(r"ld\.global[.\w]*\.[bsu]8\b", ptx)
    assert "mma.sync.aligned.m16n8k16" in ptx


@pytest.mark.parametrize(("batch", "keys", "splits"), [
    (8, 4096, 8), (8, 32768, 8), (64, 1024, 1), (64, 4096, 1), (64, 16384, 1), (256, 4096, 1),
    (1, 256, 1), (1, 1024, 4), (1, 2048, 8), (1, 10**6, 8),
])
def test_the_hopper_split_rule(batch, keys, splits):
    """hopper_splits on an H200 (132 SMs), 8 kv heads: powers of two up to 8, three programs
    an SM, no split shorter than four iterations of 64 keys."""
    assert paged_attention_hopper.hopper_splits(batch, 8, keys, 132) == splits


@contextlib.contextmanager
def on_the_hopper_kernel():
    """Asserts that the Hopper kernel ran the decode calls inside (a fresh plan: launch_args
    called)."""
    real = paged_attention_hopper.launch_args
    with (mock.patch.dict(pa._DECODE_PLANS, clear=True),
          mock.patch.object(paged_attention_hopper, "launch_args", wraps=real) as spy):
        yield
    assert spy.called


HOPPER_LENS = [0, 1, 15, 16, 17, 63, 64, 65, 128, 200]  # block and iteration edges


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("window", [None, 1, 5, 40])
@pytest.mark.parametrize("num_splits", [None, 1, 2, 3])
def test_gpu_hopper_fp8_decode_computes_what_the_cache_stands_for(d, window, num_splits, dtype):
    """The Hopper kernel on ragged lengths (and blocks freed behind a window: their -1 entries
    never read, so nothing flagged), NaN in every slot no sequence owns and around the index
    tensors, held to statement 1's tolerance."""
    lens = HOPPER_LENS
    first_kept = None if window is None else [max(0, n - window) for n in lens]
    cache = make_fp8_cache(lens, 2, d, 16, device="cuda", first_kept=first_kept)
    q = make_q(len(lens), 8, d, dtype=dtype, device="cuda")
    flags = torch.zeros(len(lens), dtype=torch.int32, device="cuda")
    with on_the_hopper_kernel():
        check_fp8_decode(q, cache, lens, window=window, num_splits=num_splits,
                         max_context_len=max(lens), error_flags=flags)
    assert not flags.any()


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2])
def test_gpu_hopper_fp8_decode_flags_bad_entries_and_lengths(num_splits, monkeypatch):
    """Entries -1 and num_blocks (never followed), a length past its row (cut to the row: the
    entry outside the pool past it never read): flagged as the Triton kernel flags them, in their
    sequences only; every other sequence's output as on the good table."""
    lens = HOPPER_LENS
    cache = make_fp8_cache(lens, 2, 64, 16, device="cuda")
    q = make_q(len(lens), 8, 64, dtype=torch.float16, device="cuda")
    table, lens_t = cache.table.clone(), cache.lens.clone()
    table[4, 1], table[8, 0] = -1, cache.k_pool.shape[0]
    table[6] = table[6, 0]  # every entry of row 6 in the pool, and its length past the row
    lens_t[6] = table.shape[1] * 16 + 5
    table = fenced(table, cache.k_pool.shape[0] + 7)  # past each row: an entry outside the pool
    kw = {"max_context_len": max(lens), "num_splits": num_splits, **cache.scales()}
    flags = [torch.zeros(len(lens), dtype=torch.int32, device="cuda") for _ in range(2)]
    with on_the_hopper_kernel():
        got = paged_decode(q, cache.k_pool, cache.v_pool, table, lens_t, error_flags=flags[0],
                           **kw)
    want = paged_decode(q, cache.k_pool, cache.v_pool, cache.table, cache.lens, **kw)
    monkeypatch.setattr(pa, "HOPPER_FP8", False)
    paged_decode(q, cache.k_pool, cache.v_pool, table, lens_t, error_flags=flags[1], **kw)
    entry, length = pa.ERR_BAD_ENTRY, pa.ERR_BAD_LENGTH
    assert flags[0].tolist() == flags[1].tolist() == [0, 0, 0, 0, entry, 0, length, 0, entry, 0]
    keep = [r for r in range(len(lens)) if r not in (4, 6, 8)]
    torch.testing.assert_close(got[keep], want[keep])
    assert got[[4, 8]].isfinite().all()


@pytest.mark.gpu
@pytest.mark.parametrize("size", [2.0**-20, 1.0, 2.0**20])
def test_gpu_hopper_bfloat16_queries_of_any_size(size):
    """A bfloat16 q far outside float16's range either way, brought into it by its power of two:
    statement 1's tolerance still holds."""
    lens = [1, 300, 4097]
    cache = make_fp8_cache(lens, 8, 128, 16, device="cuda")
    q = (make_q(3, 32, 128, device="cuda") * size).bfloat16()
    with on_the_hopper_kernel():
        check_fp8_decode(q, cache, lens, max_context_len=4097)


@pytest.mark.gpu
def test_gpu_hopper_fp8_decode_without_lse_and_strided_q():
    """One split without lse stores O only (o stands in for the lse pointer), and q and O are
    read and written through their strides: the same O as with lse, on contiguous q."""
    lens = [300, 4097, 1]
    cache = make_fp8_cache(lens, 8, 128, 16, device="cuda")
    q = make_q(3, 32, 128, dtype=torch.float16, device="cuda")
    strided = torch.empty(3, 32, 256, dtype=torch.float16, device="cuda")[..., ::2]
    strided.copy_(q)
    kw = {"max_context_len": 4097, "num_splits": 1, **cache.scales()}
    args = (cache.k_pool, cache.v_pool, cache.table, cache.lens)
    with_lse, _ = paged_decode(q, *args, return_lse=True, **kw)
    torch.testing.assert_close(paged_decode(q, *args, **kw), with_lse, atol=0, rtol=0)
    torch.testing.assert_close(paged_decode(strided, *args, **kw), with_lse, atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_hopper_kernel_takes_only_what_fits():
    """fits: the bars' case, and each condition broken alone (those go to the Triton kernel,
    whose checks above cover them)."""
    from minimodel.paged_attention_hopper import fits

    cache = make_fp8_cache([64], 8, 128, 16, device="cuda")
    q = make_q(1, 32, 128, dtype=torch.float16, device="cuda")
    pools, scales = (cache.k_pool, cache.v_pool), (cache.k_scale, cache.v_scale)
    assert fits(q, *pools, *scales) and fits(q.bfloat16(), *pools, *scales)
    assert not fits(q.float(), *pools, *scales)
    assert not fits(make_q(1, 8 * 17, 128, dtype=torch.float16, device="cuda"), *pools, *scales)
    slot_major = cache.k_scale.contiguous()  # (num_blocks, block_size, Hkv) slot-major
    assert not fits(q, *pools, slot_major, cache.v_scale)
    assert not fits(q, cache.k_pool[:, :, :4], cache.v_pool[:, :, :4], *scales)
    small = make_fp8_cache([64], 8, 32, 16, device="cuda")
    assert not fits(make_q(1, 32, 32, dtype=torch.float16, device="cuda"), small.k_pool,
                    small.v_pool, small.k_scale, small.v_scale)
    blocks32 = make_fp8_cache([64], 8, 128, 32, device="cuda")
    assert not fits(q, blocks32.k_pool, blocks32.v_pool, blocks32.k_scale, blocks32.v_scale)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/04-mqa-gqa.md#tests/test_attention_mqa_gqa.py>>[init]
"""Checks of the MQA/GQA variants of MiniGPT (tangled from docs/lab/04-mqa-gqa.md)."""

import dataclasses

import pytest
import torch
from test_block_manager import raises_naming  # Lab 03's: a message names each value
from torch.utils._python_dispatch import TorchDispatchMode

from minimodel.attention_mqa_gqa import (
    CacheBytes,
    blank_kv_cache,
    cache_bytes,
    grouped_attention,
    mean_pool_kv,
    with_kv_heads,
)
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.reference import attention_ref
from minimodel.roofline import kv_cache_bytes
from minimodel.verbs import tokenizer, verb_sequence

pytestmark = pytest.mark.lab("04")  # the task's tests: `make check-mine LAB=04` runs them


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-grouped>>[init]
def qkv(b, hq, hkv, nq, nk, d, dtype=torch.float64):
    return (torch.randn(b, hq, nq, d, dtype=dtype), torch.randn(b, hkv, nk, d, dtype=dtype),
            torch.randn(b, hkv, nk, d, dtype=dtype))


def repeated(t, g):
    """The MHA that GQA must equal: each kv head repeated for the g query heads that read it."""
    return t.repeat_interleave(g, dim=1)


@pytest.mark.parametrize("hkv", [8, 4, 2, 1])
@pytest.mark.parametrize(("nq", "nk"), [(1, 37), (5, 5), (7, 19), (6, 4)])
@pytest.mark.parametrize(("causal", "window"), [(False, None), (True, None), (True, 3)])
def test_grouped_equals_the_reference_on_repeated_heads(hkv, nq, nk, causal, window):
    torch.manual_seed(0)
    q, k, v = qkv(2, 8, hkv, nq, nk, 16)
    expected = attention_ref(q, repeated(k, 8 // hkv), repeated(v, 8 // hkv), causal=causal,
                             window=window)
    got = grouped_attention(q, k, v, causal=causal, window=window)
    assert got.shape == (2, 8, nq, 16) and got.dtype == torch.float64
    torch.testing.assert_close(got, expected)


def test_grouped_head_mapping_by_hand():
    # Hq=4, Hkv=2: heads 0, 1 read kv head 0 (values 10), heads 2, 3 kv head 1 (values 20).
    q = torch.zeros(1, 4, 1, 2, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 2, dtype=torch.float64)
    v = torch.stack([torch.full((3, 2), 10.0), torch.full((3, 2), 20.0)])[None].double()
    out = grouped_attention(q, k, v)
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([10.0, 10.0, 20.0, 20.0]).double())


def test_scale_dtype_and_layout_follow_the_reference():
    torch.manual_seed(0)
    q, k, v = qkv(1, 8, 2, 9, 9, 8, dtype=torch.float16)
    got = grouped_attention(q, k, v, causal=True, scale=0.3)
    assert got.dtype == torch.float32
    expected = attention_ref(q, repeated(k, 4), repeated(v, 4), causal=True, scale=0.3)
    torch.testing.assert_close(got, expected)
    qt = torch.randn(1, 9, 8, 8, dtype=torch.float64).transpose(1, 2)  # as MiniGPT passes it
    kt, vt = (torch.randn(1, 9, 2, 8, dtype=torch.float64).transpose(1, 2) for _ in range(2))
    torch.testing.assert_close(grouped_attention(qt, kt, vt, causal=True),
                               attention_ref(qt, repeated(kt, 4), repeated(vt, 4), causal=True))


class LargestNewStorage(TorchDispatchMode):
    """Records the largest storage any operation creates (a view shares its input's)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("hkv", [2, 1])
@pytest.mark.parametrize("nq", [1, 3])
def test_grouped_never_materialises_repeated_heads(hkv, nq):
    torch.manual_seed(0)
    b, hq, nk, d = 2, 8, 50, 16
    q, k, v = qkv(b, hq, hkv, nq, nk, d)
    repeated_bytes = b * hq * nk * d * 8  # K (or V) with Hq heads, float64
    with LargestNewStorage() as probe:
        grouped_attention(q, k, v, causal=True)
    assert probe.largest < repeated_bytes, f"a {probe.largest}-byte tensor was created"
    with LargestNewStorage() as reference_probe:  # the probe sees a repeat when there is one
        attention_ref(q, k, v, causal=True)
    assert reference_probe.largest >= repeated_bytes
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-variants>>[init]
def config_8(**kw):
    return MiniGPTConfig(vocab_size=tokenizer().vocab_size, max_seq_len=80, d_model=64,
                         n_heads=8, n_kv_heads=8, n_layers=2, **kw)


def at(start: int, n: int) -> torch.Tensor:
    return torch.arange(start, start + n)[None]


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
@pytest.mark.parametrize("window", [None, 5])
def test_prefill_then_decode_equals_one_full_pass(n_kv_heads, window):
    torch.manual_seed(0)
    config = with_kv_heads(config_8(window=window), n_kv_heads)
    assert config.n_kv_heads == n_kv_heads and config.window == window
    model = MiniGPT(config).double().eval()
    tokens = torch.tensor([verb_sequence()])  # the canonical 64 tokens
    full = model(tokens, attn=grouped_attention)
    torch.testing.assert_close(full, model(tokens))  # the reference, heads repeated
    cache = blank_kv_cache(config, batch=1, dtype=torch.float64)
    steps = [model(tokens[:, :16], at(0, 16), cache, attn=grouped_attention)]
    steps += [model(tokens[:, i : i + 1], at(i, 1), cache, attn=grouped_attention)
              for i in range(16, 64)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_variants_change_only_the_kv_heads():
    config = config_8(window=7)
    for n in (8, 4, 2, 1):
        assert with_kv_heads(config, n) == dataclasses.replace(config, n_kv_heads=n)
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-conversion>>[init]
def wkv(model, layer):
    return model.blocks[layer].attn.wkv.weight.detach()


def test_mha_conversion_is_exact_and_returns_a_new_model():
    torch.manual_seed(0)
    model = MiniGPT(config_8()).double().eval()
    before = {n: t.clone() for n, t in model.state_dict().items()}
    same = mean_pool_kv(model, 8)
    tokens = torch.tensor([verb_sequence()])
    assert same is not model and same.config == model.config and not same.training
    assert torch.equal(same(tokens), model(tokens))
    with torch.no_grad():
        for p in same.parameters():
            p.add_(1.0)  # shares no tensor with the original
    assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())


def test_each_new_head_is_the_mean_of_its_group():
    torch.manual_seed(0)
    model = MiniGPT(config_8()).double()
    pooled = mean_pool_kv(model, 2)
    d, dm = model.config.head_dim, model.config.d_model
    assert pooled.config.n_kv_heads == 2 and next(pooled.parameters()).dtype == torch.float64
    for layer in range(2):
        old, new = wkv(model, layer), wkv(pooled, layer)
        assert new.shape == (2 * 2 * d, dm)
        for part in range(2):  # keys, then values
            for j in range(2):  # new head j averages old heads 4j ... 4j + 3
                members = [old[(part * 8 + h) * d : (part * 8 + h + 1) * d]
                           for h in range(4 * j, 4 * j + 4)]
                torch.testing.assert_close(new[(part * 2 + j) * d : (part * 2 + j + 1) * d],
                                           sum(members) / 4)
    for (name, p), (_, p_new) in zip(model.named_parameters(), pooled.named_parameters(),
                                     strict=True):
        if not name.endswith("attn.wkv.weight"):
            assert torch.equal(p, p_new), name


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_pooling_heads_that_are_already_equal_keeps_the_function(n_kv_heads):
    torch.manual_seed(0)
    model = MiniGPT(config_8()).double().eval()
    r, d = 8 // n_kv_heads, model.config.head_dim
    with torch.no_grad():
        for block in model.blocks:
            w = block.attn.wkv.weight.view(2, 8, d, -1)
            w.copy_(w[:, ::r].repeat_interleave(r, dim=1))  # every head of a group equal
    tokens = torch.tensor([verb_sequence()])
    pooled = mean_pool_kv(model, n_kv_heads)
    torch.testing.assert_close(pooled(tokens, attn=grouped_attention), model(tokens))


def test_pooling_in_two_steps_is_pooling_in_one():
    torch.manual_seed(0)
    model = MiniGPT(config_8()).double()
    twice, once = mean_pool_kv(mean_pool_kv(model, 4), 2), mean_pool_kv(model, 2)
    for layer in range(2):
        torch.testing.assert_close(wkv(twice, layer), wkv(once, layer))
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-cache>>[init]
@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
def test_measured_cache_bytes_equal_the_formula(n_kv_heads):
    torch.manual_seed(0)
    config = with_kv_heads(config_8(), n_kv_heads)
    model = MiniGPT(config).double().eval()
    cache = blank_kv_cache(config, batch=2, dtype=torch.float64)
    layers, d = config.n_layers, config.head_dim

    def formula(tokens, batch=1):
        return kv_cache_bytes(layers, n_kv_heads, d, tokens, batch=batch, elem_bytes=8)

    assert cache_bytes(cache) == CacheBytes(allocated=formula(80, batch=2), filled=0)
    tokens = torch.tensor([verb_sequence()])
    logits = [model(tokens[:, :16], at(0, 16), cache.select([0]), attn=grouped_attention)]
    logits += [model(tokens[:, i : i + 1], at(i, 1), cache.select([0]), attn=grouped_attention)
               for i in range(16, 64)]
    logits.append(model(tokens[:, :30], at(0, 30), cache.select([1]), attn=grouped_attention))
    assert all(x.isfinite().all() for x in logits)  # no NaN slot was ever read
    measured = cache_bytes(cache)
    assert measured.allocated == formula(80, batch=2)  # the reservation: max_seq_len slots
    assert measured.filled == formula(64) + formula(30)  # what the two sequences hold
    assert measured.filled == cache.nbytes()  # and MiniGPT's own count agrees


def test_cache_bytes_read_the_tensors():
    config = with_kv_heads(config_8(), 2)
    cache = blank_kv_cache(config, batch=1, dtype=torch.float16)
    assert cache_bytes(cache) == CacheBytes(
        allocated=kv_cache_bytes(2, 2, config.head_dim, 80, elem_bytes=2), filled=0)
    cache.k[1, 0, 1, 7] = 0.0  # one key of one head, one token, one layer: d elements
    assert cache_bytes(cache).filled == config.head_dim * 2
    whole = cache_bytes(cache).allocated
    cache.k = cache.k[:, :, :, :10]  # a view of ten slots still holds the whole buffer
    assert cache_bytes(cache).allocated == whole
    cache.v = cache.k  # one buffer seen twice is one allocation
    assert cache_bytes(cache).allocated == whole // 2
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-errors>>[init]
@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: with_kv_heads(config_8(), 3), ["3", "8"]),
        (lambda: with_kv_heads(config_8(), 16), ["16", "8"]),
        (lambda: with_kv_heads(config_8(), 0), ["n_kv_heads", "0"]),
        (lambda: with_kv_heads(config_8(), 2.0), ["n_kv_heads", "2.0"]),
        (lambda: with_kv_heads(config_8(), True), ["n_kv_heads", "True"]),
        (lambda: grouped_attention(*qkv(1, 8, 3, 4, 4, 8)), ["8", "3"]),
        (lambda: grouped_attention(*qkv(1, 8, 2, 4, 4, 8), window=2), ["window", "causal"]),
        (lambda: mean_pool_kv(MiniGPT(config_8()), 3), ["3", "8"]),
        (lambda: mean_pool_kv(MiniGPT(with_kv_heads(config_8(), 2)), 4), ["2", "4"]),
        (lambda: mean_pool_kv(MiniGPT(with_kv_heads(config_8(), 4)), 8), ["4", "8"]),
        (lambda: mean_pool_kv("kv8", 2), ["model"]),
        (lambda: blank_kv_cache(config_8(), 1, dtype=torch.int32), ["dtype"]),
        (lambda: blank_kv_cache(config_8(), 0), ["batch", "0"]),
        (lambda: cache_bytes(torch.zeros(3)), ["cache"]),
    ],
)
def test_bad_configurations_and_inputs_raise(call, names):
    # Lab 03's check: each name as a whole word or number, whatever the words around it
    # (MiniGPTConfig.n_kv_heads names n_kv_heads; 3 is not named by 30 or 2.3)
    raises_naming(call, *names)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/theory/04-gqa-mqa-mla.md#tests/test_kv_cache_bytes.py>>[init]
"""Checks of the KV-cache and MLA counts (tangled from docs/theory/04-gqa-mqa-mla.md)."""

import pytest
import torch

from minimodel.ceilings import HARDWARE
from minimodel.minigpt import KVCache, MiniGPTConfig
from minimodel.roofline import (
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    kv_cache_bytes,
    mla_cache_bytes,
    mla_decode_bytes,
    mla_decode_flops,
)


# ~/~ begin <<docs/theory/04-gqa-mqa-mla.md#roofline-mla-check>>[init]
@pytest.mark.parametrize(("layers", "heads", "kv_heads", "d"), [(1, 4, 4, 32), (3, 4, 2, 16),
                                                               (2, 8, 1, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_model_counts_the_bytes_minigpt_allocates(layers, heads, kv_heads, d, dtype):
    config = MiniGPTConfig(vocab_size=10, max_seq_len=64, d_model=heads * d, n_heads=heads,
                           n_kv_heads=kv_heads, n_layers=layers)
    cache = KVCache(config, batch=3, dtype=dtype)
    elem = torch.finfo(dtype).bits // 8
    assert cache.nbytes(64) == kv_cache_bytes(layers, kv_heads, d, 64, batch=3, elem_bytes=elem)
    assert cache.k.nbytes + cache.v.nbytes == cache.nbytes(64)  # the whole buffer, full


@pytest.mark.parametrize("g", [1, 4, 8, 32])
def test_decode_intensity_tends_to_g_in_fp16(g):
    hq, d, n = 32, 128, 1 << 20
    flops = attention_flops(1, hq, 1, n, d)
    nbytes = attention_min_bytes(1, hq, hq // g, 1, n, d)
    assert arithmetic_intensity(flops, nbytes) == pytest.approx(g, rel=1e-3)


def test_mla_cache_and_intensity_for_deepseek_v2_sizes():
    per_token = mla_cache_bytes(1, 512, 64, 1)
    assert per_token == 576 * 2
    assert kv_cache_bytes(1, 128, 128, 1) / per_token == pytest.approx(2 * 128 * 128 / 576)
    n = 4096
    intensity = mla_decode_flops(1, 128, n, 512, 64) / mla_cache_bytes(1, 512, 64, n)
    assert intensity == pytest.approx(128 * (4 * 512 + 2 * 64) / (2 * 576))
    assert intensity > HARDWARE["H200"].ridge


def test_mla_decode_bytes_on_the_compulsory_basis():
    b, h, n = 64, 128, 4096
    cache = mla_cache_bytes(1, 512, 64, n, batch=b)
    assert mla_decode_bytes(b, h, n, 512, 64) == cache + 2 * b * h * (576 + 512)
    # Without the RoPE key, MLA is MQA over d_c-wide latents whose one cached row serves as both
    # key and value: attention_min_bytes' count, less the second (value) read of the cache.
    assert (mla_decode_bytes(b, h, n, 512, 0)
            == attention_min_bytes(b, h, 1, 1, n, 512) - 2 * b * n * 512)
    intensity = mla_decode_flops(b, h, n, 512, 64) / mla_decode_bytes(b, h, n, 512, 64)
    assert intensity == pytest.approx(228.3, abs=0.05)  # cache only: 241.8



@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: kv_cache_bytes(1, 0, 8, 4), r"n_kv_heads must be an int >= 1, got 0"),
        (lambda: kv_cache_bytes(1, 1, 8, -1), r"tokens must be an int >= 0, got -1"),
        (lambda: mla_cache_bytes(1, 512, -64, 4), r"rope_dim must be an int >= 0"),
        (lambda: mla_decode_flops(1, 128, 0, 512, 64), r"nk must be an int >= 1, got 0"),
        (lambda: mla_decode_bytes(1, 0, 8, 512, 64), r"n_heads must be an int >= 1, got 0"),
        (lambda: mla_decode_bytes(1, 8, 8, 512, 64, elem_bytes=0), r"elem_bytes must be"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end
# ~/~ end

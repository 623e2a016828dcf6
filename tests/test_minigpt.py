# ~/~ begin <<docs/foundations.md#tests/test_minigpt.py>>[init]
"""Checks of MiniGPT and its KV cache (tangled from docs/foundations.md)."""

import pytest
import torch

from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig


# ~/~ begin <<docs/foundations.md#minigpt-check>>[init]
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_prefill_then_decode_matches_full_forward(n_kv_heads):
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=n_kv_heads)
    model = MiniGPT(config).double().eval()
    tokens = torch.randint(0, 50, (2, 20))
    full = model(tokens)

    cache = KVCache(config, batch=2, dtype=torch.float64)
    steps = [model(tokens[:, :12], cache)]  # prefill 12 tokens
    steps += [model(tokens[:, i : i + 1], cache) for i in range(12, 20)]  # decode 8 tokens
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.length == 20


def test_cache_bytes_follow_the_formula():
    config = MiniGPTConfig(vocab_size=10, max_seq_len=64, n_layers=3, n_kv_heads=2)
    cache = KVCache(config, batch=1, dtype=torch.float16)
    # 2 (K and V) * L * Hkv * d * N * 2 bytes
    assert cache.nbytes(64) == 2 * 3 * 2 * config.head_dim * 64 * 2


def test_cache_overflow_and_bad_config_raise():
    config = MiniGPTConfig(vocab_size=10, max_seq_len=8)
    model, cache = MiniGPT(config), KVCache(config, batch=1)
    model(torch.zeros(1, 8, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"exceeds max_seq_len=8"):
        model(torch.zeros(1, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"n_heads=4 must be a multiple of n_kv_heads=3"):
        MiniGPTConfig(vocab_size=10, n_kv_heads=3)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\)"):
        MiniGPT(config)(torch.tensor([[10]]))
    with pytest.raises(ValueError, match=r"advance needs 0 <= n <= 0 \(free slots\), got 1"):
        cache.advance(1)
    with pytest.raises(ValueError, match=r"tokens must be a non-negative int, got -5"):
        cache.nbytes(-5)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/04-mqa-gqa.md#tests/test_attention_mqa_gqa_solution.py>>[init]
"""The solution's own error messages, word for word (tangled from docs/lab/04-mqa-gqa.md; not
run by `make check-mine`: a learner's wording may differ)."""

import pytest
import torch
from test_attention_mqa_gqa import config_8, qkv

from minimodel.attention_mqa_gqa import (
    blank_kv_cache,
    cache_bytes,
    grouped_attention,
    mean_pool_kv,
    with_kv_heads,
)
from minimodel.minigpt import MiniGPT


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-check-solution-messages>>[init]
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: with_kv_heads(config_8(), 3),
         r"n_kv_heads=3 does not divide n_heads=8.*\[8, 4, 2, 1\]"),
        (lambda: with_kv_heads(config_8(), 16), r"n_kv_heads=16 does not divide n_heads=8"),
        (lambda: with_kv_heads(config_8(), 0), r"n_kv_heads must be an int >= 1, got 0"),
        (lambda: with_kv_heads(config_8(), 2.0), r"n_kv_heads must be an int >= 1, got 2.0"),
        (lambda: with_kv_heads(config_8(), True), r"n_kv_heads must be an int >= 1, got True"),
        (lambda: grouped_attention(*qkv(1, 8, 3, 4, 4, 8)),
         r"Hq=8 must be a multiple of kv heads Hkv=3"),
        (lambda: grouped_attention(*qkv(1, 8, 2, 4, 4, 8), window=2), r"window=2 needs causal"),
        (lambda: mean_pool_kv(MiniGPT(config_8()), 3), r"n_kv_heads=3 does not divide n_heads=8"),
        (lambda: mean_pool_kv(MiniGPT(with_kv_heads(config_8(), 2)), 4),
         r"cannot mean-pool 2 kv heads into 4"),
        (lambda: mean_pool_kv(MiniGPT(with_kv_heads(config_8(), 4)), 8),
         r"cannot mean-pool 4 kv heads into 8"),
        (lambda: mean_pool_kv("kv8", 2), r"model must be a MiniGPT, got str"),
        (lambda: blank_kv_cache(config_8(), 1, dtype=torch.int32),
         r"dtype must be a floating-point torch.dtype"),
        (lambda: blank_kv_cache(config_8(), 0), r"batch must be an int >= 1, got 0"),
        (lambda: cache_bytes(torch.zeros(3)), r"cache must be a KVCache, got Tensor"),
    ],
)
def test_the_solutions_messages(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end
# ~/~ end

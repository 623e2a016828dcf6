# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_paged_kv_cache_solution.py>>[init]
"""The paged cache with the solution's copy-on-write switched off, and its messages word for word
(tangled from docs/lab/03-paged-attn-reading.md; not run by `make check-mine`)."""

import pytest
import test_paged_kv_cache as lab  # the lab's server (a module: its tests are not re-collected)
import torch

from minimodel.attention import KernelPagedKVCache
from minimodel.block_manager import BlockManager
from minimodel.minigpt import MiniGPTConfig


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-cow-off>>[init]
def test_without_copy_on_write_the_forked_parent_goes_wrong(monkeypatch):
    monkeypatch.setattr(BlockManager, "_copy_on_write", lambda self, seq: None)
    model = lab.make_model(lab.CONFIG)
    server, _, _ = lab.serve_verbs(model)
    bad = lab.mismatches(model, server.done)
    assert lab.A in bad  # the parent read the key its child wrote into their shared block
    assert set(bad) <= {lab.A, lab.A2}  # nothing else shared a written block
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-solution-messages>>[init]
def test_the_caches_messages_word_for_word():
    model = lab.make_model(lab.CONFIG)
    cache = lab.PagedKVCache(lab.CONFIG, 8, 4, dtype=torch.float64)
    cache.allocate(0, [1, 2, 3])
    tokens = torch.tensor([[1, 2, 3]])
    for call, match in [
        (lambda: model(tokens, torch.arange(3)[None], cache), r"no sequences selected"),
        (lambda: model(tokens, torch.arange(1, 4)[None], cache.select([0])),
         r"sequence 0 has computed 0 tokens: its next position is 0, got 1"),
        (lambda: model(torch.tensor([[1, 2, 3, 4]]), torch.arange(4)[None], cache.select([0])),
         r"sequence 0 has slots for 3 tokens, got position 3: call append_slot first"),
        (lambda: cache.select([0, 0]),
         r"select needs distinct live sequence ids, got \(0, 0\) \(not live: \[\]\)"),
        (lambda: cache.select([5]), r"not live: \[5\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-kernel-chunk>>[init]
@pytest.mark.skipif(torch.cuda.is_available(), reason="the lab's helpers build CPU tensors: the "
                    "kernels run it under the interpreter; the chunk rule itself is the block "
                    "manager's, the same on any device")
def test_a_chunk_after_append_slots_through_the_kernels():
    config = MiniGPTConfig(vocab_size=lab.TOK.vocab_size, max_seq_len=128, d_model=32,
                           n_heads=2, n_kv_heads=1, n_layers=1, window=4)
    torch.manual_seed(0)
    model = lab.MiniGPT(config).eval()
    tokens = lab.TOK.encode(lab.LINES[7])[:24]
    reference = lab.logits_alone(model.double(), tokens)
    model.float()
    cache = KernelPagedKVCache(config, 6, 8, watermark=0.0)
    assert lab.prefill(model, cache, 0, tokens[:16])[0] == 0
    for t in tokens[16:]:
        cache.append_slot(0, t)
    logits = lab.run(model, cache, 0, tokens, 16)  # the chunk: paged_prefill
    torch.testing.assert_close(logits.double(), reference[16:], atol=1e-4, rtol=1e-4)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/foundations.md#tests/test_minigpt.py>>[init]
"""Checks of MiniGPT and its KV cache (tangled from docs/foundations.md)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig


# ~/~ begin <<docs/foundations.md#minigpt-check>>[init]
def at(start: int, n: int, rows: int = 1) -> torch.Tensor:
    """Positions start ... start + n - 1 in each of `rows` rows."""
    return torch.arange(start, start + n).expand(rows, n)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_prefill_then_decode_matches_full_forward(n_kv_heads):
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=n_kv_heads)
    model = MiniGPT(config).double().eval()
    tokens = torch.randint(0, 50, (2, 20))
    full = model(tokens)

    cache = KVCache(config, batch=2, dtype=torch.float64)
    steps = [model(tokens[:, :12], at(0, 12, 2), cache)]  # prefill 12 tokens
    steps += [model(tokens[:, i : i + 1], at(i, 1, 2), cache) for i in range(12, 20)]  # decode 8
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.lengths == [20, 20]


def test_rows_of_different_lengths_decode_together():
    # Row 1 arrives two steps later with a shorter prompt; then both decode in one batch.
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2)
    model = MiniGPT(config).double().eval()
    a, b = torch.randint(0, 50, (1, 16)), torch.randint(0, 50, (1, 9))
    cache = KVCache(config, batch=2, dtype=torch.float64)
    out_a = [model(a[:, :9], at(0, 9), cache.select([0]))]
    out_a += [model(a[:, i : i + 1], at(i, 1), cache.select([0])) for i in (9, 10)]
    out_b = [model(b[:, :4], at(0, 4), cache.select([1]))]
    for step in range(5):  # a at 11 ... 15, b at 4 ... 8
        tokens = torch.stack([a[:, 11 + step], b[:, 4 + step]])
        logits = model(tokens, torch.tensor([[11 + step], [4 + step]]), cache)
        out_a.append(logits[:1])
        out_b.append(logits[1:])
    torch.testing.assert_close(torch.cat(out_a, dim=1), model(a))
    torch.testing.assert_close(torch.cat(out_b, dim=1), model(b))
    assert cache.lengths == [16, 9]


@pytest.mark.parametrize("window", [1, 3, 8])
def test_window_through_the_cache_matches_one_pass(window):
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2, window=window)
    model = MiniGPT(config).double().eval()
    tokens = torch.randint(0, 50, (1, 20))
    cache = KVCache(config, batch=1, dtype=torch.float64)
    steps = [model(tokens[:, :10], at(0, 10), cache)]
    steps += [model(tokens[:, i : i + 1], at(i, 1), cache) for i in range(10, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(tokens))  # attention_ref's window
    narrow = MiniGPT(MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2))
    narrow.load_state_dict(model.state_dict())  # same weights, no window
    assert not torch.allclose(model(tokens), narrow.double()(tokens))  # the window matters


def test_cache_bytes_follow_the_formula():
    config = MiniGPTConfig(vocab_size=10, max_seq_len=64, n_layers=3, n_kv_heads=2)
    cache = KVCache(config, batch=2, dtype=torch.float16)
    # 2 (K and V) * L * Hkv * d * N * 2 bytes, for each of the B = 2 rows
    assert cache.nbytes(64) == 2 * 3 * 2 * config.head_dim * 64 * 2 * 2
    stored = KVCache(config, batch=2)  # float32: 4 bytes
    MiniGPT(config)(torch.zeros(1, 5, dtype=torch.long), at(0, 5), stored.select([1]))
    assert stored.lengths == [0, 5] and stored.nbytes() == 2 * 3 * 2 * config.head_dim * 5 * 4


def test_forward_matches_an_independent_computation():
    """The model written out again from its parameters with torch.nn.functional and torch's own
    SDPA (K and V repeated per group): pre-norm blocks, the GELU MLP, the final LayerNorm and the
    tied head. Comparing the model with itself through another path would miss a change made to
    both paths; this would not."""
    torch.manual_seed(0)
    c = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2)
    model = MiniGPT(c).double().eval()
    with torch.no_grad():
        for norm in [model.norm, *(n for b in model.blocks for n in (b.norm1, b.norm2))]:
            norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)  # not the identity
    tokens = torch.randint(0, 50, (2, 20))
    f, g, shape = torch.nn.functional, c.n_heads // c.n_kv_heads, (c.d_model,)
    x = model.tok.weight[tokens] + model.pos.weight[:20]
    for b in model.blocks:
        h = f.layer_norm(x, shape, b.norm1.weight, b.norm1.bias)
        q = (h @ b.attn.wq.weight.T).view(2, 20, c.n_heads, c.head_dim).transpose(1, 2)
        kv = (h @ b.attn.wkv.weight.T).view(2, 20, 2, c.n_kv_heads, c.head_dim)
        k, v = (kv[:, :, i].transpose(1, 2).repeat_interleave(g, dim=1) for i in (0, 1))
        o = f.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + o.transpose(1, 2).reshape(2, 20, -1) @ b.attn.wo.weight.T
        h = f.layer_norm(x, shape, b.norm2.weight, b.norm2.bias)
        x = x + b.mlp[2](f.gelu(b.mlp[0](h)))
    logits = f.layer_norm(x, shape, model.norm.weight, model.norm.bias) @ model.tok.weight.T
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), logits)


def test_bad_positions_caches_and_configs_raise():
    config = MiniGPTConfig(vocab_size=10, max_seq_len=8)
    model, cache = MiniGPT(config), KVCache(config, batch=1)
    zeros = torch.zeros(1, 2, dtype=torch.long)
    for call, match in [
        (lambda: model(zeros, at(1, 2), cache), r"cache row 0 holds 0 tokens: its next position "
                                                r"is 0, got 1"),
        (lambda: model(zeros, torch.tensor([[0, 2]]), cache), r"count up by one"),
        (lambda: model(zeros, at(1, 2)), r"without a cache there are no earlier keys"),
        (lambda: model(zeros, None, cache), r"with a cache, give the positions"),
        (lambda: model(zeros, at(0, 2).int(), cache), r"positions must be int64"),
        (lambda: model(zeros.expand(2, 2), at(0, 2, 2), cache), r"2 rows of tokens for 1"),
        (lambda: model(zeros, at(7, 2)), r"position 8 is past max_seq_len=8"),
        (lambda: cache.select([1]), r"rows \(1,\) must be an int in \[0, 0\], got 1"),
        (lambda: model(zeros, at(0, 2), KVCache(MiniGPTConfig(vocab_size=10), batch=1)),
         r"the cache was built for"),
        (lambda: model(torch.tensor([[10]])), r"token ids must lie in \[0, 10\)"),
        (lambda: model(zeros.int()), r"tokens must be \(B, n\) int64, got shape \(1, 2\) "
                                     r"torch.int32"),
        (lambda: model(zeros[:, :0]), r"tokens.*\(1, 0\)"),
        (lambda: model(torch.zeros(0, 3, dtype=torch.long)), r"tokens.*\(0, 3\)"),
        (lambda: model(zeros[:, :0], zeros[:, :0], cache), r"tokens.*\(1, 0\)"),
        (lambda: MiniGPTConfig(vocab_size=10, n_kv_heads=3),
         r"n_heads=4 must be a multiple of n_kv_heads=3"),
        (lambda: MiniGPTConfig(vocab_size=10, window=0),
         r"MiniGPTConfig.window must be an int >= 1, got 0"),
        (lambda: cache.nbytes(-5), r"tokens must be an int >= 0, got -5"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    for call, name in [(lambda: model([[1, 2]]), "tokens"),
                       (lambda: model(zeros, [[0, 1]], cache), "positions")]:
        with pytest.raises(TypeError, match=name):
            call()
    assert cache.lengths == [0]  # no failed pass changed the cache
    model(torch.zeros(1, 8, dtype=torch.long), at(0, 8), cache)
    with pytest.raises(ValueError, match=r"position 8 is past max_seq_len=8"):
        model(torch.zeros(1, 1, dtype=torch.long), at(8, 1), cache)
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-check-traced>>[init]
class HostReads(TorchDispatchMode):
    """Counts the tensor values read on the host while active: `.item()` and `bool()` (the
    dispatcher's _local_scalar_dense and is_nonzero) and `.tolist()` (which bypasses the
    dispatcher on the CPU, so it is wrapped). On a GPU each is a device-to-host sync."""

    READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default)

    def __init__(self, monkeypatch):
        super().__init__()
        self.reads, self.active = [], False
        tolist = torch.Tensor.tolist

        def counted(t):
            if self.active:
                self.reads.append("tolist")
            return tolist(t)

        monkeypatch.setattr(torch.Tensor, "tolist", counted)

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            self.reads.append(func)
        return func(*args, **(kwargs or {}))


def test_check_false_reads_no_value(monkeypatch):
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2)
    model = MiniGPT(config).eval()
    tokens = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        with HostReads(monkeypatch) as checked:
            want = model(tokens)
        with HostReads(monkeypatch) as unchecked:
            got = model(tokens, check=False)
        assert checked.reads and not unchecked.reads
        torch.testing.assert_close(got, want)
        with pytest.raises(IndexError):  # not the model's check: the embedding's own, on the CPU
            model(torch.tensor([[50]]), check=False)
        cache = KVCache(config, batch=2)  # a cache still commits: its lengths are host state
        model(tokens, at(0, 7, 2), cache, check=False)
    assert cache.lengths == [7, 7]
    with pytest.raises(TypeError, match="check"):
        model(tokens, check=1)


@pytest.mark.parametrize("window", [None, 3])
def test_forward_compiles_in_one_graph(window):
    # fullgraph=True: a graph break raises. aot_eager: Dynamo's and AOTAutograd's traces, then
    # the graph run op by op.
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=50, max_seq_len=32, n_kv_heads=2,
                                  window=window)).eval()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model.forward, backend=counter, fullgraph=True)
    with torch.no_grad():
        for seed in (1, 2):  # new values, same shapes: the same graph
            tokens = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(compiled(tokens), model(tokens))
    assert counter.frame_count == 1


def test_a_compiled_pass_refuses_what_it_cannot_do():
    # Dynamo raises its own error, carrying ours, while it traces.
    config = MiniGPTConfig(vocab_size=10, max_seq_len=8)
    model = MiniGPT(config)
    compiled = torch.compile(model.forward, backend="aot_eager", fullgraph=True)
    zeros = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises((ValueError, RuntimeError), match=r"check=True"):
        compiled(zeros, check=True)
    with pytest.raises((ValueError, RuntimeError), match=r"KVCache is not graph-safe"):
        compiled(zeros, at(0, 2), KVCache(config, batch=1))
# ~/~ end
# ~/~ end

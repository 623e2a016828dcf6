# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_paged_kv_cache.py>>[init]
"""Checks of the paged KV cache serving MiniGPT (tangled from docs/lab/03-paged-attn-reading.md)."""

import pytest
import torch
from test_block_manager import named  # the block manager's tests: a message names a value

from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig
from minimodel.paged_kv_cache import PagedKVCache
from minimodel.verbs import corpus, tokenizer

pytestmark = pytest.mark.lab("03")  # the task's tests: `make check-mine LAB=03` runs them

# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-serving>>[init]
TOK = tokenizer()
LINES = corpus().splitlines()
CONFIG = MiniGPTConfig(vocab_size=TOK.vocab_size, max_seq_len=128, d_model=32, n_heads=4,
                       n_kv_heads=2, n_layers=2)


def make_model(config: MiniGPTConfig) -> MiniGPT:
    torch.manual_seed(0)
    return MiniGPT(config).double().eval()


def decode_alone(model, prompt, n_new, first=None):
    """Greedy decoding of one sequence through the contiguous cache: its generated tokens and
    the logits row of every position it computed. `first` forces the first generated token."""
    cache = KVCache(model.config, batch=1, dtype=torch.float64)
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), torch.arange(len(prompt))[None], cache)[0]
        rows = dict(enumerate(logits))
        token = int(logits[-1].argmax()) if first is None else first
        generated = [token]
        while len(generated) < n_new:
            pos = len(prompt) + len(generated) - 1
            rows[pos] = model(torch.tensor([[token]]), torch.tensor([[pos]]), cache)[0, 0]
            token = int(rows[pos].argmax())
            generated.append(token)
    return generated, rows


class Server:
    """Greedy decoding of many sequences through one PagedKVCache: each arrival is prefilled
    alone (its uncached tokens only), then every live sequence decodes one token per step, all
    in one batch."""

    def __init__(self, model, cache):
        self.model, self.cache = model, cache
        self.live, self.done = {}, {}
        self.fed = 0  # tokens that entered the model

        def count(module, args):
            self.fed += args[0].numel()

        model.register_forward_pre_hook(count)

    def _new(self, seq_id, prompt, n_new, first, logits):
        self.live[seq_id] = {"prompt": list(prompt), "tokens": list(prompt), "n_new": n_new,
                             "first": first, "next": first, "generated": [], "logits": logits,
                             "cached": 0, "forked_at": None}  # for mismatches' diagnosis

    def arrive(self, seq_id, prompt, n_new):
        cached = self.cache.allocate(seq_id, prompt)
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt[cached:]]),
                                torch.arange(cached, len(prompt))[None],
                                self.cache.select([seq_id]))[0]
        self._new(seq_id, prompt, n_new, None,
                  dict(zip(range(cached, len(prompt)), logits, strict=True)))
        self.live[seq_id]["cached"] = cached
        self.live[seq_id]["next"] = int(logits[-1].argmax())
        return cached

    def fork(self, parent_id, child_id, n_new):
        """The child starts from the parent's tokens with the runner-up of its next token."""
        parent = self.live[parent_id]
        first = int(parent["logits"][len(parent["tokens"]) - 1].argsort()[-2])
        self.cache.fork(parent_id, child_id)
        self._new(child_id, parent["tokens"], n_new, first, {})
        parent["forked_at"] = self.live[child_id]["forked_at"] = len(parent["tokens"])

    def step(self):
        fed = []
        for seq_id, s in list(self.live.items()):
            s["generated"].append(s["next"])
            if len(s["generated"]) == s["n_new"]:
                self.cache.free(seq_id)
                self.done[seq_id] = self.live.pop(seq_id)
                continue
            self.cache.append_slot(seq_id, s["next"])
            s["tokens"].append(s["next"])
            fed.append(seq_id)
        if not fed:
            return
        tokens = torch.tensor([[self.live[i]["tokens"][-1]] for i in fed])
        positions = torch.tensor([[len(self.live[i]["tokens"]) - 1] for i in fed])
        with torch.no_grad():
            logits = self.model(tokens, positions, self.cache.select(fed))[:, 0]
        for seq_id, row in zip(fed, logits, strict=True):
            s = self.live[seq_id]
            s["logits"][len(s["tokens"]) - 1] = row
            s["next"] = int(row.argmax())


def mismatches(model, seqs, block_size=4):
    """The sequences whose tokens or logits differ from decoding them alone, contiguously: for
    each, where (the position, its token, its logical block) and which rule of the cache the
    first difference points to."""
    bad = {}
    for seq_id, s in seqs.items():
        generated, rows = decode_alone(model, s["prompt"], s["n_new"], s["first"])
        tokens = s["prompt"] + s["generated"]
        for pos, row in sorted(s["logits"].items()):
            if not torch.allclose(row, rows[pos], atol=1e-6, rtol=1e-6):
                error = float((row - rows[pos]).abs().max())
                bad[seq_id] = (f"logits at position {pos} (token {TOK.decode([tokens[pos]])!r}, "
                               f"logical block {pos // block_size}) differ by {error:.2g} from "
                               f"decoding alone: {suspect(s, pos, block_size)}")
                break
        else:
            if generated != s["generated"]:
                first = next(i for i, pair in enumerate(zip(generated, s["generated"],
                                                            strict=True)) if pair[0] != pair[1])
                bad[seq_id] = (f"generated token {first} is {s['generated'][first]}, decoding "
                               f"alone gives {generated[first]}")
    return bad


def suspect(s, pos, block_size):
    """The rule of the cache that a first wrong position points to, from the sequence's story."""
    at = s["forked_at"]
    if at is not None and pos >= at and at % block_size:
        return (f"copy-on-write: the fork at {at} tokens shared the partly filled block "
                f"{at // block_size}; the first write into a shared block must go to a copy")
    if s["cached"] and pos >= s["cached"]:
        return (f"prefix caching: the {s['cached']} cached tokens' blocks must hold exactly their "
                "keys and values, and the uncached tokens go into blocks of the sequence's own")
    return ("each position's key and value must be read back from the slot it was written to "
            "(the block table, and a released block's slots never read)")


SHARED = LINES[12] + "\n"  # a one-line prefix two requests share
A, B, C, D, E, A2 = range(6)


def serve_verbs(model, block_size=4, num_blocks=80):
    """The scenario: arrivals, a fork fed another token, sequences finishing, two requests
    sharing a cached prefix, one reusing the freed blocks of a finished request."""
    cache = PagedKVCache(model.config, num_blocks, block_size, dtype=torch.float64,
                         enable_prefix_caching=True)
    server, enc = Server(model, cache), TOK.encode
    server.arrive(A, enc(LINES[0][:13]), 12)
    server.arrive(B, enc(LINES[3][:22]), 4)
    server.step()
    server.arrive(C, enc(SHARED + "comer pr"), 6)
    server.step()
    assert len(server.live[A]["tokens"]) % block_size != 0  # the fork shares a partial block
    server.fork(A, A2, 6)
    server.step()  # A and A2 write different tokens into what was one block
    fed = server.fed
    hits = {D: server.arrive(D, enc(SHARED + "vivir pre"), 5)}  # C is live: a hit
    fed_d = server.fed - fed
    while B in server.live:
        server.step()
    hits[E] = server.arrive(E, enc(LINES[3][:22]), 3)  # B's prompt; B's blocks are free
    while server.live:
        server.step()
    return server, hits, fed_d
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-minigpt>>[init]
def test_paged_serving_matches_decoding_each_alone():
    model = make_model(CONFIG)
    server, hits, fed_d = serve_verbs(model)
    assert set(server.done) == {A, B, C, D, E, A2}
    assert mismatches(model, server.done) == {}
    shared = len(TOK.encode(SHARED + "comer pr")) - 8  # a common prefix of 92 tokens
    assert hits[D] == shared // 4 * 4 == 92
    assert fed_d == len(server.done[D]["prompt"]) - 92 == 9  # only the uncached tokens
    assert hits[E] == (22 - 1) // 4 * 4  # a finished request's blocks, still cached


def test_window_releases_blocks_and_matches_decoding_each_alone():
    config = MiniGPTConfig(vocab_size=TOK.vocab_size, max_seq_len=128, d_model=32, n_heads=4,
                           n_kv_heads=1, n_layers=2, window=6)
    model = make_model(config)
    cache = PagedKVCache(config, 14, 4, dtype=torch.float64)  # 56 slots for 3 x 40 tokens
    server, enc = Server(model, cache), TOK.encode
    for seq_id, line in enumerate(LINES[20:23]):
        server.arrive(seq_id, enc(line[:9 + seq_id]), 30)
        server.step()
    released = 0
    while server.live:
        released = max(released, *(cache.manager.block_table(s).count(-1) for s in server.live))
        server.step()
    assert released >= 5  # the window gave blocks back, or 14 blocks would not have sufficed
    assert mismatches(model, server.done) == {}


def test_the_cache_refuses_what_it_cannot_serve():
    model = make_model(CONFIG)
    cache = PagedKVCache(CONFIG, 8, 4, dtype=torch.float64)
    cache.allocate(0, [1, 2, 3])
    tokens = torch.tensor([[1, 2, 3]])
    for call, names in [  # a ValueError naming the position or the id at fault
        (lambda: model(tokens, torch.arange(3)[None], cache), []),  # nothing selected
        (lambda: model(tokens, torch.arange(1, 4)[None], cache.select([0])), [1]),  # not 0
        (lambda: model(torch.tensor([[1, 2, 3, 4]]), torch.arange(4)[None], cache.select([0])),
         [3]),  # no slot yet
        (lambda: cache.select([0, 0]), [0]),  # repeated
        (lambda: cache.select([5]), [5]),  # unknown
    ]:
        with pytest.raises(ValueError) as info:
            call()
        assert all(named(n, str(info.value)) for n in names), (str(info.value), names)
    model(tokens, torch.arange(3)[None], cache.select([0]))
    cache.append_slot(0, 4)
    model(torch.tensor([[4]]), torch.tensor([[3]]), cache.select([0]))  # now it has a slot
    assert cache.preempt(0) == [1, 2, 3, 4]
    with pytest.raises(TypeError) as info:
        cache.allocate(1, iter([1, 2, 3]))  # the manager would use an iterator up
    assert "prompt_tokens" in str(info.value)
    cache.allocate(1, [1, 2, 3])  # and nothing was allocated
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-computed>>[init]
def logits_alone(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens]))[0]


def run(model, cache, seq_id, prompt, start):
    """The logits of prompt[start:], fed to a live sequence in one forward pass."""
    with torch.no_grad():
        return model(torch.tensor([prompt[start:]]), torch.arange(start, len(prompt))[None],
                     cache.select([seq_id]))[0]


def prefill(model, cache, seq_id, prompt):
    """Allocate and run the prompt's uncached tokens: (cached tokens, their logits)."""
    cached = cache.allocate(seq_id, prompt)
    return cached, run(model, cache, seq_id, prompt, cached)


def test_a_prefix_hit_is_served_only_once_its_owner_has_run():
    model = make_model(CONFIG)
    prompt = TOK.encode(LINES[5])[:19]  # two full blocks of 8, and 3 tokens
    reference = logits_alone(model, prompt)
    cache = PagedKVCache(CONFIG, 16, 8, dtype=torch.float64, enable_prefix_caching=True)
    cache.allocate(1, prompt)
    cache.free(1)  # the owner, freed unrun
    assert cache.allocate(2, prompt) == 0  # a second owner, not run yet
    cached, logits = prefill(model, cache, 3, prompt)  # a hit before the owner's prefill
    assert cached == 0
    torch.testing.assert_close(logits, reference, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(run(model, cache, 2, prompt, 0), reference, atol=1e-6, rtol=1e-6)
    cached, logits = prefill(model, cache, 4, prompt)  # the owner has run: a hit
    assert cached == 16
    torch.testing.assert_close(logits, reference[16:], atol=1e-6, rtol=1e-6)


def test_a_chunk_after_append_slots_under_a_window():
    config = MiniGPTConfig(vocab_size=TOK.vocab_size, max_seq_len=128, d_model=32, n_heads=4,
                           n_kv_heads=2, n_layers=2, window=4)
    model = make_model(config)
    tokens = TOK.encode(LINES[7])[:24]
    reference = logits_alone(model, tokens)
    cache = PagedKVCache(config, 6, 8, dtype=torch.float64, watermark=0.0)
    assert prefill(model, cache, 0, tokens[:16])[0] == 0
    for t in tokens[16:]:
        cache.append_slot(0, t)
    logits = run(model, cache, 0, tokens, 16)  # the chunk, in one forward pass
    torch.testing.assert_close(logits, reference[16:], atol=1e-6, rtol=1e-6)
    cache.append_slot(0, 1)  # computed to 24: the query at 24 sees 21 ...: blocks 0, 1 go
    assert cache.manager.block_table(0)[:2] == [-1, -1]
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_paged_kv_cache_solution.py>>[init]
"""The paged cache with the solution's copy-on-write switched off (tangled from
docs/lab/03-paged-attn-reading.md; not run by `make check-mine`)."""

import torch

from minimodel.block_manager import BlockManager
from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig
from minimodel.paged_kv_cache import PagedKVCache
from minimodel.verbs import corpus, tokenizer

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
                             "first": first, "next": first, "generated": [], "logits": logits}

    def arrive(self, seq_id, prompt, n_new):
        cached = self.cache.allocate(seq_id, prompt)
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt[cached:]]),
                                torch.arange(cached, len(prompt))[None],
                                self.cache.select([seq_id]))[0]
        self._new(seq_id, prompt, n_new, None,
                  dict(zip(range(cached, len(prompt)), logits, strict=True)))
        self.live[seq_id]["next"] = int(logits[-1].argmax())
        return cached

    def fork(self, parent_id, child_id, n_new):
        """The child starts from the parent's tokens with the runner-up of its next token."""
        parent = self.live[parent_id]
        first = int(parent["logits"][len(parent["tokens"]) - 1].argsort()[-2])
        self.cache.fork(parent_id, child_id)
        self._new(child_id, parent["tokens"], n_new, first, {})

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


def mismatches(model, seqs):
    """The sequences whose tokens or logits differ from decoding them alone, contiguously."""
    bad = {}
    for seq_id, s in seqs.items():
        generated, rows = decode_alone(model, s["prompt"], s["n_new"], s["first"])
        if generated != s["generated"]:
            bad[seq_id] = "tokens"
            continue
        for pos, row in s["logits"].items():
            if not torch.allclose(row, rows[pos], atol=1e-6, rtol=1e-6):
                bad[seq_id] = f"logits at position {pos}"
                break
    return bad


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


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-cow-off>>[init]
def test_without_copy_on_write_the_forked_parent_goes_wrong(monkeypatch):
    monkeypatch.setattr(BlockManager, "_copy_on_write", lambda self, seq: None)
    model = make_model(CONFIG)
    server, _, _ = serve_verbs(model)
    bad = mismatches(model, server.done)
    assert A in bad  # the parent read the key its child wrote into their shared block
    assert set(bad) <= {A, A2}  # nothing else shared a written block
# ~/~ end
# ~/~ end

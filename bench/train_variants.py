"""What the KV savings cost, on a CPU (Lab 04, "Quality"): Lab 04's MiniGPT trained as MHA (kv8)
on the verb corpus, converted to GQA (kv4, kv2) and MQA (kv1) by mean-pooling its kv heads,
uptrained for 5% and 20% of the original steps, and the same variants trained from scratch;
held-out loss on verbs the training never saw, for several seeds. The page gives the recipe.

    python -m bench.train_variants                  # ~6 min on one CPU core: data/gqa-quality.json
    python -m bench.train_variants --seeds 0 --steps 40 --out /tmp/q.json   # smoke run
"""

import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from bench.core import DATA, arguments, environment, save
from minimodel.attention_mqa_gqa import grouped_attention, mean_pool_kv, verb_model_config
from minimodel.minigpt import MiniGPT
from minimodel.verbs import REGULAR, corpus, tokenizer

VARIANTS = (8, 4, 2, 1)
HELD_OUT = REGULAR[1::4]  # cantar, trabajar, beber, comprender, abrir, partir
STEPS, BATCH, LR, LR_END = 300, 16, 1e-3, 1e-4
UPTRAIN = (0.05, 0.20)  # fractions of STEPS; 0.05 is the GQA paper's 5% of pre-training
SEEDS = (0, 1, 2, 3)


def split() -> tuple[list[str], list[str]]:
    """(training lines, held-out lines): the corpus split by verb, never by token."""
    lines = corpus().splitlines()
    train = [line for line in lines if line.split()[0] not in HELD_OUT]
    held = [line for line in lines if line.split()[0] in HELD_OUT]
    assert len(held) == 2 * len(HELD_OUT) and len(train) + len(held) == len(lines)
    return train, held


def encode(lines: list[str]) -> tuple[torch.Tensor, ...]:
    """Tokens (n, longest) padded with 0, and three masks: the real characters (trained on), the
    scored ones (after the infinitive and its space), and the scored ones that repeat a regular
    verb's stem (the infinitive less its -ar/-er/-ir; every held-out verb is regular)."""
    ids = [tokenizer().encode(line) for line in lines]
    tokens = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    real, scored, stem = (torch.zeros_like(tokens, dtype=torch.bool) for _ in range(3))
    for i, (line, row) in enumerate(zip(lines, ids, strict=True)):
        verb = line.split()[0]
        tokens[i, : len(row)] = torch.tensor(row)
        real[i, : len(row)] = True
        scored[i, len(verb) + 1 : len(row)] = True
        if verb not in REGULAR:  # an irregular verb's forms do not repeat one stem
            continue
        root, start = verb[:-2], line.index(":")
        while (at := line.find(root, start)) != -1:
            stem[i, at : at + len(root)] = True
            start = at + len(root)
    return tokens, real, scored, stem


def loss_of(model: MiniGPT, tokens: torch.Tensor, scored: torch.Tensor, attn) -> torch.Tensor:
    """Mean cross-entropy (nats per character) of the scored targets, predicted from the left."""
    logits = model(tokens[:, :-1], attn=attn)
    per_target = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none"
    )
    mask = scored[:, 1:].reshape(-1)
    return (per_target * mask).sum() / mask.sum()


def sdpa_attention(q, k, v, *, causal=False, window=None):
    """PyTorch's fused attention for training: whole sequences only (Nq = Nk, no window)."""
    if window is not None or q.shape[2] != k.shape[2]:
        raise ValueError("sdpa_attention serves whole sequences only (Nq == Nk, no window)")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def fresh_model(n_kv_heads: int, seed: int) -> MiniGPT:
    torch.manual_seed(seed)
    model = MiniGPT(verb_model_config(n_kv_heads))
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    return model


def learning_rate(step: int, steps: int) -> float:
    warmup = max(1, min(20, steps // 5))
    if step < warmup:
        return LR * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return LR_END + (LR - LR_END) * 0.5 * (1 + math.cos(math.pi * t))


def train(model: MiniGPT, steps: int, data: tuple, seed: int, label: str) -> MiniGPT:
    tokens, real = data[0], data[1]
    with torch.no_grad():  # the fast path computes what the lab's attention computes
        probe = tokens[:2, :40]
        fast, lab = model(probe, attn=sdpa_attention), model(probe, attn=grouped_attention)
        torch.testing.assert_close(fast, lab, atol=1e-4, rtol=1e-4)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    draw = torch.Generator().manual_seed(seed)
    t0 = time.monotonic()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps)
        rows = torch.randint(0, tokens.shape[0], (BATCH,), generator=draw)
        loss = loss_of(model, tokens[rows], real[rows], sdpa_attention)  # every real target
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    said = f"{label}: {steps} steps, loss {loss.item():.3f}, {time.monotonic() - t0:.0f} s"
    print(said, file=sys.stderr, flush=True)
    return model.eval()


def evaluate(model: MiniGPT, train_data: tuple, held_data: tuple) -> dict:
    tokens, _, scored, stem = held_data
    loss = lambda tokens, mask: loss_of(model, tokens, mask, grouped_attention).item()
    with torch.no_grad():
        return {
            "heldout_loss": loss(tokens, scored),
            "heldout_stem_loss": loss(tokens, stem),
            "heldout_rest_loss": loss(tokens, scored & ~stem),
            "train_loss": loss(train_data[0], train_data[2]),
        }


def sample(model: MiniGPT, line: str) -> str:
    """The model's most likely next character at every position of `line` (teacher forced)."""
    tok = tokenizer()
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(line)]), attn=grouped_attention)
    return tok.decode(logits[0].argmax(-1).tolist())


def main() -> None:
    parser = arguments(__doc__, DATA / "gqa-quality.json")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=STEPS, help="pre-training steps")
    args = parser.parse_args()
    torch.set_num_threads(1)  # on a shared 2-core machine one thread is the fastest, and steady
    train_lines, held_lines = split()
    train_data, held_data = encode(train_lines), encode(held_lines)
    steps, uptrain = args.steps, [round(f * args.steps) for f in UPTRAIN]
    runs, t0 = [], time.monotonic()

    def run(model, seed, n, kind, u=0):
        rec = {"seed": seed, "variant": f"kv{n}", "kv_heads": n, "kind": kind}
        rec |= {"steps": args.steps + u, "uptrain_steps": u}
        runs.append(rec | evaluate(model, train_data, held_data))

    for seed in args.seeds:
        mha = train(fresh_model(8, seed), steps, train_data, seed, f"seed {seed} kv8 pretrain")
        run(mha, seed, 8, "scratch")
        if seed == args.seeds[0]:
            lines = (held_lines[0], train_lines[0])
            samples = [{"line": line, "predicted": sample(mha, line)} for line in lines]
        for n in VARIANTS:  # kv8 -> kv8 is the identity: the MHA trained on, as a control
            run(mean_pool_kv(mha, n), seed, n, "converted")
            for u in uptrain:
                label = f"seed {seed} kv{n} uptrain {u}"
                uptrained = train(mean_pool_kv(mha, n), u, train_data, 1000 + seed, label)
                run(uptrained, seed, n, "uptrained", u)
        for n in VARIANTS[1:]:
            label = f"seed {seed} kv{n} scratch"
            run(train(fresh_model(n, seed), steps, train_data, seed, label), seed, n, "scratch")
    config = verb_model_config()
    fields = ("n_layers", "n_heads", "head_dim", "d_model", "vocab_size")
    model = {f: getattr(config, f) for f in fields}
    record = {
        "environment": environment(),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "recipe": {
            "model": {**model, "dtype": "float32"},
            **{"held_out_verbs": list(HELD_OUT), "train_lines": len(train_lines)},
            **{"held_out_lines": len(held_lines), "steps": args.steps, "uptrain_steps": uptrain},
            **{"batch_lines": BATCH, "lr": LR, "lr_end": LR_END},
            "optimizer": "AdamW(betas=(0.9, 0.95), wd=0.1)",
            "init": "N(0, 0.02) for every Linear and Embedding weight, zero biases",
            "loss": "mean cross-entropy per character (nats) after the infinitive and its space; "
            "heldout_stem_loss: over the characters that repeat the verb's stem in its "
            "forms; heldout_rest_loss: over the others",
            "seeds": args.seeds,
        },
        "runs": runs,
        "samples": {
            "model": f"kv8 after {args.steps} steps, seed {args.seeds[0]}",
            "what": "the most likely next character at each position, the line's own "
            "characters fed in (teacher forcing)",
            "lines": samples,
        },
    }
    print(f"{len(runs)} runs in {record['wall_seconds']:.0f}s")
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

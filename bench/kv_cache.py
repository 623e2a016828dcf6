"""Lab 04's KV cache of kv8 (MHA) to kv1 (MQA) over the canonical verb sequence, measured from the
tensors beside Theory 04's formula (Lab 04, "The KV cache on the verb sequence"). On a CPU:

    python -m bench.kv_cache            # writes data/kv-cache-verbs.json
"""

import torch

from bench.core import DATA, arguments, environment, save
from minimodel import attention_mqa_gqa as lab
from minimodel.minigpt import MiniGPT
from minimodel.roofline import kv_cache_bytes
from minimodel.verbs import tokenizer, verb_sequence

VARIANTS = (8, 4, 2, 1)  # kv heads: kv8 is MHA, kv4 and kv2 GQA, kv1 MQA
PREFILL = 16  # tokens of the sequence in the prefill; the other 48 are decoded one at a time
DTYPE = torch.float32  # the dtype the lab's models are trained and run in


def measure(n_kv_heads: int) -> dict:
    """Prefill, decode and measure one variant (seed-0 weights: the bytes do not depend on them)."""
    config, attn = lab.verb_model_config(n_kv_heads), lab.grouped_attention
    torch.manual_seed(0)
    model = MiniGPT(config).to(DTYPE).eval()
    tokens = torch.tensor([verb_sequence()])
    n = tokens.shape[1]
    cache = lab.blank_kv_cache(config, batch=1, dtype=DTYPE)
    empty = lab.cache_bytes(cache)
    with torch.no_grad():
        steps = [model(tokens[:, :PREFILL], torch.arange(PREFILL)[None], cache, attn=attn)]
        after_prefill = lab.cache_bytes(cache)
        for i in range(PREFILL, n):
            steps.append(model(tokens[:, i : i + 1], torch.tensor([[i]]), cache, attn=attn))
        full = model(tokens, attn=attn)
    measured = lab.cache_bytes(cache)
    shape = (config.n_layers, n_kv_heads, config.head_dim)
    formula = lambda n_tokens: kv_cache_bytes(*shape, n_tokens, elem_bytes=DTYPE.itemsize)
    name = f"kv{n_kv_heads}"
    record = {"name": name, "n_kv_heads": n_kv_heads, "group": config.n_heads // n_kv_heads}
    record |= {"allocated_empty": empty.allocated, "filled_empty": empty.filled}
    record |= {"filled_after_prefill": after_prefill.filled}
    record |= {"allocated": measured.allocated, "filled": measured.filled}
    record |= {"formula_allocated": formula(config.max_seq_len), "formula_filled": formula(n)}
    record |= {"formula_after_prefill": formula(PREFILL), "formula_per_token": formula(1)}
    record["minigpt_nbytes"] = cache.nbytes()
    record["decode_vs_full_max_abs"] = (torch.cat(steps, dim=1) - full).abs().max().item()
    for key in ("allocated", "filled", "filled_after_prefill"):
        want = "formula_" + key.removeprefix("filled_")
        if record[key] != record[want]:
            raise SystemExit(f"{name}: measured {key} {record[key]} != {want} {record[want]}")
    print(f"{name}: {record}")
    return record


def main() -> None:
    args = arguments(__doc__, DATA / "kv-cache-verbs.json").parse_args()
    config, tokens = lab.verb_model_config(), verb_sequence()
    fields = ("n_layers", "n_heads", "head_dim", "d_model", "max_seq_len", "vocab_size")
    record = {
        "environment": environment(),
        "what": "KV cache of the lab's MiniGPT over the canonical verb sequence, measured from "
        "the tensors (minimodel.attention_mqa_gqa.cache_bytes) beside "
        "minimodel.roofline.kv_cache_bytes",
        "sequence": tokenizer().decode(tokens),
        "tokens": len(tokens),
        "prefill": PREFILL,
        "dtype": str(DTYPE).removeprefix("torch."),
        "elem_bytes": DTYPE.itemsize,
        "config": {f: getattr(config, f) for f in fields},
        "variants": [measure(n) for n in VARIANTS],
    }
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

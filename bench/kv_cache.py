"""Lab 04's KV-cache measurement: the lab's MiniGPT as kv8 (MHA), kv4 and kv2 (GQA) and kv1 (MQA)
runs the canonical 64-token verb sequence (a prefill of 16 tokens, then 48 decode steps through
the KV cache, with `grouped_attention`), and the cache's bytes are measured from its tensors
(`cache_bytes`: storages allocated, slots written) beside Theory 04's formula
(`roofline.kv_cache_bytes`). Writes data/kv-cache-verbs.json; figures/lab04.py makes the
tables from it.

    python -m bench.kv_cache            # a few seconds on a CPU
"""

import argparse
import json
from pathlib import Path

import torch

from bench.core import environment
from minimodel.attention_mqa_gqa import (
    blank_kv_cache,
    cache_bytes,
    grouped_attention,
    verb_model_config,
)
from minimodel.minigpt import MiniGPT
from minimodel.roofline import kv_cache_bytes
from minimodel.verbs import VERB_SEQUENCE_LEN, tokenizer, verb_sequence

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = (8, 4, 2, 1)  # kv heads: kv8 is MHA, kv4 and kv2 GQA, kv1 MQA
PREFILL = 16  # tokens of the sequence in the prefill; the other 48 are decoded one at a time
DTYPE = torch.float32  # the dtype the lab's models are trained and run in


def measure(n_kv_heads: int) -> dict:
    """Prefill, decode and measure one variant (seed-0 weights: the bytes do not depend on them)."""
    config = verb_model_config(n_kv_heads)
    torch.manual_seed(0)
    model = MiniGPT(config).to(DTYPE).eval()
    tokens = torch.tensor([verb_sequence()])
    n = tokens.shape[1]
    cache = blank_kv_cache(config, batch=1, dtype=DTYPE)
    empty = cache_bytes(cache)
    with torch.no_grad():
        steps = [
            model(tokens[:, :PREFILL], torch.arange(PREFILL)[None], cache, attn=grouped_attention)
        ]
        after_prefill = cache_bytes(cache)
        for i in range(PREFILL, n):
            steps.append(
                model(tokens[:, i : i + 1], torch.tensor([[i]]), cache, attn=grouped_attention)
            )
        full = model(tokens, attn=grouped_attention)
    measured = cache_bytes(cache)
    layers, d, elem = config.n_layers, config.head_dim, DTYPE.itemsize
    record = {
        "name": f"kv{n_kv_heads}",
        "n_kv_heads": n_kv_heads,
        "group": config.n_heads // n_kv_heads,
        "allocated_empty": empty.allocated,
        "filled_empty": empty.filled,
        "filled_after_prefill": after_prefill.filled,
        "allocated": measured.allocated,
        "filled": measured.filled,
        "formula_allocated": kv_cache_bytes(
            layers, n_kv_heads, d, config.max_seq_len, elem_bytes=elem
        ),
        "formula_filled": kv_cache_bytes(layers, n_kv_heads, d, n, elem_bytes=elem),
        "formula_after_prefill": kv_cache_bytes(layers, n_kv_heads, d, PREFILL, elem_bytes=elem),
        "formula_per_token": kv_cache_bytes(layers, n_kv_heads, d, 1, elem_bytes=elem),
        "minigpt_nbytes": cache.nbytes(),
        "decode_vs_full_max_abs": (torch.cat(steps, dim=1) - full).abs().max().item(),
    }
    for key, formula in (
        ("allocated", "formula_allocated"),
        ("filled", "formula_filled"),
        ("filled_after_prefill", "formula_after_prefill"),
    ):
        if record[key] != record[formula]:
            raise SystemExit(
                f"kv{n_kv_heads}: measured {key} {record[key]} != {formula} {record[formula]}"
            )
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "kv-cache-verbs.json")
    args = parser.parse_args()
    config = verb_model_config()
    tokens = verb_sequence()
    assert len(tokens) == VERB_SEQUENCE_LEN
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
        "config": {
            "n_layers": config.n_layers,
            "n_heads": config.n_heads,
            "head_dim": config.head_dim,
            "d_model": config.d_model,
            "max_seq_len": config.max_seq_len,
            "vocab_size": config.vocab_size,
        },
        "variants": [],
    }
    for n_kv_heads in VARIANTS:
        row = measure(n_kv_heads)
        record["variants"].append(row)
        print(
            f"{row['name']}: allocated {row['allocated']:,} B, filled {row['filled']:,} B "
            f"(formula {row['formula_filled']:,} B), decode vs full pass "
            f"{row['decode_vs_full_max_abs']:.1e}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()

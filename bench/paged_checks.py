"""What the paged kernels' data checks cost (issue 21), in one process on the same inputs: a
decode step and a prefill chunk on the checked path (max_context_len / max_query_len omitted:
one device sync, so eager only, it cannot be captured) against the fast path (host ints; the
kernel masks bad entries and lengths), with and without error flags, eagerly and under CUDA-graph
replay. Medians in ms. Run on the GPU:

    python -m bench.paged_checks --out data/paged-checks-h200.json   # about a minute
"""

import argparse
import functools
import json
from pathlib import Path

import torch
import triton

from bench.core import environment, time_ms
from minimodel.paged_attention import paged_decode, paged_prefill

DECODE = [  # (B, Hq, Hkv, d, context, block_size)
    (1, 32, 8, 128, 32768, 16),
    (64, 32, 8, 128, 4096, 16),
    (256, 32, 8, 128, 512, 16),
    (16, 32, 8, 128, 32768, 64),
]
PREFILL = [(4, 32, 8, 128, 4096, 1024, 16)]  # (B, Hq, Hkv, d, context, new tokens, block_size)


def pools(b, hkv, d, ctx, block_size):
    blocks = b * triton.cdiv(ctx, block_size)
    k = torch.randn(blocks, block_size, hkv, d, device="cuda", dtype=torch.float16)
    table = torch.randperm(blocks, device="cuda").to(torch.int32).view(b, -1)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    return k, torch.randn_like(k), table, lens


def zeroed(flags, call, **kwargs):
    """A fast-path call as a decode loop makes it: the flags zeroed first (in the graph too)."""
    flags.zero_()
    return call(**kwargs)


def measure(fns: dict) -> list[dict]:
    rows = []
    for path, (fn, capturable) in fns.items():
        fn()
        torch.cuda.synchronize()
        eager = time_ms(fn)
        graph = None
        if capturable:
            with torch.cuda.stream(torch.cuda.Stream()):
                graph = time_ms(fn, graph=True)
        rows.append({"path": path, "eager_ms": eager, "graph_ms": graph})
        shown = "-" if graph is None else f"{graph:.4f}"
        print(f"  {path:12s} eager {eager:.4f} ms  graph {shown} ms", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("data/paged-checks-h200.json"))
    args = parser.parse_args()
    record = {"environment": environment(), "decode": [], "prefill": []}
    for b, hq, hkv, d, ctx, bs in DECODE:
        print(f"decode B={b} ctx={ctx} blocks of {bs}", flush=True)
        k, v, table, lens = pools(b, hkv, d, ctx, bs)
        q = torch.randn(b, hq, d, device="cuda", dtype=torch.float16)
        flags = torch.zeros(b, dtype=torch.int32, device="cuda")
        call = functools.partial(paged_decode, q, k, v, table, lens)
        rows = measure(
            {
                "checked": (call, False),
                "fast": (functools.partial(call, max_context_len=ctx), True),
                "fast+flags": (
                    functools.partial(zeroed, flags, call, max_context_len=ctx, error_flags=flags),
                    True,
                ),
            }
        )
        record["decode"].append(
            {"B": b, "Hq": hq, "Hkv": hkv, "d": d, "context": ctx, "block_size": bs, "rows": rows}
        )
    for b, hq, hkv, d, ctx, new, bs in PREFILL:
        print(f"prefill B={b} ctx={ctx} new={new}", flush=True)
        k, v, table, lens = pools(b, hkv, d, ctx, bs)
        q = torch.randn(b * new, hq, d, device="cuda", dtype=torch.float16)
        starts = torch.arange(0, (b + 1) * new, new, dtype=torch.int32, device="cuda")
        flags = torch.zeros(b, dtype=torch.int32, device="cuda")
        call = functools.partial(paged_prefill, q, k, v, table, lens, starts)
        rows = measure(
            {
                "checked": (call, False),
                "fast": (functools.partial(call, max_query_len=new), True),
                "fast+flags": (
                    functools.partial(zeroed, flags, call, max_query_len=new, error_flags=flags),
                    True,
                ),
            }
        )
        record["prefill"].append(
            {
                "B": b,
                "Hq": hq,
                "Hkv": hkv,
                "d": d,
                "context": ctx,
                "new_tokens": new,
                "block_size": bs,
                "rows": rows,
            }
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""What the paged kernels' data checks cost (Lab 03 part 2, "The wrappers: validate, then launch"):
the checked path against the fast path, with and without error flags.

    python -m bench.paged_checks --out data/paged-checks-h200.json   # about a minute
"""

import functools

import torch
import triton

from bench.core import DATA, arguments, environment, save, time_ms
from minimodel.paged_attention import paged_decode, paged_prefill

HQ, HKV, D = 32, 8, 128
DECODE = [(1, 32768, 16), (64, 4096, 16), (256, 512, 16), (16, 32768, 64)]  # (B, context, block)
PREFILL = [(4, 4096, 1024, 16)]  # (B, context, new tokens, block size)


def zeroed(flags, call, **kwargs):
    """A fast-path call as a decode loop makes it: the flags zeroed first (in the graph too)."""
    flags.zero_()
    return call(**kwargs)


def paths(kernel, q, b: int, ctx: int, block_size: int, *args, **fast) -> list[dict]:
    """`kernel` on a random pool and table: the checked path (eager only: it syncs), the fast
    path (`fast`: the host ints), and the fast path with error flags."""
    blocks = b * triton.cdiv(ctx, block_size)
    k = torch.randn(blocks, block_size, HKV, D, device="cuda", dtype=torch.float16)
    table = torch.randperm(blocks, device="cuda").to(torch.int32).view(b, -1)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    flags = torch.zeros(b, dtype=torch.int32, device="cuda")
    call = functools.partial(kernel, q, k, torch.randn_like(k), table, lens, *args)
    rows = []
    for path, fn in (
        ("checked", call),
        ("fast", functools.partial(call, **fast)),
        ("fast+flags", functools.partial(zeroed, flags, call, **fast, error_flags=flags)),
    ):
        fn()
        torch.cuda.synchronize()
        rows.append({"path": path, "eager_ms": time_ms(fn), "graph_ms": None})
        if path != "checked":
            with torch.cuda.stream(torch.cuda.Stream()):
                rows[-1]["graph_ms"] = time_ms(fn, graph=True)
        print(f"  {rows[-1]}", flush=True)
    return rows


def main() -> None:
    args = arguments(__doc__, DATA / "paged-checks-h200.json", smoke="one shape each").parse_args()
    record = {"environment": environment(), "decode": [], "prefill": []}
    for b, ctx, bs in DECODE[: 1 if args.smoke else None]:
        shape = {"B": b, "Hq": HQ, "Hkv": HKV, "d": D, "context": ctx, "block_size": bs}
        print(f"decode {shape}", flush=True)
        q = torch.randn(b, HQ, D, device="cuda", dtype=torch.float16)
        rows = paths(paged_decode, q, b, ctx, bs, max_context_len=ctx)
        record["decode"].append(shape | {"rows": rows})
    for b, ctx, new, bs in PREFILL:
        shape = {"B": b, "Hq": HQ, "Hkv": HKV, "d": D, "context": ctx, "new_tokens": new}
        print(f"prefill {shape}", flush=True)
        q = torch.randn(b * new, HQ, D, device="cuda", dtype=torch.float16)
        starts = torch.arange(0, (b + 1) * new, new, dtype=torch.int32, device="cuda")
        rows = paths(paged_prefill, q, b, ctx, bs, starts, max_query_len=new)
        record["prefill"].append(shape | {"block_size": bs, "rows": rows})
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

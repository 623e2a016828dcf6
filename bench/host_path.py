"""The host path of the public calls (Lab 03 part 2, "What a call costs the host"): host time,
GPU time under CUDA-graph replay and eager time per call (bench.core.call_costs) of minimodel's
entry points and SDPA-cuDNN on the same inputs, where a decode call's host time goes, and that
every entry point still refuses a bad call. Paged calls on blocks of 16 in random order, on
their fast path and, eager only, their checked path (one sync, which cannot be captured).

    MINIMODEL_COMMIT=<hash> python -m bench.host_path --out data/host-path-h200.json
"""

import itertools

import torch

from bench.core import arguments, call_costs, environment, paged_cache, save, sdpa_cudnn
from minimodel.attention import _check_call, attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.kernels import MAX_PLANS
from minimodel.paged_attention import decode_contiguous, paged_decode, paged_prefill
from minimodel.timing import host_times_us


def refuses(fn) -> bool:
    try:
        fn()
    except ValueError:
        return True
    return False


def case(kind: str, n: int, b: int, hq: int, hkv: int, d: int = 128) -> dict:
    """Decode (one query, n keys) or causal prefill (n queries and keys): every entry point and
    SDPA-cuDNN timed, then each entry point given one bad argument."""
    torch.manual_seed(0)
    nq = 1 if kind == "decode" else n
    q = torch.randn(b, hq, nq, d, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(b, hkv, n, d, dtype=torch.float16, device="cuda") for _ in "kv")
    kp, vp, table, lens = paged_cache(k, v, [n] * b, 16, seed=0)
    causal = kind == "prefill"
    print(f"{kind} B={b} {hq}/{hkv} d={d} N={n}", flush=True)
    # The wrappers keep a plan per signature from its second call (kernels.Prepared): a call of
    # a shape not seen lately (a decode step on a growing cache, a new prompt length) takes the
    # whole path and leaves a mark. Views of one buffer, MAX_PLANS + 1 lengths cycled: no
    # signature comes back before its mark is dropped, so no call here is planned.
    unplanned = itertools.cycle(  # a decode step's one query row is kept: only its keys grow
        [
            (q[:, :, : max(nq - i, 1)], k[:, :, : n - i], v[:, :, : n - i])
            for i in range(MAX_PLANS + 1)
        ]
    )
    fns = {
        "sdpa_cudnn": lambda: sdpa_cudnn(q, k, v, is_causal=causal),
        "attention": lambda: attention(q, k, v, causal=causal),
        "attention_unplanned": lambda: attention(*next(unplanned), causal=causal),
    }
    refused = {"attention": refuses(lambda: attention(q, k, v.float(), causal=causal))}
    if kind == "decode":
        q3, bad = q[:, :, 0], table.clone()
        bad[0, 0] = kp.shape[0]
        fast = lambda pool: paged_decode(q3, kp, pool, table, lens, max_context_len=n)
        checked = lambda: paged_decode(q3, kp, vp, table, lens)
        fns |= {"paged_decode_fast": lambda: fast(vp), "paged_decode_checked": checked}
        recs = call_costs(fns, uncapturable=("paged_decode_checked",))
        # Where attention's host time goes: its checks, its output's allocation (no lse is
        # asked for), and the decode kernel launched alone (num_splits=1: one launch, no merge)
        # against the default split (the split kernel and the merge).
        decode = lambda **kw: decode_contiguous(q, k, v, window=None, tau=d**-0.5, **kw)
        parts = host_times_us(
            {
                "checks": lambda: _check_call(q, k, v, False, None, None),
                "allocate_output": lambda: torch.empty(q.shape, dtype=q.dtype, device="cuda"),
                "decode_one_launch": lambda: decode(num_splits=1),
                "decode_split_and_merge": decode,
            }
        )
        print("  host parts (us):", {p: round(us, 1) for p, us in parts.items()}, flush=True)
        refused |= {
            "paged_decode_fast": refuses(lambda: fast(vp.float())),
            "paged_decode_checked": refuses(lambda: paged_decode(q3, kp, vp, bad, lens)),
        }
        shape = {"kind": kind, "b": b, "hq": hq, "hkv": hkv, "d": d, "keys": n}
        return shape | {"records": recs, "host_parts_us": parts, "still_refuses": refused}
    starts = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device="cuda")
    qp = q.transpose(1, 2).reshape(b * n, hq, d).contiguous()
    fast = lambda pool: paged_prefill(qp, kp, pool, table, lens, starts, max_query_len=n)
    checked = lambda: paged_prefill(qp, kp, vp, table, lens, starts)
    hopper = lambda v: flash_attention_hopper(q, k, v, causal=True)
    fns |= {
        "flash_attention_hopper": lambda: hopper(v),
        "paged_prefill_fast": lambda: fast(vp),
        "paged_prefill_checked": checked,
    }
    recs = call_costs(fns, uncapturable=("paged_prefill_checked",))
    refused |= {
        "flash_attention_hopper": refuses(lambda: hopper(v[..., :64])),
        "paged_prefill_fast": refuses(lambda: fast(vp.float())),
    }
    shape = {"kind": kind, "b": b, "h": hq, "d": d, "n": n, "causal": True}
    return shape | {"records": recs, "still_refuses": refused}


def main() -> None:
    args = arguments(__doc__).parse_args()
    case("decode", 4096, 1, 32, 8)  # a first pass warms the process up, unrecorded
    cases = [case("decode", n, 1, 32, 8) for n in (4096, 32768)]
    cases += [case("prefill", n, 4, 32, 32) for n in (512, 1024)]
    timing = (
        "minimodel.timing: host_us = CPU wall time per call of 200 calls issued behind "
        "torch.cuda._sleep (median of 5 rounds); gpu_ms = do_bench_cudagraph median; "
        "eager_us = 200 calls and one sync (median of 5 rounds); host and eager times of a "
        "case's calls in turns (host_times_us, eager_times_us)"
    )
    save(args.out, {"environment": environment(), "timing": timing, "cases": cases})


if __name__ == "__main__":
    main()

"""The host path of the public calls: host time per call and GPU time under CUDA-graph replay,
both from the shared timer (minimodel.timing), for minimodel's entry points and SDPA-cuDNN on the
same q with a contiguous K/V of the same context, in one process on the same inputs; plus the
eager time (a plain Python loop of calls and one synchronisation). In the same
process every entry point is shown to still refuse a bad call.

    MINIMODEL_COMMIT=<hash> python -m bench.host_path --out data/host-path-h200.json

Shapes: decode B = 1, GQA 32/8, d = 128, fp16, 4k and 32k keys; prefill causal fp16, d = 128,
32 heads, N = 512 and 1024, B = 4. The paged calls run on blocks of 16 in random order, on their
fast path (max_context_len / max_query_len given, no sync) and, eager only, on their checked
path (one sync, which cannot be captured).
"""

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.core import environment
from minimodel.attention import attention
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.timing import eager_time_us, gpu_time_ms, host_time_us

DEVICE = "cuda"


def paged(k: torch.Tensor, block_size: int = 16, seed: int = 0):
    """k: (B, Hkv, N, d) -> pool (num_blocks, block_size, Hkv, d) in random block order, table."""
    b, hkv, n, d = k.shape
    per = triton.cdiv(n, block_size)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    perm = torch.randperm(b * per, generator=g, device=DEVICE)
    pool = torch.zeros((b * per, block_size, hkv, d), dtype=k.dtype, device=DEVICE)
    padded = torch.zeros((b, hkv, per * block_size, d), dtype=k.dtype, device=DEVICE)
    padded[:, :, :n] = k
    pool[perm] = (
        padded.view(b, hkv, per, block_size, d)
        .permute(0, 2, 3, 1, 4)
        .reshape(b * per, block_size, hkv, d)
    )
    return pool, perm.view(b, per).to(torch.int32)


def sdpa_cudnn(q, k, v, causal):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )


def measure(name: str, fn, capturable: bool = True) -> dict:
    fn()
    torch.cuda.synchronize()
    rec = {
        "impl": name,
        "host_us": host_time_us(fn) if capturable else None,
        "gpu_ms": gpu_time_ms(fn) if capturable else None,
        "eager_us": eager_time_us(fn),
    }
    host, graph = rec["host_us"] or float("nan"), (rec["gpu_ms"] or float("nan")) * 1e3
    print(
        f"  {name:28s} host {host:7.1f} us   graph {graph:8.1f} us   "
        f"eager {rec['eager_us']:8.1f} us",
        flush=True,
    )
    return rec


def refuses(fn) -> bool:
    try:
        fn()
    except ValueError:
        return True
    return False


def decode_case(nk: int) -> dict:
    torch.manual_seed(0)
    b, hq, hkv, d = 1, 32, 8, 128
    q = torch.randn(b, hq, 1, d, dtype=torch.float16, device=DEVICE)
    k, v = (torch.randn(b, hkv, nk, d, dtype=torch.float16, device=DEVICE) for _ in range(2))
    kp, table = paged(k)
    vp, _ = paged(v)
    lens = torch.full((b,), nk, dtype=torch.int32, device=DEVICE)
    q3 = q[:, :, 0]
    print(f"decode B={b} {hq}/{hkv} d={d} keys={nk}", flush=True)
    recs = [
        measure("sdpa_cudnn", lambda: sdpa_cudnn(q, k, v, False)),
        measure("attention", lambda: attention(q, k, v)),
        measure(
            "paged_decode_fast", lambda: paged_decode(q3, kp, vp, table, lens, max_context_len=nk)
        ),
        measure(
            "paged_decode_checked", lambda: paged_decode(q3, kp, vp, table, lens), capturable=False
        ),
    ]
    bad = table.clone()
    bad[0, 0] = kp.shape[0]
    still = {
        "attention": refuses(lambda: attention(q, k, v.float())),
        "paged_decode_fast": refuses(
            lambda: paged_decode(q3, kp, vp.float(), table, lens, max_context_len=nk)
        ),
        "paged_decode_checked": refuses(lambda: paged_decode(q3, kp, vp, bad, lens)),
    }
    return {
        "kind": "decode",
        "b": b,
        "hq": hq,
        "hkv": hkv,
        "d": d,
        "keys": nk,
        "records": recs,
        "still_refuses": still,
    }


def prefill_case(n: int, b: int = 4) -> dict:
    torch.manual_seed(0)
    h, d = 32, 128
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16, device=DEVICE) for _ in range(3))
    kp, table = paged(k)
    vp, _ = paged(v)
    lens = torch.full((b,), n, dtype=torch.int32, device=DEVICE)
    starts = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device=DEVICE)
    qp = q.transpose(1, 2).reshape(b * n, h, d).contiguous()
    print(f"prefill B={b} H={h} d={d} N={n} causal", flush=True)
    recs = [
        measure("sdpa_cudnn", lambda: sdpa_cudnn(q, k, v, True)),
        measure("attention", lambda: attention(q, k, v, causal=True)),
        measure("flash_attention_hopper", lambda: flash_attention_hopper(q, k, v, causal=True)),
        measure(
            "paged_prefill_fast",
            lambda: paged_prefill(qp, kp, vp, table, lens, starts, max_query_len=n),
        ),
        measure(
            "paged_prefill_checked",
            lambda: paged_prefill(qp, kp, vp, table, lens, starts),
            capturable=False,
        ),
    ]
    still = {
        "attention": refuses(lambda: attention(q, k, v.float(), causal=True)),
        "flash_attention_hopper": refuses(
            lambda: flash_attention_hopper(q, k, v[..., :64], causal=True)
        ),
        "paged_prefill_fast": refuses(
            lambda: paged_prefill(qp, kp, vp.float(), table, lens, starts, max_query_len=n)
        ),
    }
    return {
        "kind": "prefill",
        "b": b,
        "h": h,
        "d": d,
        "n": n,
        "causal": True,
        "records": recs,
        "still_refuses": still,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    decode_case(4096)  # a first pass warms the process (lazy initialisation, caches), unrecorded
    cases = [decode_case(4096), decode_case(32768), prefill_case(512), prefill_case(1024)]
    data = {
        "environment": environment(),
        "timing": "minimodel.timing: host_us = CPU wall time per call of 200 calls issued "
        "behind torch.cuda._sleep (median of 5 rounds); gpu_ms = do_bench_cudagraph "
        "median; eager_us = 200 calls and one sync (median of 5 rounds)",
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()

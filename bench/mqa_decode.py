"""MQA decode with the group cut into chunks (issue 23; Lab 03 part 2, "The decode kernel"): our
decode kernel at DECODE_MAX_GROUP_ROWS (G_max) = 16, 32 and 64 (64: no chunks), through a block
table and (minimodel.attention) on the contiguous cache, beside SDPA's cuDNN backend on the
contiguous cache, at the two MQA shapes where the kernel trailed: B = 64, 4,096 keys, 32 query
heads (data/bench-paged-decode-h200.json's "heads" row) and B = 256, 2,048 keys, 64 query heads
(data/exam-h200.json's MQA row); one kv head, d = 128, float16, blocks of 16 in a random order
(bench.core.in_blocks). In one process, on the same keys and values.

    PYTHONPATH=src:. MINIMODEL_COMMIT=<hash> python -m bench.mqa_decode \
        --out $OUT/mqa-decode-h200.json      # about a minute on the H200 (expected, not run)

The paged calls take `paged_decode`'s fast path (max_context_len given, as a server's step under
a CUDA graph does). G_max is set around each call as bench.fp8_decode's `with_tile` sets the
tile, so a capture launches with it and its replays run what was launched. Before timing, each
output is checked on two sequences against the float32 reference: an error more than twice
PyTorch's own float16 error ends the run, nothing timed. Timing: `bench.core.time_ms(graph=True)`
(minimodel.timing.gpu_time_ms, the median of do_bench_cudagraph replays), `--rounds` rounds with
the implementations in turns; the device copy rate (bench.paged_decode.copy_rate, bytes read +
written) at the start and at the end. Bytes: `roofline.kv_cache_bytes(1, Hkv, d, N, batch=B)`,
the cache a step must read, for every implementation. Each record of ours says the query tile
(BLOCK_G rows), the chunks and the splits its launch used (`paged_attention.group_rows`,
`choose_num_splits`); `vs_cudnn` is cuDNN's time over its own (above 1: faster than cuDNN).
"""

import contextlib
import statistics
import time
import warnings

import torch
import triton

from bench.core import arguments, environment, in_blocks, save, sdpa, time_ms
from bench.paged_decode import Decode, copy_rate, sdpa_fn
from minimodel import kernels, paged_attention
from minimodel.attention import attention
from minimodel.paged_attention import paged_decode
from minimodel.reference import attention_ref
from minimodel.roofline import kv_cache_bytes

DEVICE = "cuda"
HKV, D, BLOCK_SIZE = 1, 128, 16
SHAPES = [(64, 4096, 32), (256, 2048, 64)]  # (B, keys, Hq)
MAX_GROUP_ROWS = (16, 32, 64)


@contextlib.contextmanager
def max_group_rows(g_max: int):
    """paged_attention.DECODE_MAX_GROUP_ROWS set to g_max inside the block, restored after."""
    saved = paged_attention.DECODE_MAX_GROUP_ROWS
    paged_attention.DECODE_MAX_GROUP_ROWS = g_max
    try:
        yield
    finally:
        paged_attention.DECODE_MAX_GROUP_ROWS = saved


def launch_shape(b: int, n: int, hq: int, g_max: int) -> dict:
    """The tile, chunks, splits and programs `_launch_decode` picks for this shape at g_max."""
    with max_group_rows(g_max):
        block_g, chunks = paged_attention.group_rows(hq // HKV)
    block_n = paged_attention.decode_config(triton.next_power_of_2(D), 2).block_n
    sms = kernels.num_sms(torch.device(DEVICE))
    splits = paged_attention.choose_num_splits(b, HKV, n, block_n, sms, chunks)
    return {
        "g_max": g_max,
        "block_g": block_g,
        "chunks": chunks,
        "splits": splits,
        "block_n": block_n,
        "programs": b * HKV * chunks * splits,
    }


def reference(q, k, v, r: int) -> torch.Tensor:
    """Sequence r's output (Hq, d), float32 reference on the float16 inputs."""
    q4, k4, v4 = q[r : r + 1, :, None].float(), k[r : r + 1].float(), v[r : r + 1].float()
    return attention_ref(q4, k4, v4)[0, :, 0]


def pytorch_error(q, k, v, rows) -> float:
    """PyTorch's float16 attention (kv head repeated) against the float32 reference on the
    sequences `rows`: the budget each implementation is held to."""
    worst = 0.0
    for r in rows:
        qq, kk, vv = q[r : r + 1, :, None], k[r : r + 1], v[r : r + 1]
        g = qq.shape[1] // kk.shape[1]
        kk, vv = kk.repeat_interleave(g, 1), vv.repeat_interleave(g, 1)
        same = torch.softmax((qq @ kk.transpose(-1, -2)) * D**-0.5, -1) @ vv
        ref = attention_ref(qq.float(), kk.float(), vv.float())
        worst = max(worst, (same.float() - ref).abs().max().item())
    return worst


def bench_shape(b: int, n: int, hq: int, rounds: int) -> list[dict]:
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    q = torch.randn(b, hq, D, device=DEVICE, generator=gen).half()
    k, v = (torch.randn(b, HKV, n, D, device=DEVICE, generator=gen).half() for _ in "kv")
    lens = [n] * b
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    (k_pool, table), (v_pool, _) = in_blocks(k, lens, BLOCK_SIZE), in_blocks(v, lens, BLOCK_SIZE)
    shape = {"b": b, "ctx": n, "hq": hq, "hkv": HKV, "d": D, "dtype": "float16"}
    nbytes = kv_cache_bytes(1, HKV, D, n, batch=b)
    fns, recs = {}, {}
    q4 = q[:, :, None]
    for g_max in MAX_GROUP_ROWS:

        def paged(g_max=g_max):
            with max_group_rows(g_max):
                return paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=n)

        def contiguous(g_max=g_max):
            with max_group_rows(g_max):
                return attention(q4, k, v, causal=True)[:, :, 0]

        in_pool = f"block table, blocks of {BLOCK_SIZE}, random order"
        forms = {
            f"paged_bs16_gmax{g_max}": (paged, in_pool),
            f"contiguous_gmax{g_max}": (contiguous, "minimodel.attention, contiguous cache"),
        }
        for name, (fn, form) in forms.items():
            fns[name] = fn
            recs[name] = {**shape, "impl": name, **launch_shape(b, n, hq, g_max)}
            recs[name]["form"] = f"{form}; DECODE_MAX_GROUP_ROWS = {g_max}"
    cudnn, form = sdpa_fn("sdpa_cudnn", q4, k, v, Decode("mqa", b, n, hq=hq, hkv=HKV))
    fns["sdpa_cudnn"] = lambda: cudnn()[:, :, 0]
    recs["sdpa_cudnn"] = {
        **shape,
        "impl": "sdpa_cudnn",
        "form": f"SDPA, cuDNN backend, contiguous cache, {form}",
    }
    rows = (0, b - 1)
    refs = {r: reference(q, k, v, r) for r in rows}
    budget = pytorch_error(q, k, v, rows)
    for name, fn in fns.items():
        with sdpa(name):
            out = fn()
        err = max((out[r].float() - refs[r]).abs().max().item() for r in rows)
        if not err <= 2 * budget + 1e-6:  # NaN fails too
            raise SystemExit(
                f"{name} at {shape}: error {err:.3e} against the float32 reference, "
                f"more than twice PyTorch's {budget:.3e}: not timed"
            )
        recs[name] |= {
            "kv_bytes": nbytes,
            "max_err": err,
            "pytorch_err": budget,
            "graph_ms_runs": [],
        }
        del out
    for i in range(rounds):
        for name, fn in fns.items():
            recs[name]["graph_ms_runs"].append(time_ms(fn, name, graph=True))
        said = ", ".join(f"{m} {r['graph_ms_runs'][-1] * 1e3:.1f} us" for m, r in recs.items())
        print(f"B={b} N={n} Hq={hq} round {i + 1}/{rounds}: {said}", flush=True)
    cudnn_ms = statistics.median(recs["sdpa_cudnn"]["graph_ms_runs"])
    for rec in recs.values():
        rec["graph_ms"] = statistics.median(rec["graph_ms_runs"])
        rec["graph_gb_per_s"] = nbytes / rec["graph_ms"] / 1e6
        rec["vs_cudnn"] = cudnn_ms / rec["graph_ms"]  # > 1: faster than cuDNN
    torch.cuda.empty_cache()
    return list(recs.values())


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains its choices
    t0 = time.time()
    record = {
        "environment": environment(),
        "shapes": [
            dict(zip(("b", "ctx", "hq"), s, strict=True)) | {"hkv": HKV, "d": D} for s in SHAPES
        ],
        "block_size": BLOCK_SIZE,
        "timing": "bench.core.time_ms(graph=True): minimodel.timing.gpu_time_ms, the median of "
        "do_bench_cudagraph replays; rounds in turns (graph_ms_runs), graph_ms their median",
        "bytes": "kv_bytes: roofline.kv_cache_bytes(1, Hkv, d, ctx, batch=B), the cache",
        "copy_bytes_per_s": [copy_rate()],
        "records": [],
    }
    print(f"copy {record['copy_bytes_per_s'][0] / 1e9:.0f} GB/s", flush=True)
    for b, n, hq in SHAPES:
        record["records"] += bench_shape(b, n, hq, args.rounds)
    record["copy_bytes_per_s"].append(copy_rate())
    copy = statistics.mean(record["copy_bytes_per_s"])
    for rec in record["records"]:
        rec["of_copy"] = rec["graph_gb_per_s"] * 1e9 / copy
        grid = (
            f"{rec['chunks']} x {rec['block_g']} rows, {rec['splits']} splits"
            if ("chunks" in rec)
            else ""
        )
        print(
            f"B={rec['b']} Hq={rec['hq']} {rec['impl']:<20} {rec['graph_ms'] * 1e3:7.1f} us "
            f"{rec['graph_gb_per_s']:6.0f} GB/s {rec['of_copy']:5.0%} of copy "
            f"{rec['vs_cudnn']:.2f}x cuDNN {grid}",
            flush=True,
        )
    print(f"copy {record['copy_bytes_per_s'][-1] / 1e9:.0f} GB/s ({time.time() - t0:.0f} s)")
    save(args.out, record)


if __name__ == "__main__":
    main()

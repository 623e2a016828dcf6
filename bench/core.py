"""What every measurement shares: where the data lives, what produced it, the command line, the
timer, the SDPA backends, random inputs, a cache laid out in blocks, and the check and timing of
a set of implementations on the same inputs (Results, "How each time is taken")."""

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from minimodel.reference import attention_ref

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SDPA = {  # the SDPA backends the benchmarks compare against, by the name their records carry
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
}
GRAPH_TIMING = (
    "bench.core.time_ms(graph=True): minimodel.timing.gpu_time_ms, the median of "
    "do_bench_cudagraph replays; rounds in turns (graph_ms_runs), graph_ms their median"
)


def git(*args: str) -> str:
    command = ["git", "-C", str(ROOT), *args]
    return subprocess.run(command, text=True, capture_output=True, check=True).stdout.strip()


def commit() -> str:
    """The short commit of the tree, "-dirty" if it has uncommitted changes; MINIMODEL_COMMIT
    instead where the tree's .git is not its own (the device machine's copy)."""
    if os.environ.get("MINIMODEL_COMMIT"):
        return os.environ["MINIMODEL_COMMIT"]
    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "-uno")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def now() -> str:
    """The UTC date and time, to the second, as data files record it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def environment(**extra: object) -> dict:
    """What produced a data file: device, library versions, threads, git commit, date."""
    # triton is imported here, not with this module: bench.exam's smoke run on a CPU must set
    # TRITON_INTERPRET before triton's first import, and it imports this module first
    import triton

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else platform.machine(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "commit": commit(),
        "date": now(),
        **extra,
    }


def _at_least_one(text: str) -> int:
    """--rounds: an int >= 1 (no round would time nothing and fail after the GPU work)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)


def arguments(
    doc: str,
    out: Path | None = None,
    *,
    required: bool = True,
    rounds: int | None = None,
    **flags: str,
) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, --out (required unless a default is
    given or `required` is false), --rounds (timing rounds, when a default is given) and each of
    `flags` (name: help) as a switch."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=out, required=required and out is None)
    if rounds is not None:
        parser.add_argument("--rounds", type=_at_least_one, default=rounds)
    for name, text in flags.items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    return parser


def save(path: Path, record: dict, indent: int = 1) -> None:
    """Write a data file (JSON) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent) + "\n")
    print(f"wrote {path}", flush=True)


def error(e: BaseException, limit: int = 200) -> str:
    """An exception as a data file records it: its type and first line, cut at `limit`."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:limit]}"


def randn(*shape: int, dtype=torch.float16, generator=None, device="cuda") -> torch.Tensor:
    """Standard normal values in `dtype` (drawn in float32, as the benchmarks always have)."""
    return torch.randn(*shape, device=device, generator=generator).to(dtype)


def qkv(b, hq, hkv, n, d, nq=None, dtype=torch.float16, seed=0) -> tuple[torch.Tensor, ...]:
    """q (B, Hq, d), or (B, Hq, nq, d) given nq, then k and v (B, Hkv, n, d): randn from one
    CUDA generator seeded `seed`, in that order."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = randn(b, hq, *([] if nq is None else [nq]), d, dtype=dtype, generator=g)
    return q, *(randn(b, hkv, n, d, dtype=dtype, generator=g) for _ in "kv")


def in_blocks(k: torch.Tensor, lens: list[int], block_size: int, seed: int = 1):
    """The contiguous cache k: (B, Hkv, N, d) copied into a pool (blocks, block_size, Hkv, d) at
    a random permutation of physical blocks; returns (pool, block_table). A table entry past a
    sequence's blocks is -1; a pool slot past its tokens is zero."""
    b, hkv, n, d = k.shape
    per_seq = [-(-x // block_size) for x in lens]
    g = torch.Generator(device=k.device).manual_seed(seed)
    perm = torch.randperm(sum(per_seq), generator=g, device=k.device).to(torch.int32)
    pool = torch.empty((sum(per_seq), block_size, hkv, d), dtype=k.dtype, device=k.device)
    table = torch.full((b, -(-n // block_size)), -1, dtype=torch.int32, device=k.device)
    start = 0
    for i, nb in enumerate(per_seq):
        ids = perm[start : start + nb]
        table[i, :nb] = ids
        padded = torch.zeros((hkv, nb * block_size, d), dtype=k.dtype, device=k.device)
        padded[:, : lens[i]] = k[i, :, : lens[i]]
        pool[ids.long()] = padded.view(hkv, nb, block_size, d).permute(1, 2, 0, 3)
        start += nb
    return pool, table


def paged_cache(k: torch.Tensor, v: torch.Tensor, lens: list[int], block_size: int, seed=1):
    """k and v in blocks at the same permutation (in_blocks): k_pool, v_pool, the block table
    and the context lengths as an int32 tensor."""
    (k_pool, table), (v_pool, _) = (in_blocks(t, lens, block_size, seed) for t in (k, v))
    return k_pool, v_pool, table, torch.tensor(lens, dtype=torch.int32, device=k.device)


def sdpa(impl: str | None):
    """Within the block, SDPA runs only the backend `impl` names (one of SDPA); for any other
    implementation (or None), a block that changes nothing."""
    return sdpa_kernel(SDPA[impl]) if impl in SDPA else contextlib.nullcontext()


def sdpa_cudnn(q, k, v, *, is_causal=False, attn_mask=None, impl="sdpa_cudnn"):
    """SDPA's cuDNN backend (or the one `impl` names) on contiguous (B, H, N, d) tensors, kv
    heads shared in place."""
    with sdpa(impl):
        gqa = q.shape[1] != k.shape[1]
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=gqa
        )


def time_ms(fn, impl: str | None = None, *, graph: bool = False, quantiles=None, **bench_args):
    """Milliseconds of fn() (under the SDPA backend `impl` names, if any), the median (or the
    `quantiles`): every benchmark times through here. With graph, replayed from a CUDA graph
    (minimodel.timing.gpu_time_ms; do_bench_cudagraph for quantiles); eager,
    triton.testing.do_bench, the L2 flushed between calls. `bench_args` (warmup, rep) go to
    triton."""
    import triton.testing

    from minimodel.timing import gpu_time_ms

    with sdpa(impl):
        if graph and quantiles is None:
            return gpu_time_ms(fn, *([bench_args["rep"]] if "rep" in bench_args else []))
        if graph:
            return triton.testing.do_bench_cudagraph(fn, quantiles=quantiles, **bench_args)
        return triton.testing.do_bench(fn, quantiles=quantiles, return_mode="median", **bench_args)


def call_costs(fns: dict, uncapturable: tuple[str, ...] = ()) -> list[dict]:
    """Host time, GPU time (graph replay) and eager time of each call of fns (minimodel.timing),
    after an untimed call each; host and eager times in turns; host and GPU time only for the
    calls that can be captured (not those named in uncapturable)."""
    from minimodel.timing import eager_times_us, gpu_time_ms, host_times_us

    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    host = host_times_us({name: fn for name, fn in fns.items() if name not in uncapturable})
    eager = eager_times_us(fns)
    recs = []
    for name, fn in fns.items():
        rec = {
            "impl": name,
            "host_us": host.get(name),
            "gpu_ms": None if name in uncapturable else gpu_time_ms(fn),
            "eager_us": eager[name],
        }
        print(f"  {name:32s} {rec}", flush=True)
        recs.append(rec)
    return recs


def copy_rate() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written per second (do_bench median)."""
    src = torch.randn(2**29, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))  # eager: a captured copy runs on the copy engine
    return 2 * src.nbytes / ms / 1e-3


def reference(q, k, v, rows, lens=None, window=None) -> dict[int, torch.Tensor]:
    """The float32 reference output (Hq, d) of the decode step q (B, Hq, d) over k, v (B, Hkv,
    N, d) (a sequence's first lens[r] keys), for each sequence r of `rows`."""
    out = {}
    for r in rows:
        n = k.shape[2] if lens is None else lens[r]
        kr, vr = (t[r : r + 1, :, :n].float() for t in (k, v))
        ref = attention_ref(q[r : r + 1, :, None].float(), kr, vr, causal=True, window=window)
        out[r] = ref[0, :, 0]
    return out


def max_error(out: torch.Tensor, refs: dict[int, torch.Tensor]) -> float:
    """The largest |out - reference| over the sequences of refs; out (B, Hq, d) or (B, Hq, 1, d)."""
    out = out[:, :, 0] if out.dim() == 4 else out
    return max((out[r].float() - ref).abs().max().item() for r, ref in refs.items())


def group_error(out, q, k, v, heads: int = 1, **mask) -> float:
    """max |out - attention_ref| in float32 on sequence 0's query heads of its first `heads` kv
    heads; out and q (B, Hq, Nq, d), k and v (B, Hkv, Nk, d), mask attention_ref's."""
    rows = heads * (q.shape[1] // k.shape[1])
    ref = attention_ref(q[:1, :rows].float(), k[:1, :heads].float(), v[:1, :heads].float(), **mask)
    return (out[:1, :rows].float() - ref).abs().max().item()


def pytorch_error(q, k, v, rows) -> float:
    """PyTorch's own float16 attention (kv heads repeated) against the float32 reference on the
    same inputs, for the sequences `rows`: the budget a kernel is held to."""
    worst = 0.0
    for r in rows:
        qq, kk, vv = q[r : r + 1, :, None], k[r : r + 1].half(), v[r : r + 1].half()
        g = qq.shape[1] // kk.shape[1]
        kk, vv = kk.repeat_interleave(g, 1), vv.repeat_interleave(g, 1)
        same = torch.softmax((qq @ kk.transpose(-1, -2)) * qq.shape[-1] ** -0.5, -1) @ vv
        ref = attention_ref(qq.float(), kk.float(), vv.float())
        worst = max(worst, (same.float() - ref).abs().max().item())
    return worst


def checked(name: str, fn, refs: dict, budget: float, where: str = "") -> float:
    """fn()'s error against refs (under `name`'s SDPA backend, if it names one); the run ends,
    nothing timed, if it is more than twice `budget` (NaN too)."""
    with sdpa(name):
        err = max_error(fn(), refs)
    if not err <= 2 * budget + 1e-6:
        raise SystemExit(
            f"{name}{where}: error {err:.3e} against the float32 reference, more than twice "
            f"PyTorch's {budget:.3e}: not timed"
        )
    return err


def tried(recs: dict, fns: dict, name: str, make, check, limit: int = 200) -> None:
    """fn = make(), run once (under the SDPA backend `name` names, if any) and check(fn())
    recorded as recs[name]["max_err"], fn put in fns[name]; if a step raised, the error in the
    record instead (an unsupported combination is data too)."""
    try:
        fn = make()
        with sdpa(name):
            recs[name]["max_err"] = check(fn())
        fns[name] = fn
    except Exception as e:  # noqa: BLE001
        recs[name]["error"] = error(e, limit)


def in_turns(
    recs: dict, fns: dict, rounds: int, *, eager=False, graph=True, impls=None, must_capture=False
) -> None:
    """Time every fn of `fns` `rounds` times, all of them once in each round, under the SDPA
    backend `impls` maps it to, else its own name's: with eager, into its record's ms_runs; with
    graph, replayed from a CUDA graph into graph_ms_runs (a failed capture is recorded as
    graph_error; with must_capture it ends the run). Then the medians, ms and graph_ms."""
    for i in range(rounds):
        for name, fn in fns.items():
            impl = (impls or {}).get(name, name)
            if eager:
                recs[name]["ms_runs"].append(time_ms(fn, impl))
            if not graph:
                continue
            try:
                recs[name].setdefault("graph_ms_runs", []).append(time_ms(fn, impl, graph=True))
            except Exception as e:  # noqa: BLE001 - a capture failure is data too
                if must_capture:
                    raise
                recs[name]["graph_error"] = error(e, 160)
        key = "graph_ms_runs" if graph else "ms_runs"
        said = [f"{n} {r[key][-1] * 1e3:.1f} us" for n, r in recs.items() if r.get(key)]
        print(f"  round {i + 1}/{rounds}: {', '.join(said)}", flush=True)
    for rec in recs.values():
        for key in ("ms", "graph_ms"):
            if rec.get(key + "_runs") and not (key == "graph_ms" and "graph_error" in rec):
                rec[key] = statistics.median(rec[key + "_runs"])
    torch.cuda.empty_cache()


def rates(rec: dict, nbytes=None, flops=None) -> dict:
    """rec with the rate of each of its times (ms, graph_ms): GB/s of `nbytes`, TFLOP/s of
    `flops`."""
    for key in ("ms", "graph_ms"):
        if key in rec and nbytes is not None:
            rec[key.replace("ms", "gb_per_s")] = nbytes / rec[key] / 1e6
        if key in rec and flops is not None:
            rec[key.replace("ms", "tflops")] = flops / rec[key] / 1e9
    return rec

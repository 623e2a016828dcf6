"""What every measurement shares: where the data lives, what produced it, the command line, the
timer, the SDPA backends, random inputs and a cache laid out in blocks."""

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SDPA = {  # the SDPA backends the benchmarks compare against, by the name their records carry
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def git(*args: str) -> str:
    command = ["git", "-C", str(ROOT), *args]
    return subprocess.run(command, text=True, capture_output=True, check=True).stdout.strip()


def commit() -> str:
    """The short commit of the tree, with "-dirty" if it has uncommitted changes. A copy of the
    tree whose .git is not its own (the device machine's) passes it as MINIMODEL_COMMIT."""
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


def arguments(doc: str, out: Path | None = None, **flags: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, --out (required unless a default is
    given) and each of `flags` (name: help) as a switch."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=out, required=out is None)
    for name, text in flags.items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    return parser


def save(path: Path, record: dict, indent: int = 1, **options) -> None:
    """Write a data file (JSON; `options` go to json.dumps) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent, **options) + "\n")
    print(f"wrote {path}", flush=True)


def error(e: BaseException, limit: int = 200) -> str:
    """An exception as a data file records it: its type and first line, cut at `limit`."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:limit]}"


def randn(*shape: int, dtype=torch.float16, generator=None, device="cuda") -> torch.Tensor:
    """Standard normal values in `dtype` (drawn in float32, as the benchmarks always have)."""
    return torch.randn(*shape, device=device, generator=generator).to(dtype)


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


def sdpa(impl: str | None):
    """Within the block, SDPA runs only the backend `impl` names (one of SDPA); for any other
    implementation (or None), a block that changes nothing."""
    return sdpa_kernel(SDPA[impl]) if impl in SDPA else contextlib.nullcontext()


def time_ms(fn, impl: str | None = None, *, graph: bool = False, quantiles=None, **bench_args):
    """Milliseconds of fn() (under the SDPA backend `impl` names, if it names one), the median
    (or the `quantiles`): every benchmark times through here. With graph, fn replayed from a CUDA
    graph: the GPU's time without the host's (minimodel.timing.gpu_time_ms; do_bench_cudagraph
    itself where quantiles are asked for, which the shared timer does not report). Eager,
    triton.testing.do_bench: each call between CUDA events, its 256 MB buffer write between calls
    evicting the L2, the measure of calls that outlast their host work (the forward grid, a 2 GiB
    copy, the exp2 chain, the tile sweeps: 0.1 ms and more; Results, "How each time is taken").
    `bench_args` (warmup, rep) go to triton; without them its defaults."""
    import triton.testing

    from minimodel.timing import gpu_time_ms

    with sdpa(impl):
        if graph and quantiles is None:
            return gpu_time_ms(fn, *([bench_args["rep"]] if "rep" in bench_args else []))
        if graph:
            return triton.testing.do_bench_cudagraph(fn, quantiles=quantiles, **bench_args)
        return triton.testing.do_bench(fn, quantiles=quantiles, return_mode="median", **bench_args)

"""What every measurement shares: where the data lives and what produced it."""

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def commit() -> str:
    """The short commit of the tree, with "-dirty" if it has uncommitted changes. A copy of the
    tree whose .git is not its own (the device machine's) passes it as MINIMODEL_COMMIT."""
    if os.environ.get("MINIMODEL_COMMIT"):
        return os.environ["MINIMODEL_COMMIT"]
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], text=True, capture_output=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def environment(**extra: object) -> dict:
    """What produced a data file: device, library versions, threads, git commit, date."""
    import torch
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
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **extra,
    }


def time_ms(fn, backend=None, *, graph: bool = False, quantiles=None, **bench_args):
    """Milliseconds of fn() under SDPA `backend` if given, the median (or the `quantiles`): every
    benchmark times through here. With graph, fn replayed from a CUDA graph: the GPU's time
    without the host's (minimodel.timing.gpu_time_ms; do_bench_cudagraph itself where quantiles
    are asked for, which the shared timer does not report). Eager, triton.testing.do_bench: each
    call between CUDA events, its 256 MB buffer write between calls evicting the L2, the measure
    of calls that outlast their host work (the forward grid, a 2 GiB copy, the exp2 chain, the
    tile sweeps: 0.1 ms and more; Results, "How each time is taken"). `bench_args` (warmup, rep)
    go to triton; without them its defaults."""
    import contextlib

    import triton.testing
    from torch.nn.attention import sdpa_kernel

    from minimodel.timing import gpu_time_ms

    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        if graph and quantiles is None:
            return gpu_time_ms(fn, *([bench_args["rep"]] if "rep" in bench_args else []))
        if graph:
            return triton.testing.do_bench_cudagraph(fn, quantiles=quantiles, **bench_args)
        return triton.testing.do_bench(fn, quantiles=quantiles, return_mode="median", **bench_args)

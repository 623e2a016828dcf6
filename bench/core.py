"""What every measurement shares: where the data lives and what produced it."""

import datetime
import json
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
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], text=True,
                               capture_output=True, check=True).stdout.strip()
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


def write_json(path: Path, record: dict, indent: int = 1) -> None:
    """Write a data file (its folder made if need be) and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent) + "\n")
    print(f"wrote {path}", flush=True)


def time_ms(fn, backend=None, *, graph: bool = False) -> float:
    """Median milliseconds of fn(), under SDPA `backend` if given: eager, triton.testing.do_bench
    (its buffer write between runs evicts the L2); or with graph, replayed from a CUDA graph
    (minimodel.timing.gpu_time_ms: the GPU's time without the host's)."""
    import contextlib

    import triton.testing
    from torch.nn.attention import sdpa_kernel

    from minimodel.timing import gpu_time_ms

    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        return gpu_time_ms(fn) if graph else triton.testing.do_bench(fn, return_mode="median")

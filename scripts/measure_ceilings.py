"""Measure this machine's roofline ceilings and write them to data/ceilings-<name>.json.

    python scripts/measure_ceilings.py --name h200      # on the GPU machine
    python scripts/measure_ceilings.py --name cpu       # anywhere
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

import torch
import triton

from minimodel.ceilings import measure_ceilings

ROOT = Path(__file__).resolve().parents[1]


def environment() -> dict:
    """What produced a data file: device, library versions, git commit, date."""
    # MINIMODEL_COMMIT first: the GPU machine's copy of the tree can carry a stale .git
    commit = (os.environ.get("MINIMODEL_COMMIT")
              or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip() or "unknown")
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.machine(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True, help="file name part, e.g. h200 or cpu")
    parser.add_argument("--out", type=Path, default=ROOT / "data")
    args = parser.parse_args()
    ceilings = measure_ceilings()
    record = {"environment": environment(), "ceilings": dataclasses.asdict(ceilings)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ceilings-{args.name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{ceilings.name}: {ceilings.peak_flops / 1e12:.1f} TFLOP/s, "
          f"{ceilings.bandwidth / 1e9:.0f} GB/s, ridge {ceilings.ridge:.0f} FLOP/B -> {path}")


if __name__ == "__main__":
    main()

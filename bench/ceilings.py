"""Measure this machine's roofline ceilings and write them to data/ceilings-<name>.json.

python -m bench.ceilings --name h200      # on the GPU machine
python -m bench.ceilings --name cpu       # anywhere
"""

import argparse
import dataclasses
import json
from pathlib import Path

from bench.core import environment
from minimodel.ceilings import measure_ceilings

ROOT = Path(__file__).resolve().parents[1]


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
    print(
        f"{ceilings.name}: {ceilings.peak_flops / 1e12:.1f} TFLOP/s, "
        f"{ceilings.bandwidth / 1e9:.0f} GB/s, ridge {ceilings.ridge:.0f} FLOP/B -> {path}"
    )


if __name__ == "__main__":
    main()

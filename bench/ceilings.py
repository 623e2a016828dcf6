"""This machine's roofline ceilings (minimodel.ceilings.measure_ceilings).

python -m bench.ceilings --name h200      # on the GPU machine
python -m bench.ceilings --name cpu       # anywhere
"""

import dataclasses

from bench.core import DATA, arguments, environment, save
from minimodel.ceilings import measure_ceilings


def main() -> None:
    parser = arguments(__doc__, DATA)
    parser.add_argument("--name", required=True, help="file name part, e.g. h200 or cpu")
    args = parser.parse_args()
    c = measure_ceilings()
    print(f"{c.name}: {c.peak_flops / 1e12:.1f} TFLOP/s, {c.bandwidth / 1e9:.0f} GB/s")
    record = {"environment": environment(), "ceilings": dataclasses.asdict(c)}
    save(args.out / f"ceilings-{args.name}.json", record, indent=2)


if __name__ == "__main__":
    main()

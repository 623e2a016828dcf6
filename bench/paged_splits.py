"""The paged decode at forced split counts, B = 64, uniform 4k keys and ragged batches, with the
copy rate (Lab 03 part 2, "How many splits").

    MINIMODEL_COMMIT=<hash> python -m bench.paged_splits --out data/paged-splits-h200.json
"""

from bench.core import arguments, copy_rate, environment, save
from bench.paged_decode import Decode, bench_splits

CASES = (Decode("mixed", 64, 8192), Decode("b64", 64, 4096), Decode("mixed", 64, 16384))
SPLITS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64]


def main() -> None:
    args = arguments(__doc__).parse_args()
    record = {"environment": environment(), "copy_bytes_per_s": copy_rate()}
    record["records"] = [r for case in CASES for r in bench_splits(case, SPLITS)]
    save(args.out, record)


if __name__ == "__main__":
    main()

"""Mutation run: change one bound, guard or formula of the tangled code at a time, run the tests
that should notice, and report which changes survive. A survivor is a bug the suite would let
through: add the test that catches it (or explain on the page why the change is equivalent).

    .venv/bin/python scripts/mutate.py                 # every mutant (tens of minutes: kernels run
                                                       # in Triton's interpreter)
    .venv/bin/python scripts/mutate.py --only flash    # the mutants whose name contains "flash"
    .venv/bin/python scripts/mutate.py --list

The mutants are data, in scripts/mutants.json. Each runs in a scratch copy of src/, tests/,
exercises/ and scripts/ (the tests' conftest reads scripts/lab_parts.py), so the working tree is
never touched; a mutant whose text is no longer in its file is reported as stale (the code moved
on: update the list), never silently skipped. A run that ends in neither a pass nor a test
failure (pytest's exit status not 0 or 1: a collection error, a crashed interpreter) is reported
as an error, not as caught. Writes nothing but its report (stdout, and --out).
"""

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # a tangled file under src/
    old: str  # text that must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # the test files that should catch it
    gpu_only: str = ""  # why only a GPU run can catch it (then skipped on a CPU)


MUTANTS = [Mutant(**{k: tuple(v) if k == "tests" else v for k, v in row.items()})
           for row in json.loads((ROOT / "scripts/mutants.json").read_text())["mutants"]]


def run(mutant: Mutant, keep_going: bool) -> dict:
    if mutant.gpu_only and not has_cuda():
        return {"name": mutant.name, "result": "needs a GPU", "seconds": 0.0,
                "detail": mutant.gpu_only}
    text = (ROOT / mutant.path).read_text()
    if text.count(mutant.old) != 1:
        found = text.count(mutant.old)
        return {"name": mutant.name, "result": "stale", "seconds": 0.0,
                "detail": f"the mutated text occurs {found} times in {mutant.path}"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for folder in ("src", "tests", "exercises", "scripts"):  # conftest reads scripts/
            shutil.copytree(ROOT / folder, tmp / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copy(ROOT / "pyproject.toml", tmp)
        (tmp / mutant.path).write_text(text.replace(mutant.old, mutant.new))
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             *([] if keep_going else ["-x"]), *mutant.tests],
            cwd=tmp, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp / "src"),
                          "HOME": str(tmp)},
            capture_output=True, text=True)
        seconds = time.monotonic() - start
    # pytest's last line; when it wrote nothing (a conftest that failed to import), stderr's
    summary = (result.stdout.strip().splitlines() or result.stderr.strip().splitlines()
               or ["(no output)"])[-1]
    caught = result.returncode == 1
    if result.returncode not in (0, 1):
        return {"name": mutant.name, "result": "error", "seconds": seconds, "detail": summary}
    return {"name": mutant.name, "result": "caught" if caught else "SURVIVED", "seconds": seconds,
            "detail": summary}


@functools.cache
def has_cuda() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep-going", action="store_true", help="run every test, not -x")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only is None or args.only in m.name]
    if args.list:
        for m in chosen:
            print(f"{m.name:40s} {m.path}")
        return
    if not chosen:
        sys.exit(f"no mutant's name contains {args.only!r}")
    report = []
    for i, mutant in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {mutant.name} ...", end=" ", flush=True)
        row = run(mutant, args.keep_going)
        report.append(row)
        print(f"{row['result']} ({row['seconds']:.0f} s): {row['detail']}", flush=True)
    survivors = [r["name"] for r in report if r["result"] not in ("caught", "needs a GPU")]
    print(f"\n{len(report) - len(survivors)} of {len(report)} mutants caught"
          + (f"; not caught: {', '.join(survivors)}" if survivors else ""))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    sys.exit(1 if survivors else 0)


if __name__ == "__main__":
    main()

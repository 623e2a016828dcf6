"""Which modules and which test files belong to a lab, and to each part of it (hand-written).

A lab's own tests are the test files marked `pytest.mark.lab("NN")` (NN: two digits and an
optional letter, "00" or "01b"); a file of a later part says
so with `pytest.mark.lab("NN", part=2)` (no part: part 1). A lab's modules are its skeletons,
exercises/labNN/<module>.py; a module belongs to the part whose test files import it
(`from minimodel.<module> import ...`). `tests/conftest.py` uses this for `make check-mine`, and
`make exercise` prints it:

    python scripts/lab_parts.py 03        # one line per skeleton: its part
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r'pytest\.mark\.lab\(\s*"(\d+[a-z]?)"\s*(?:,\s*part\s*=\s*(\d+))?\s*\)')


def lab_test_files(lab: str) -> dict[Path, str]:
    """The lab's own test files, each with its part ("1" when the mark names none)."""
    files = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for number, part in MARK.findall(path.read_text()):
            if number == lab.zfill(2):
                files[path] = part or "1"
    return files


def skeleton_modules(lab: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "exercises" / f"lab{lab.zfill(2)}").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """The minimodel modules a test file imports from (`from minimodel.x import ...`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minimodel."):
            names.add(node.module.split(".")[1])
    return names


def module_parts(lab: str) -> dict[str, str]:
    """Each skeleton module of the lab with its part: the first part whose tests import it."""
    modules = skeleton_modules(lab)
    parts = {}
    for path, part in sorted(lab_test_files(lab).items(), key=lambda item: item[1]):
        for name in sorted(imported_modules(path) & set(modules)):
            parts.setdefault(name, part)
    return {name: parts.get(name, "1") for name in modules}


def parts(lab: str) -> list[str]:
    return sorted(set(lab_test_files(lab).values()) | set(module_parts(lab).values()))


def main(argv: list[str]) -> int:
    lab = argv[1].zfill(2)
    by_module = module_parts(lab)
    several = len(parts(lab)) > 1
    for name, part in by_module.items():
        where = f"part {part}" if several else "the lab"
        print(f"exercises/lab{lab}/{name}.py: {where}")
    if several:
        print(f"lab {lab} has parts {', '.join(parts(lab))}: check one alone with "
              f"`make check-mine LAB={lab} PART=N` (its files only; without PART, every part)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

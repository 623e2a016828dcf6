"""Lines of measurement and figure Python after `ruff format` (`make count-lines`).

Counted: every .py file of bench/ and figures/, and every module of src/minimodel/ that exists
for them: one they import (directly or through another such module) that is not course code.
Course code is the package's entry point (minimodel.attention), each module a lab builds (one
that exercises/ holds a skeleton of) and whatever these import; tests import both kinds and
decide nothing. The files are formatted on a scratch copy with the project's ruff settings; the
working tree is not touched. `-v` lists the files with their counts.
"""

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "minimodel"


def minimodel_imports(path: Path) -> set[Path]:
    """The modules of src/minimodel/ that `path` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "minimodel":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minimodel."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("minimodel.")}
    return {PACKAGE / f"{n}.py" for n in names if (PACKAGE / f"{n}.py").exists()}


def closure(start: set[Path]) -> set[Path]:
    """`start` and every module of the package it imports, directly or not."""
    seen, todo = set(), list(start)
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += [m for m in minimodel_imports(path) if m not in seen]
    return seen


def counted_files() -> list[Path]:
    ours = sorted([*ROOT.glob("bench/*.py"), *ROOT.glob("figures/*.py")])
    labs = {PACKAGE / p.name for p in ROOT.glob("exercises/*/*.py")} & set(PACKAGE.glob("*.py"))
    course = closure({PACKAGE / "attention.py", *labs})
    return ours + sorted(closure(set(ours)) - set(ours) - course)


def main() -> None:
    files = counted_files()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "pyproject.toml", tmp)
        copies = []
        for path in files:
            copy = Path(tmp) / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy)
            copies.append(copy)
        subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", tmp], check=True)
        lines = {
            path: len(copy.read_text().splitlines())
            for path, copy in zip(files, copies, strict=True)
        }
    if "-v" in sys.argv[1:]:
        for path, n in sorted(lines.items(), key=lambda kv: kv[1]):
            print(f"{n:6d} {path.relative_to(ROOT)}")
    outside = [str(p.relative_to(ROOT)) for p in files if p.parent.name == "minimodel"]
    print(
        f"measurement and figure Python, lines after ruff format: {sum(lines.values())} "
        f"(bench/, figures/ and {', '.join(outside) or 'no module elsewhere'})"
    )


if __name__ == "__main__":
    main()

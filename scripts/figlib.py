"""Shared plumbing for the figure and table scripts (scripts/fig_*.py).

Each script computes its outputs (Markdown tables, SVG figures) from the package and from the
committed data under data/, then either writes them or, with --check, fails if any committed file
differs from what it would write. CI runs every script with --check.
"""

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def render_svg(draw: Callable[[Path], None]) -> bytes:
    """Run draw(path) into a temporary .svg file and return its bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.svg"
        draw(path)
        return path.read_bytes()


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def emit(outputs: dict[str, str | bytes], argv: list[str] | None = None) -> None:
    """Write outputs (paths relative to docs/), or with --check compare them and exit 1 on drift."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if committed files are stale")
    args = parser.parse_args(argv)
    stale = []
    for rel, content in outputs.items():
        data = content.encode() if isinstance(content, str) else content
        path = DOCS / rel
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote docs/{rel}")
    if stale:
        print(f"stale generated files (run 'make figures'): {', '.join(stale)}", file=sys.stderr)
        sys.exit(1)

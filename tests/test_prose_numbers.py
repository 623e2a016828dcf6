"""Every number with a unit in the pages' prose is listed in tests/prose_numbers.txt with where it
is checked (issue #26).

Hand-written (not tangled). Scans docs/**/*.md (docs/generated/ excluded: those tables are made
from data/) outside fenced code, display and inline math, inline code, link targets, HTML comments
and `--8<--` includes, for a number followed by a unit of a measured quantity. Each (page,
number) must be in the list; a listed test must exist in tests/test_data_claims.py; an entry no
page says any more fails too, so the list stays the pages' list.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "prose_numbers.txt"
UNIT = (
    r"(?:%|×|x(?!\w)|TB/s|GB/s|TFLOP/s|TFLOPS|µs|us(?!\w)|ms(?!\w)|GB(?![\w/])|GiB|MiB|KiB"
    r"|MB(?![\w/])|KB(?![\w/]))"
)
NUM = r"(?<![\w.\-−/^])[−+-]?\d[\d,]*(?:\.\d+)?"
NUMBER = re.compile(rf"{NUM}(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?[\s\u00a0\u202f]?{UNIT}")
INLINE = [r"`[^`]*`", r"\$[^$]*\$", r"\\\(.*?\\\)", r"<!--.*?-->", r"\]\([^)]*\)"]


def prose_lines(text: str):
    """(line number, line) for the lines outside fenced code, display math and includes."""
    fence = math = False
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if s.startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        if s.startswith("$$"):
            if not (s.count("$$") >= 2 and len(s) > 2):
                math = not math
            continue
        if math or "--8<--" in line:
            continue
        yield n, line


def numbers(text: str):
    """(line number, number with its unit) for each number with a unit in a page's prose."""
    for n, line in prose_lines(text):
        for pattern in INLINE:
            line = re.sub(pattern, "]" if pattern.startswith(r"\]") else "", line)
        for m in NUMBER.finditer(line):
            yield n, " ".join(m.group(0).replace("\u00a0", " ").replace("\u202f", " ").split())


def listed() -> dict[tuple[str, str], str]:
    rows = [ln.split("\t") for ln in LIST.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(len(r) == 3 for r in rows), "each line: page, number, class, tab-separated"
    return {(p, t): c for p, t, c in rows}


def found() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").as_posix()
        if rel.startswith("generated/"):
            continue
        for n, token in numbers(page.read_text()):
            out.setdefault((rel, token), n)
    return out


def test_every_number_with_a_unit_is_listed():
    allow, seen = listed(), found()
    missing = [f"docs/{p}:{n}: {t}" for (p, t), n in seen.items() if (p, t) not in allow]
    assert not missing, (
        "numbers with units in prose that tests/prose_numbers.txt does not list (add each with "
        "the test that checks it, or model/source):\n" + "\n".join(missing)
    )


def test_no_stale_entries():
    seen = found()
    stale = [f"{p}\t{t}" for (p, t) in listed() if (p, t) not in seen]
    assert not stale, "listed but no page says them any more:\n" + "\n".join(stale)


def test_classes_are_known():
    claims = (ROOT / "tests" / "test_data_claims.py").read_text()
    tests = set(re.findall(r"^def (test_\w+)", claims, re.M))
    bad = [
        f"{p}\t{t}\t{c}"
        for (p, t), c in listed().items()
        if c not in {"model", "source"} and not set(c.split(",")) <= tests
    ]
    assert not bad, (
        "class is neither model/source nor tests (comma-separated) in test_data_claims.py "
        "(a measured number that no test recomputes is not allowed):\n" + "\n".join(bad)
    )


def test_lint_catches_a_new_number():
    """The scan sees a number in prose and ignores the same number in code, math and includes."""
    page = (
        "Flash reaches 512 TFLOP/s and 0.97x of SDPA.\n```\n9 GB\n```\n$$\n3 ms\n$$\n"
        "`4 %` \\(5%\\)\n--8<-- 6 GiB\n"
    )
    assert [t for _, t in numbers(page)] == ["512 TFLOP/s", "0.97x"]

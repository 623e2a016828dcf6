"""Every number with a unit in the pages' prose is listed in tests/prose_numbers.txt with where it
is checked (issue #26).

Hand-written (not tangled). Scans docs/**/*.md (docs/generated/ excluded: those tables are made
from data/) outside fenced code, display and inline math, inline code, link targets, HTML comments
and `--8<--` includes, for a number followed by a unit of a measured quantity. Each (page,
number) must be in the list; a listed test must exist in tests/test_data_claims.py; an entry no
page says any more fails too, so the list stays the pages' list.

The Spanish edition (docs/es/) is scanned the same way for numbers written the Spanish way
(decimal comma, groups of three split by a narrow no-break space, "94 %": the convention on the
Spanish Foundations page). Each (Spanish page, number) is listed in tests/prose_numbers.es.txt
with the English page and number it translates, which must be an entry of prose_numbers.txt
(and so checked where the English number is) and have the same value and unit. A number in
Spanish prose written the English way ("0.95x", "4,274 GB") fails.
"""

import re
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "prose_numbers.txt"
LIST_ES = ROOT / "tests" / "prose_numbers.es.txt"
UNIT = (
    r"(?:%|×|x(?!\w)|TB/s|GB/s|TFLOP/s|TFLOPS|µs|us(?!\w)|ms(?!\w)|GB(?![\w/])|GiB|MiB|KiB"
    r"|MB(?![\w/])|KB(?![\w/]))"
)
NUM = r"(?<![\w.\-−/^])[−+-]?\d[\d,]*(?:\.\d+)?"
NUMBER = re.compile(rf"{NUM}(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?[\s\u00a0\u202f]?{UNIT}")
# Spanish: a decimal comma, and groups of three split by U+202F (or U+00A0), never by . or ,
NUM_ES_BODY = r"[−+-]?(?:\d{1,3}(?:[\u202f\u00a0]\d{3})+|\d+)(?:,\d+)?"
NUMBER_ES = re.compile(rf"(?<![\w.,\-−/^]){NUM_ES_BODY}(?:\s?[-–]\s?{NUM_ES_BODY})?"
                       rf"[\s\u00a0\u202f]?{UNIT}")
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


def numbers(text: str, pattern: re.Pattern = NUMBER):
    """(line number, number with its unit) for each number with a unit in a page's prose."""
    for n, line in prose_lines(text):
        for inline in INLINE:
            line = re.sub(inline, "]" if inline.startswith(r"\]") else "", line)
        for m in pattern.finditer(line):
            yield n, " ".join(m.group(0).replace("\u00a0", " ").replace("\u202f", " ").split())


def listed() -> dict[tuple[str, str], str]:
    rows = [ln.split("\t") for ln in LIST.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(len(r) == 3 for r in rows), "each line: page, number, class, tab-separated"
    return {(p, t): c for p, t, c in rows}


def found() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").as_posix()
        if rel.startswith(("generated/", "es/")):
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


# The Spanish edition


def value(token: str, *, spanish: bool) -> tuple[tuple[Decimal, ...], str]:
    """A number with its unit as (values, unit): "4 274 GB" (Spanish) and "4,274 GB" (English)
    are both ((4274,), "GB"); a range gives two values."""
    unit = re.search(rf"{UNIT}$", token).group(0)
    numbers = token[: -len(unit)].strip()
    if spanish:
        numbers = re.sub(r"(?<=\d) (?=\d{3}\b)", "", numbers).replace(",", ".")
    else:
        numbers = numbers.replace(",", "")
    parts = re.findall(r"[−+-]?\d+(?:\.\d+)?", numbers.replace(" ", ""))
    return tuple(Decimal(p.replace("−", "-")) for p in parts), unit


def listed_es() -> dict[tuple[str, str], tuple[str, str]]:
    rows = [ln.split("\t") for ln in LIST_ES.read_text().splitlines()
            if ln and not ln.startswith("#")]
    assert all(len(r) == 4 for r in rows), (
        "each line: Spanish page, number, English page, number, tab-separated")
    return {(p, t): (ep, et) for p, t, ep, et in rows}


def found_es() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for page in sorted((ROOT / "docs" / "es").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").as_posix()
        for n, token in numbers(page.read_text(), NUMBER_ES):
            out.setdefault((rel, token), n)
    return out


def test_every_spanish_number_translates_a_listed_english_one():
    allow, seen, english = listed_es(), found_es(), listed()
    missing = [f"docs/{p}:{n}: {t}" for (p, t), n in seen.items() if (p, t) not in allow]
    assert not missing, (
        "numbers with units in Spanish prose that tests/prose_numbers.es.txt does not list (add "
        "each with the English page and number it translates):\n" + "\n".join(missing))
    stale = [f"{p}\t{t}" for (p, t) in allow if (p, t) not in seen]
    assert not stale, "listed but no Spanish page says them any more:\n" + "\n".join(stale)
    bad = []
    for (page, token), (en_page, en_token) in allow.items():
        if (en_page, en_token) not in english:
            bad.append(f"{page}\t{token}: {en_page}\t{en_token} is not in prose_numbers.txt")
        elif page != f"es/{en_page}":
            bad.append(f"{page}\t{token}: translates {en_page}, not its own English page")
        elif value(token, spanish=True) != value(en_token, spanish=False):
            bad.append(f"{page}\t{token}: not the value of {en_page}'s {en_token}")
    assert not bad, "\n".join(bad)


# A number written the English way: a decimal point, or a thousands group after a leading group
# of one to three digits that is not 0 (so "0,145 ms", a Spanish decimal, is not one).
ENGLISH_WAY = re.compile(r"\d\.\d|(?<![\d,])[1-9]\d{0,2},\d{3}(?!\d)")


def test_no_english_number_in_spanish_prose():
    """"0.95x" or "4,274 GB" in Spanish prose: a Spanish reader takes the second for 4.274."""
    bad = []
    for page in sorted((ROOT / "docs" / "es").rglob("*.md")):
        for n, token in numbers(page.read_text()):
            if ENGLISH_WAY.search(token):
                bad.append(f"{page.relative_to(ROOT)}:{n}: {token}")
    assert not bad, "numbers in Spanish prose written the English way:\n" + "\n".join(bad)


def test_the_english_way_is_told_from_spanish_decimals():
    assert [bool(ENGLISH_WAY.search(t)) for t in ("4,274 GB", "0.95x", "12,500 µs")] == [True] * 3
    assert [bool(ENGLISH_WAY.search(t)) for t in ("0,145 ms", "0,95x", "4274 GB", "1,5 %")] == [
        False] * 4


def test_spanish_scan_reads_the_spanish_format():
    page = ("Llega a 0,95x de SDPA, al 94 % y a 65\u202f536 GB, no 12.5 MiB.\n```\n9 GB\n```\n"
            "`4 %` \\(5 %\\)\n")
    assert [t for _, t in numbers(page, NUMBER_ES)] == ["0,95x", "94 %", "65 536 GB"]
    assert value("65 536 GB", spanish=True) == value("65,536 GB", spanish=False)
    assert value("0,95x", spanish=True) == value("0.95x", spanish=False)
    assert value("4,274 GB", spanish=True) != value("4,274 GB", spanish=False)
    assert value("94 %", spanish=True) == value("94%", spanish=False)

"""Every lab page opens with the time it takes and what to know before it (issue #26).

Hand-written (not tangled). The paragraph right after a lab's title has one form on every page:
``**Time:** about N hours[ ...]. **Read first:** <links>. **You need:** <what>.``, so a reader
can tell from the first lines whether to start it now. The pages it names must exist.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "docs" / "lab").glob("*.md"))
HEADER = re.compile(
    r"^\*\*Time:\*\* about (?P<hours>\d+) hours\b[^*]*\. "
    r"\*\*Read first:\*\* (?P<read>.+?)\. "
    r"\*\*You need:\*\* (?P<need>.+)$",
    re.S,
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def opening(page: Path) -> str:
    """The first paragraph after the page's title, its lines joined by spaces."""
    lines = page.read_text().split("\n")
    assert lines[0].startswith("# ") and lines[1] == "", f"{page.name}: a title, then a blank line"
    para = []
    for line in lines[2:]:
        if not line.strip():
            break
        para.append(line.strip())
    return " ".join(para)


def test_every_lab_page_is_checked():
    names = {p.stem for p in LABS}
    assert {"00-online-softmax", "02-flash-triton", "03b-paged-kernels", "04-mqa-gqa"} <= names
    assert len(LABS) == 9, sorted(names)  # 00, 01, 01b, 02, 02b, 03, 03b, 04, 05


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.stem)
def test_lab_opens_with_time_and_prerequisites(page):
    text = opening(page)
    m = HEADER.match(text)
    assert m, (
        f"docs/lab/{page.name} must open (after its title) with '**Time:** about N hours. "
        f"**Read first:** <links>. **You need:** <what>.', not: {text[:160]!r}"
    )
    assert 1 <= int(m["hours"]) <= 12, f"{page.name}: {m['hours']} hours"
    targets = LINK.findall(m["read"])
    assert targets, f"{page.name}: 'Read first' names no page as a link"
    for target in LINK.findall(text):
        assert (page.parent / target).resolve().is_file(), f"{page.name}: {target} is no page"
    assert len(m["need"]) > 10, f"{page.name}: 'You need' says nothing"


def test_the_check_refuses_a_page_without_them():
    assert not HEADER.match("Labs 00 and 01 hold no Triton; Lab 02 writes a whole kernel.")
    assert not HEADER.match("**Time:** a while. **Read first:** [T](t.md). **You need:** Python.")

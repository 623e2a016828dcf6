"""Links into vLLM v0.10.2 from the pages name a listed file and a line range inside it (issue #26).

Hand-written (not tangled); offline. Every link to github.com/vllm-project/vllm/blob/v0.10.2/
must name a path in tests/vllm-v0.10.2-files.txt, carry a #L<a> or #L<a>-L<b> fragment with
a <= b that agrees with the range its text shows, and, where the list gives the file's line count,
end inside the file (every file has its count but the one the wheel the counts come from lacks).
A `file.py:L12-34` reference left as plain text fails too, unless it names a file outside v0.10.2
(ALLOWED_TEXT), and so does a bare `L12-34` that leaves the reader to guess its file.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "vllm-v0.10.2-files.txt"
LINK = re.compile(
    r"\[`([^`]+?):L(\d+)(?:-L?(\d+))?`\]"
    r"\(https://github\.com/vllm-project/vllm/blob/v0\.10\.2/([^)#]+)#L(\d+)(?:-L(\d+))?\)"
)
ANY_LINK = re.compile(r"https://github\.com/vllm-project/vllm/blob/v0\.10\.2/[^)\s]*")
TEXT_REF = re.compile(r"(?<!\[)`([A-Za-z0-9_/.-]+\.py):L\d+(?:-L?\d+)?`")
BARE_REF = re.compile(r"`L\d+(?:-L?\d+)?`")
# files the pages cite from another release (the 0.6.2 archive), so not linked to v0.10.2
ALLOWED_TEXT = {"vllm/core/block_manager_v1.py"}
# files the line counts could not be pinned to v0.10.2 for (the PyPI wheel holds no tests/)
NO_COUNT = {"tests/core/block/test_block_manager.py"}


def files() -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for line in LIST.read_text().splitlines():
        if line and not line.startswith("#"):
            path, count = line.split("\t")
            out[path] = None if count == "-" else int(count)
    return out


def pages():
    for page in sorted((ROOT / "docs").rglob("*.md")):
        yield page.relative_to(ROOT).as_posix(), page.read_text()


def test_links_name_listed_files_and_ranges_inside_them():
    known, bad, n = files(), [], 0
    for rel, text in pages():
        links = list(LINK.finditer(text))
        if len(links) != len(ANY_LINK.findall(text)):
            bad.append(f"{rel}: a v0.10.2 link not of the form [`file:La-b`](.../path#La-Lb)")
        for m in links:
            n += 1
            shown, a, b, path = (
                m.group(1),
                int(m.group(2)),
                int(m.group(3) or m.group(2)),
                m.group(4),
            )
            fa, fb = int(m.group(5)), int(m.group(6) or m.group(5))
            where = f"{rel}: {m.group(0)[:120]}"
            if path not in known:
                bad.append(f"{where}: {path} is not in {LIST.name}")
            if not path.endswith(shown):
                bad.append(f"{where}: the text names {shown}, the link {path}")
            if (a, b) != (fa, fb) or a > b or (m.group(3) is None) != (m.group(6) is None):
                bad.append(f"{where}: the text's range and the link's differ or are reversed")
            count = known.get(path)
            if count is not None and b > count:
                bad.append(f"{where}: L{b} is past the end of {path} ({count} lines at v0.10.2)")
    assert n > 0
    assert not bad, "\n".join(bad)


def test_no_reference_left_as_text():
    left = [
        f"{rel}: {m.group(0)}"
        for rel, text in pages()
        for m in TEXT_REF.finditer(text)
        if m.group(1) not in ALLOWED_TEXT
    ]
    left += [
        f"{rel}: {m.group(0)} (which file?)"
        for rel, text in pages()
        for m in BARE_REF.finditer(text)
    ]
    assert not left, "vLLM references that are not links:\n" + "\n".join(left)


def test_every_file_has_its_line_count():
    missing = sorted(path for path, count in files().items() if count is None)
    assert missing == sorted(NO_COUNT), missing


def test_every_listed_file_is_linked():
    linked = {m.group(4) for _, text in pages() for m in LINK.finditer(text)}
    assert set(files()) == linked

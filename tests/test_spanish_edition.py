"""The Spanish edition (docs/es/, issue 29): one source of code, and no stale translation.

Hand-written (not tangled). docs/es/ mirrors docs/ page for page (mkdocs-static-i18n's folder
structure); the English pages are the only entangled sources (entangled.toml's ignore_list). So:
  - every Spanish page translates an English page at the same path under docs/;
  - its fenced code blocks are the English page's, in the same order, byte for byte (fences,
    attributes and indentation included): code, comments and messages stay English, and a block
    edited on one side alone fails here;
  - its front matter records, as `en_blob`, the git blob hash (`git hash-object docs/<page>`) of
    the English page it translates; when the English page changes, this fails until the
    translation is brought up to date and the hash recorded again;
  - entangled never reads a Spanish page (a code block changed there tangles nothing).
"""

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ES = DOCS / "es"
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def spanish_pages() -> list[Path]:
    return sorted(ES.rglob("*.md"))


def english_of(page: Path) -> Path:
    return DOCS / page.relative_to(ES)


def blob(data: bytes) -> str:
    """What `git hash-object` prints for a file with these bytes (no filters are configured)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def recorded_blob(text: str) -> str | None:
    m = FRONT.match(text)
    if not m:
        return None
    fields = dict(line.split(":", 1) for line in m.group(1).splitlines() if ":" in line)
    value = fields.get("en_blob", "").strip()
    return value or None


def code_blocks(text: str) -> list[str]:
    """Every fenced code block of a page, fence lines included, in order. A fence closes on a
    line of the same character, at least as long, and nothing else (CommonMark)."""
    blocks, lines, open_at, opener = [], text.split("\n"), None, ""
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if open_at is None:
            if m:
                open_at, opener = i, m.group(2)
        elif m and m.group(2)[0] == opener[0] and len(m.group(2)) >= len(opener) \
                and not line[m.end():].strip():
            blocks.append("\n".join(lines[open_at:i + 1]))
            open_at = None
    assert open_at is None, f"a code block opened on line {open_at + 1} never closes"
    return blocks


def code_differences(english: str, spanish: str) -> list[str]:
    """Where the two pages' code blocks differ: empty when they are the same, in order."""
    en, es = code_blocks(english), code_blocks(spanish)
    out = []
    for n, (a, b) in enumerate(zip(en, es, strict=False), 1):
        if a != b:
            first = next((x, y) for x, y in zip(a.split("\n") + [""], b.split("\n") + [""],
                                               strict=False) if x != y)
            out.append(f"block {n}: English {first[0]!r} / Spanish {first[1]!r}")
    if len(en) != len(es):
        out.append(f"{len(en)} code blocks in English, {len(es)} in Spanish")
    return out


def test_every_english_page_has_a_spanish_page():
    english = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
               if not p.is_relative_to(ES) and not p.is_relative_to(DOCS / "generated")
               and not p.is_relative_to(DOCS / "assets")}
    spanish = {p.relative_to(ES).as_posix() for p in spanish_pages()}
    assert {"index.md", "foundations.md", "lab/03b-paged-kernels.md"} <= english
    assert not english - spanish, (
        f"English pages with no Spanish page: {sorted(english - spanish)} (translate each into "
        "docs/es/, its code blocks filled by scripts/es_sync.py, then --stamp)")


@pytest.mark.parametrize("page", spanish_pages(), ids=lambda p: p.relative_to(ES).as_posix())
def test_translates_an_english_page(page):
    assert english_of(page).exists(), (
        f"{page.relative_to(ROOT)} has no English page at {english_of(page).relative_to(ROOT)}: "
        "docs/es/ mirrors docs/")


@pytest.mark.parametrize("page", spanish_pages(), ids=lambda p: p.relative_to(ES).as_posix())
def test_code_blocks_are_the_english_bytes(page):
    problems = code_differences(english_of(page).read_text(), page.read_text())
    assert not problems, (
        f"{page.relative_to(ROOT)}: its code blocks must be {english_of(page).relative_to(ROOT)}'s,"
        " in order, byte for byte (edit the English page, then copy the block):\n"
        + "\n".join(problems))


@pytest.mark.parametrize("page", spanish_pages(), ids=lambda p: p.relative_to(ES).as_posix())
def test_translation_is_of_the_current_english_page(page):
    english = english_of(page)
    recorded, current = recorded_blob(page.read_text()), blob(english.read_bytes())
    assert recorded, f"{page.relative_to(ROOT)}: no `en_blob:` in its front matter"
    assert recorded == current, (
        f"{english.relative_to(ROOT)} changed since {page.relative_to(ROOT)} translated it "
        f"(en_blob {recorded}, now {current}). See what changed with `git diff {recorded} "
        f"$(git hash-object -w {english.relative_to(ROOT)})`, bring the translation up to date, "
        f"then record `en_blob: {current}`.")


def test_blob_is_git_hash_object():
    if shutil.which("git") is None:
        pytest.skip("no git here")
    page = DOCS / "index.md"
    out = subprocess.run(["git", "hash-object", str(page)], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode != 0:
        pytest.skip(f"git hash-object failed: {out.stderr.strip()}")
    assert out.stdout.strip() == blob(page.read_bytes())


def test_the_checks_fail_when_one_side_alone_changes():
    page = ES / "foundations.md"
    english, spanish = english_of(page).read_text(), page.read_text()
    assert code_blocks(english) and not code_differences(english, spanish)
    first = code_blocks(english)[0]
    edited = first.replace("\n", "\n# an edit on one side\n", 1)
    # a code block edited on the English side alone, or on the Spanish side alone
    assert code_differences(english.replace(first, edited, 1), spanish)
    assert code_differences(english, spanish.replace(first, edited, 1))
    # a block dropped from one side, or its attributes changed
    assert code_differences(english, spanish.replace(first, "", 1))
    opening = first.split("\n")[0]
    assert code_differences(english, spanish.replace(opening, opening.replace("#", "#x", 1), 1))
    # any English edit, prose included, makes the recorded blob stale
    assert blob((english + "\n").encode()) != recorded_blob(spanish)
    assert blob(english.encode()) == recorded_blob(spanish)


def test_code_blocks_sees_every_fence():
    text = "a\n```python\nx = 1\n```\n\n    ~~~~\n    ```\n    ~~~~\n```` {.c #y}\n```\n````\n"
    assert code_blocks(text) == ["```python\nx = 1\n```", "    ~~~~\n    ```\n    ~~~~",
                                 "```` {.c #y}\n```\n````"]


def test_entangled_never_reads_a_spanish_page(tmp_path):
    """A Spanish code block changed alone tangles nothing: entangled's own input list leaves every
    page under docs/es/ out, for the commands that glob (sync, watch) and those that match
    (tangle, stitch); and a fresh tangle with such a page gives the committed files."""
    pytest.importorskip("entangled")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("assets"))
    shutil.copy(ROOT / "entangled.toml", tmp_path)
    for page in (tmp_path / "docs/es").rglob("*.md"):
        page.write_text(page.read_text().replace('raise ValueError(f"', 'raise ValueError(f"ES '))
    (tmp_path / "docs/es/lab").mkdir(exist_ok=True)  # a page one folder down, too
    (tmp_path / "docs/es/lab/x.md").write_text("``` {.python file=src/es.py}\nx = 1\n```\n")
    script = (
        "import sys; from entangled.config import config; config.read()\n"
        "from entangled.commands.tangle import get_input_files\n"
        "from entangled.status import list_input_files\n"
        "for f in (get_input_files, list_input_files):\n"
        "    print(f.__name__, sorted(str(p) for p in f()))\n"
        "from entangled.main import cli; sys.argv = ['entangled', 'tangle']; cli()\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    listed = out.stdout.splitlines()[:2]
    assert all("docs/index.md" in line and "docs/es/" not in line for line in listed), listed
    assert not (tmp_path / "src/es.py").exists()
    for rel in ("src/minimodel/reference.py", "src/minimodel/verbs.py", "tests/test_reference.py"):
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


TABLE_NOTE = '!!! note "Tablas en formato inglés"'


@pytest.mark.parametrize("page", spanish_pages(), ids=lambda p: p.relative_to(ES).as_posix())
def test_generated_tables_carry_the_format_note(page):
    """Generated tables stay English-formatted (4,274 is four thousand; Foundations' glossary
    says so): a Spanish page that includes one says it in a note with this title."""
    text = page.read_text()
    if '--8<-- "generated/' in text:
        assert TABLE_NOTE in text, (
            f"{page.relative_to(ROOT)} includes generated tables: add the note\n{TABLE_NOTE}\n"
            "    Las tablas generadas de esta página usan el formato numérico inglés: punto "
            "decimal y coma de millares.")


# English left in Spanish prose: a run of eight or more words, with no punctuation between them,
# that holds at least two of these English function words (Spanish prose has none of them, bar
# the field's English terms, which never come in such runs). Outside code, math, tables, link
# targets, HTML, quotations and bold text (the references' titles, cited in their language).
ENGLISH = set("the of and to is in with for that on by as are it from be this an not which its "
              "at or each one".split())
RUN = re.compile(r"(?:[A-Za-z][A-Za-z'’-]*\s+){7,}[A-Za-z][A-Za-z'’-]*")


def english_runs(text: str) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_prose_numbers import INLINE, prose_lines

    body = FRONT.sub("", text)
    prose = " ".join(line for _, line in prose_lines(body) if not line.lstrip().startswith("|"))
    for pattern in [*INLINE, r"\*\*.*?\*\*", r"<[^>]*>", r"«[^»]*»", r'"[^"]*"', r"\{[^}]*\}"]:
        prose = re.sub(pattern, " , ", prose)
    return [m.group(0) for m in RUN.finditer(prose)
            if sum(w.lower() in ENGLISH for w in m.group(0).split()) >= 2]


@pytest.mark.parametrize("page", spanish_pages(), ids=lambda p: p.relative_to(ES).as_posix())
def test_no_english_sentence_left(page):
    runs = english_runs(page.read_text())
    assert not runs, f"{page.relative_to(ROOT)}: English prose left untranslated:\n" + "\n".join(
        runs)


def test_english_runs_are_seen():
    english = english_runs((DOCS / "index.md").read_text())
    assert any("They differ in what they pay for it" in r for r in english), english[:3]
    assert not english_runs("El kernel lee el KV cache en cada paso de decode, tile a tile.\n"
                            "`the kernel reads the cache once for each of the tiles`\n")

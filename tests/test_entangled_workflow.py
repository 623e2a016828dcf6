"""Tests of the literate workflow itself (hand-written): on a fresh clone whose entangled
database was built as `make setup` builds it, `entangled sync` carries a page edit into the
package and a package edit back into its page, refuses an edit made on both sides without losing
either, and every way of tangling gives the bytes the tangle check expects. `entangled watch`
does the same while it runs."""

import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, needs_entangled, run_in

pytestmark = needs_entangled

PAGE = "docs/foundations.md"
BLOCK = "verbs-corpus"  # a block of PAGE that tangles into MODULE
MODULE = "src/minimodel/verbs.py"
PAGE_EDIT = "# an edit made on the page"
CODE_EDIT = "# an edit made in the tangled file"


def entangled(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run entangled in `repo`; its log (it exits 0 even on errors, so tests read the log)."""
    result = run_in(repo, "entangled", *args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def build_db(repo: Path) -> None:
    """What `make setup` does on a fresh clone (the Makefile's $(DB) recipe)."""
    log = entangled(repo, "tangle", "--reset-db")
    assert "WARNING" not in log and "ERROR" not in log, log
    assert (repo / ".entangled/filedb.json").exists()


def edit_page(repo: Path) -> None:
    """Add a line at the top of BLOCK on PAGE."""
    page = repo / PAGE
    opening = f"``` {{.python #{BLOCK}}}\n"
    text = page.read_text()
    assert text.count(opening) == 1
    page.write_text(text.replace(opening, opening + PAGE_EDIT + "\n"))


def edit_module(repo: Path) -> None:
    """Add a line at the top of BLOCK in the tangled MODULE, under its begin marker."""
    module = repo / MODULE
    lines = module.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if f"#{BLOCK}>>" in line and "begin" in line)
    lines.insert(at + 1, CODE_EDIT + "\n")
    module.write_text("".join(lines))
    time.sleep(0.05)  # entangled tells a code edit from a page edit by modification times


def check(repo: Path) -> None:
    result = run_in(repo, "bash", "scripts/check_tangle.sh")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_fresh_database_matches_the_committed_tree(repo):
    build_db(repo)
    log = entangled(repo, "sync")
    assert "ERROR" not in log and "WARNING" not in log, log
    changed = run_in(repo, "git", "status", "--porcelain")
    assert changed.stdout == ""


def test_a_page_edit_reaches_the_package_and_the_check_passes(repo):
    build_db(repo)
    edit_page(repo)
    log = entangled(repo, "sync")
    assert "ERROR" not in log and "WARNING" not in log, log
    module = (repo / MODULE).read_text()
    assert PAGE_EDIT in module and module.endswith("\n") and not module.endswith("\n\n")
    check(repo)  # the check creates every file afresh: rewriting gave the same bytes


def test_a_package_edit_is_stitched_into_its_page_and_the_check_passes(repo):
    build_db(repo)
    edit_module(repo)
    edited = (repo / MODULE).read_bytes()
    log = entangled(repo, "sync")
    assert "ERROR" not in log and "WARNING" not in log, log
    assert CODE_EDIT in (repo / PAGE).read_text()
    assert (repo / MODULE).read_bytes() == edited
    check(repo)


def test_an_edit_on_both_sides_is_refused_and_neither_is_lost(repo):
    build_db(repo)
    edit_page(repo)
    edit_module(repo)
    log = entangled(repo, "sync")
    assert "Both markdown and code seem to have changed" in log, log
    assert PAGE_EDIT in (repo / PAGE).read_text() and PAGE_EDIT not in (repo / MODULE).read_text()
    assert CODE_EDIT in (repo / MODULE).read_text() and CODE_EDIT not in (repo / PAGE).read_text()


# A block shared by the package and a lab's skeleton (the task's interface text).
SHARED_PAGE = "docs/lab/00-online-softmax.md"
SHARED_BLOCK = "online-softmax-rescale-factor-interface"
SHARED_MODULE = "src/minimodel/online_softmax.py"
SHARED_SKELETON = "exercises/lab00/online_softmax.py"


def test_a_shared_block_edit_reaches_its_page_under_every_hash_seed(repo):
    """Stitch once read every copy of a block in set order (set by PYTHONHASHSEED), and the
    untouched skeleton undid the edit under some seeds. Each seed starts from a fresh database."""
    for seed in range(8):
        run_in(repo, "git", "checkout", "-q", "--", ".")
        build_db(repo)
        edit = f"# an edit of the package under PYTHONHASHSEED={seed}"
        module = repo / SHARED_MODULE
        lines = module.read_text().splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines)
                  if f"#{SHARED_BLOCK}>>" in line and "begin" in line)
        lines.insert(at + 1, edit + "\n")
        module.write_text("".join(lines))
        time.sleep(0.05)
        log = entangled(repo, "sync", env={"PYTHONHASHSEED": str(seed)})
        assert "ERROR" not in log and "WARNING" not in log, f"seed {seed}: {log}"
        assert edit in (repo / SHARED_PAGE).read_text(), f"seed {seed}: the edit was lost\n{log}"
        assert edit in (repo / SHARED_SKELETON).read_text(), f"seed {seed}: skeleton not rewritten"
        assert edit in module.read_text()
        check(repo)


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_watch_tangles_page_edits_and_stitches_code_edits(repo):
    build_db(repo)
    watcher = subprocess.Popen([str(BIN / "entangled"), "watch"], cwd=repo,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # the first sync, then the observer starts
        edit_page(repo)
        assert wait_for(lambda: PAGE_EDIT in (repo / MODULE).read_text()), "page edit not tangled"
        time.sleep(1)
        edit_module(repo)
        assert wait_for(lambda: CODE_EDIT in (repo / PAGE).read_text()), "code edit not stitched"
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
    time.sleep(0.5)
    check(repo)


@pytest.mark.parametrize("target", ["tangle", "stitch", "sync", "dev", "db"])
def test_the_make_targets_call_entangled_itself(target):
    """The make targets are shortcuts for entangled's commands (no wrapper of our own)."""
    root = Path(__file__).resolve().parents[1]
    dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=root,
                         capture_output=True, text=True)
    recipe = dry.stdout
    assert "/entangled " in recipe, recipe
    assert "scripts/tangle.py" not in recipe

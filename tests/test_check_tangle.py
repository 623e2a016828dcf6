"""Tests of scripts/check_tangle.sh itself (hand-written): it must pass on the repository as
committed, fail on each kind of drift between docs/ and the tangled code, and change nothing."""

from pathlib import Path

from conftest import commit_all, needs_entangled, run_in

pytestmark = needs_entangled


def run_check(repo):
    return run_in(repo, "bash", "scripts/check_tangle.sh")


def snapshot(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*")
            if p.is_file() and ".git" not in p.parts}


def test_passes_on_the_committed_tree_and_modifies_nothing(repo):
    before = snapshot(repo)
    result = run_check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_tangle: OK" in result.stdout
    assert snapshot(repo) == before


def test_fails_when_a_tangled_file_is_edited_by_hand(repo):
    path = repo / "src/minimodel/reference.py"
    path.write_text(path.read_text().replace("return mask", "return ~mask"))
    result = run_check(repo)
    assert result.returncode == 1
    assert "src/minimodel/reference.py differs" in result.stdout


def test_fails_when_a_page_changes_without_retangling(repo):
    page = repo / "docs/foundations.md"
    page.write_text(page.read_text().replace("VERB_SEQUENCE_LEN = 64", "VERB_SEQUENCE_LEN = 65"))
    commit_all(repo)
    result = run_check(repo)
    assert result.returncode == 1
    assert "src/minimodel/verbs.py differs" in result.stdout


def test_fails_on_a_missing_reference(repo):
    page = repo / "docs/foundations.md"
    page.write_text(page.read_text().replace("<<verbs-tokenizer>>", "<<verbs-tokeniser>>"))
    result = run_check(repo)
    assert result.returncode == 1
    assert "verbs-tokeniser" in result.stdout


def test_fails_on_a_committed_file_no_page_produces(repo):
    (repo / "src/minimodel/stray.py").write_text("x = 1\n")
    commit_all(repo)
    result = run_check(repo)
    assert result.returncode == 1
    assert "src/minimodel/stray.py is committed but produced by no page" in result.stdout

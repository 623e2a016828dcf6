"""Tests of scripts/check_tangle.sh itself (hand-written): it must pass on the repository as
committed, fail on each kind of drift between docs/ and the tangled code, and change nothing."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the environment's bin/, with python and entangled
pytestmark = pytest.mark.skipif(not (BIN / "entangled").exists(),
                                reason="entangled is not installed in this environment")


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory):
    """A git repository holding the project's docs, tangled code and the check, committed."""
    repo = tmp_path_factory.mktemp("repo")
    listed = subprocess.run(  # tracked files plus new ones git does not ignore
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "docs", "src", "tests",
         "scripts", "entangled.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in listed.stdout.split():
        if (ROOT / rel).exists():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, repo / rel)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=repo, check=True)
    return repo


@pytest.fixture
def repo(clean_copy, tmp_path):
    """A fresh clone of the clean copy for each test, so tests can break it freely."""
    dest = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(clean_copy), str(dest)], check=True)
    return dest


def run_check(repo: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["bash", "scripts/check_tangle.sh"], cwd=repo, env=env,
                          capture_output=True, text=True)


def snapshot(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*")
            if p.is_file() and ".git" not in p.parts}


def commit_all(repo: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "change"], cwd=repo, check=True)


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

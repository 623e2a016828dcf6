"""Test-session setup (hand-written, not tangled).

On a machine without CUDA the Triton kernels run in Triton's interpreter, which must be chosen
before `triton` is first imported; tests marked `gpu` are skipped there, with the reason.

The fixtures at the end give the tests of the repository's own workflow (the tangle check,
entangled sync/watch) a throw-away git repository holding the project's files.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- a scratch copy of the repository, for the workflow tests --------------------------------

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the environment's bin/, with python and entangled
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
needs_entangled = pytest.mark.skipif(not (BIN / "entangled").exists(),
                                     reason="entangled is not installed in this environment")


@pytest.fixture(scope="session")
def clean_copy(tmp_path_factory):
    """A git repository holding the project's pages, tangled code and scripts, committed."""
    repo = tmp_path_factory.mktemp("repo")
    listed = subprocess.run(  # tracked files plus new ones git does not ignore
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "docs", "src", "tests",
         "exercises", "scripts", "entangled.toml"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in listed.stdout.split():
        if (ROOT / rel).exists():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, repo / rel)
    (repo / ".gitignore").write_text("/.entangled/\n__pycache__/\n")
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "copy"], cwd=repo, check=True)
    return repo


@pytest.fixture
def repo(clean_copy, tmp_path):
    """A fresh clone of the clean copy for each test, so tests can break it freely."""
    dest = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(clean_copy), str(dest)], check=True)
    return dest


def run_in(repo: Path, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a command in `repo` with this environment's bin/ first on PATH."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(repo), "COLUMNS": "200"}
    return subprocess.run(list(cmd), cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def commit_all(repo: Path) -> None:
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "change"], cwd=repo, check=True)

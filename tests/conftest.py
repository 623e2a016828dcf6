"""Test-session setup (hand-written, not tangled).

On a machine without CUDA the Triton kernels run in Triton's interpreter, which must be chosen
before `triton` is first imported; tests marked `gpu` are skipped there, with the reason.

The labs are exercises. `pytest --lab 02` runs only Lab 02's own tests (marked `lab("02")`), and
`--mywork DIR` makes each `DIR/<module>.py` stand in for `minimodel.<module>`, so a learner's
code meets exactly the tests CI runs on the solution (`make check-mine LAB=02`). Modules with no
file in DIR stay the solution's. A skeleton's NotImplementedError is reported as "not written
yet", not as a crash.

The fixtures at the end give the tests of the repository's own workflow (the tangle check,
entangled sync/watch) a throw-away git repository holding the project's files.
"""

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# Property tests: CI draws the same examples on every run (derandomised); elsewhere a failure
# prints the blob that replays it (`@reproduce_failure`).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


ROOT = Path(__file__).resolve().parents[1]
NOT_WRITTEN = "not written yet"


def pytest_addoption(parser):
    parser.addoption("--lab", metavar="NN", help="run only this lab's own tests (e.g. 02)")
    parser.addoption("--mywork", metavar="DIR",
                     help="DIR/<module>.py stands in for minimodel.<module> (make check-mine)")


def pytest_configure(config):
    mywork = config.getoption("--mywork")
    config.stash[MYWORK] = use_mywork(Path(mywork)) if mywork else []


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--mywork") is not None:  # said last, so that it shows even with -q
        terminalreporter.write_sep("-", "whose code ran")
        for line in config.stash[MYWORK]:
            terminalreporter.write_line(line)


def pytest_ignore_collect(collection_path, config):
    """With --lab, only the lab's own test files are imported: the other files may reach into
    the solution's internals, which a learner's module need not have."""
    lab = config.getoption("--lab")
    if lab is None or collection_path.suffix != ".py" or collection_path.name == "conftest.py":
        return None
    return f'pytest.mark.lab("{lab.zfill(2)}")' not in collection_path.read_text()


def pytest_collection_modifyitems(config, items):
    lab = config.getoption("--lab")
    if lab is not None:
        lab = lab.zfill(2)
        mine = [i for i in items if any(m.args == (lab,) for m in i.iter_markers("lab"))]
        if not mine:
            raise pytest.UsageError(f"no tests are marked lab({lab!r}): labs with tests are "
                                    f"{sorted(lab_numbers(items))}")
        config.hook.pytest_deselected(items=[i for i in items if i not in mine])
        items[:] = mine
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def lab_numbers(items) -> set[str]:
    return {m.args[0] for i in items for m in i.iter_markers("lab")}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and call.excinfo is not None:
        reason = not_written(call.excinfo.value)
        if reason is not None:
            report.longrepr = reason
    return report


def not_written(error: BaseException, seen=None) -> str | None:
    """The message of a skeleton's NotImplementedError behind `error`, if there is one."""
    seen = seen or set()
    if error is None or id(error) in seen:
        return None
    seen.add(id(error))
    if isinstance(error, NotImplementedError) and str(error).startswith(NOT_WRITTEN):
        return str(error)
    inner = [error.__cause__, error.__context__, *getattr(error, "exceptions", ())]
    return next((r for e in inner if (r := not_written(e, seen)) is not None), None)


# --- a learner's modules in place of the package's ---------------------------------------------

MYWORK = pytest.StashKey[list]()


def use_mywork(folder: Path) -> list[str]:
    """Import each folder/<module>.py as minimodel.<module>; say which modules are whose.

    Every name of the lab's skeleton must be defined by the learner's file; any other name the
    file does not define falls back to the solution's."""
    import minimodel

    if not folder.is_dir():
        raise pytest.UsageError(f"{folder}/ does not exist: `make exercise LAB=NN` copies a lab's "
                                "skeletons there")
    package = Path(minimodel.__file__).parent
    lines = []
    for path in sorted(folder.glob("*.py")):
        name = path.stem
        if not (package / f"{name}.py").exists():
            raise pytest.UsageError(f"{path} is not a module of the package (there is no "
                                    f"minimodel.{name}): rename it, or move it out of {folder}/")
        solution = importlib.import_module(f"minimodel.{name}")
        spec = importlib.util.spec_from_file_location(f"minimodel.{name}", path)
        module = importlib.util.module_from_spec(spec)
        # A name the learner's file does not define is the solution's: a lab may ask for a few
        # functions of a larger module (Lab 01's byte formulas in roofline.py).
        for key, value in vars(solution).items():
            if not key.startswith("__"):
                module.__dict__[key] = value
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[spec.name]
            lines_here = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                          if Path(f.filename).resolve() == path.resolve()]
            if isinstance(e, SyntaxError) and e.filename and Path(e.filename) == path:
                lines_here.append(e.lineno)
            where = f" (line {lines_here[-1]})" if lines_here else ""
            raise pytest.UsageError(
                f"{path} does not import{where}: {type(e).__name__}: {e}") from None
        missing = [n for n in interface_names(name)
                   if getattr(module, n, None) is getattr(solution, n, None)]
        if missing:
            raise pytest.UsageError(f"{path} lacks {', '.join(missing)}: the tests need every "
                                    "name of the task's interface (see the lab page, or the "
                                    f"skeleton in exercises/)")
        setattr(minimodel, name, module)
        lines.append(f"minimodel.{name} is {path}")
    for skeleton in sorted(ROOT.glob("exercises/lab*/*.py")):
        if not (folder / skeleton.name).exists():
            lines.append(f"minimodel.{skeleton.stem} is the solution (no {folder}/{skeleton.name})")
    return lines


def interface_names(module: str) -> list[str]:
    """The public top-level names a lab's skeleton of `module` defines."""
    names = []
    for skeleton in ROOT.glob(f"exercises/lab*/{module}.py"):
        for node in ast.parse(skeleton.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                names.append(node.name)
    return names


# --- a scratch copy of the repository, for the workflow tests --------------------------------

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


def run_in(repo: Path, *cmd: str, timeout: float = 300,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command in `repo` with this environment's bin/ first on PATH (and `env` added)."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(repo), "COLUMNS": "200", **(env or {})}
    return subprocess.run(list(cmd), cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def commit_all(repo: Path) -> None:
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "change"], cwd=repo, check=True)

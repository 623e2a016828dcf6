"""Test-session setup (hand-written, not tangled).

On a machine without CUDA the Triton kernels run in Triton's interpreter, which must be chosen
before `triton` is first imported; tests marked `gpu` are skipped there, with the reason.

The labs are exercises. `pytest --lab 02` runs only Lab 02's own tests (marked `lab("02")`), and
`--mywork DIR` makes each `DIR/<module>.py` of the lab's own modules (its skeletons' names) stand
in for `minimodel.<module>`, so a learner's code meets exactly the tests CI runs on the solution
(`make check-mine LAB=02`). `--part N` narrows both to one part of a lab (the test files marked
`lab("03", part=2)`, and the modules they import; scripts/lab_parts.py). Every other file in DIR
is ignored, and listed as ignored; modules with no file in DIR stay the solution's. A skeleton's
NotImplementedError is reported as "not written yet", not as a crash. Under --mywork the
stateful tests run a smaller example budget (`--examples`, the full one stays in CI) and show
their progress.

On CUDA nothing here chooses the interpreter: the lab's gpu tests run compiled for the GPU.

The fixtures at the end give the tests of the repository's own workflow (the tangle check,
entangled sync/watch) a throw-away git repository holding the project's files.
"""

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import time
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
CHECK_MINE_EXAMPLES = 40  # the stateful tests' budget under --mywork (CI runs the page's own)


def _lab_parts():
    spec = importlib.util.spec_from_file_location("lab_parts", ROOT / "scripts/lab_parts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lab_parts = _lab_parts()


def pytest_addoption(parser):
    parser.addoption("--lab", metavar="NN", help="run only this lab's own tests (e.g. 02)")
    parser.addoption("--mywork", metavar="DIR",
                     help="DIR/<module>.py stands in for minimodel.<module> (make check-mine)")
    parser.addoption("--part", metavar="N", help="with --lab: only this part of the lab")
    parser.addoption("--examples", metavar="N", type=int,
                     help="stateful tests: at most N examples (default under --mywork: "
                          f"{CHECK_MINE_EXAMPLES})")


def pytest_configure(config):
    lab, part = config.getoption("--lab"), config.getoption("--part")
    if part is not None:
        if lab is None:
            raise pytest.UsageError("--part needs --lab (make check-mine LAB=NN PART=N)")
        known = lab_parts.parts(lab)
        if part not in known:
            raise pytest.UsageError(f"lab {lab} has no part {part}: its parts are "
                                    f"{', '.join(known)}")
    mywork = config.getoption("--mywork")
    config.stash[MYWORK] = use_mywork(Path(mywork), lab, part) if mywork else []


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
    return collection_path.resolve() not in own_test_files(config)


def own_test_files(config) -> set[Path]:
    """The test files of --lab (and of --part, if given)."""
    part = config.getoption("--part")
    return {path.resolve() for path, p in lab_parts.lab_test_files(config.getoption("--lab"))
            .items() if part is None or p == part}


def pytest_collection_modifyitems(config, items):
    lab = config.getoption("--lab")
    if lab is not None:
        lab = lab.zfill(2)
        part = config.getoption("--part")
        mine = [i for i in items if any(m.args == (lab,)
                                         and (part is None or str(m.kwargs.get("part", 1)) == part)
                                         for m in i.iter_markers("lab"))]
        if not mine:
            raise pytest.UsageError(f"no tests are marked lab({lab!r}): labs with tests are "
                                    f"{sorted(lab_numbers(items))}")
        config.hook.pytest_deselected(items=[i for i in items if i not in mine])
        items[:] = mine
    examples = config.getoption("--examples")
    if examples is None and config.getoption("--mywork") is not None:
        examples = CHECK_MINE_EXAMPLES
    if examples is not None:
        for item in items:
            smaller_budget(item, examples)
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def state_machine(item):
    """The RuleBasedStateMachine class behind a hypothesis stateful test item, or None."""
    run = getattr(getattr(item, "cls", None), "runTest", None)
    return getattr(run, "_hypothesis_state_machine_class", None)


def smaller_budget(item, examples: int) -> None:
    from hypothesis import settings

    machine = state_machine(item)
    if machine is None:
        return
    case = item.cls
    if case.settings.max_examples > examples:
        case.settings = settings(case.settings, max_examples=examples)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A stateful test under --mywork says how far it is: examples run, of its budget."""
    machine = state_machine(item)
    if machine is None or item.config.getoption("--mywork") is None:
        return (yield)
    capture = item.config.pluginmanager.getplugin("capturemanager")
    writer = item.config.get_terminal_writer()
    budget, count, start = item.cls.settings.max_examples, [0], time.monotonic()
    name = item.nodeid.split("::")[-2] if "::" in item.nodeid else item.name
    original = machine.__init__

    def counting_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        count[0] += 1
        if count[0] % 10 == 0:
            with capture.global_and_fixture_disabled():
                writer.write(f"\n    {name}: {count[0]} state machine runs "
                             f"(budget {budget} passing ones), {time.monotonic() - start:.0f} s",
                             flush=True)

    machine.__init__ = counting_init
    try:
        return (yield)
    finally:
        machine.__init__ = original
        with capture.global_and_fixture_disabled():
            writer.write(f"\n    {name}: {count[0]} state machine runs in "
                         f"{time.monotonic() - start:.0f} s\n", flush=True)


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


def use_mywork(folder: Path, lab: str | None = None, part: str | None = None) -> list[str]:
    """Import each folder/<module>.py of the lab's own modules as minimodel.<module>; say which
    modules are whose, and which files of the folder were ignored.

    Every name of the lab's skeleton must be defined by the learner's file; any other name the
    file does not define falls back to the solution's."""
    import minimodel

    if not folder.is_dir():
        raise pytest.UsageError(f"{folder}/ does not exist: `make exercise LAB=NN` copies a lab's "
                                "skeletons there")
    package = Path(minimodel.__file__).parent
    if lab is None:  # no lab named: every file that names a package module
        own = {p.stem for p in folder.glob("*.py") if (package / p.name).exists()}
        why = "not a module of the package"
    else:
        by_part = lab_parts.module_parts(lab)
        own = {m for m, p in by_part.items() if part is None or p == part}
        why = f"not a module of lab {lab.zfill(2)}" + (f", part {part}" if part else "")
    lines, ignored = [], []
    for path in sorted(folder.iterdir()):
        if path.suffix != ".py" or path.stem not in own:
            if not path.name.startswith(".") and path.name != "__pycache__":
                ignored.append(f"ignored {path} ({why})")
            continue
        name = path.stem
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
            sys.modules[spec.name] = solution
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
    for name in sorted(own):
        if not (folder / f"{name}.py").exists():
            lines.append(f"minimodel.{name} is the solution (no {folder}/{name}.py)")
    return lines + ignored


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


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from nothing. Dynamo keeps its compiled entries per code object for the
    whole process, so the tests that compile MiniGPT.forward (test_minigpt, Lab 03 part 2's
    solution, the FP8 cache) would otherwise share one recompile limit (8) on a worker, and a
    fullgraph compile fails once the earlier tests on that worker have spent it."""
    yield
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()


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

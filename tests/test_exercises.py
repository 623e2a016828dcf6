"""Tests of the labs as exercises (hand-written): the skeletons import; every lab's own tests fail
on its skeletons with "not written yet" (none passes vacuously); they pass on the solution copied
into a learner's folder and fail on a solution with a known bug; `make exercise` never overwrites
a learner's file; a broken learner's file is reported clearly."""

import importlib.util
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from conftest import ROOT

LABS = sorted(p.name.removeprefix("lab") for p in (ROOT / "exercises").glob("lab*"))

# A known bug per lab, applied to the solution copied into mywork/: (module, old, new).
MUTANTS = {
    "00": ("online_softmax",  # the merge drops a rescale
           "self.l * rescale_factor(self.m, m) + other.l * rescale_factor(other.m, m)",
           "self.l + other.l * rescale_factor(other.m, m)"),
    "01": ("roofline",  # a split decode reads its queries once, not once per split
           '"read_tiled": num_splits * q + kv', '"read_tiled": q + kv'),
    "01b": ("triton_warmup",  # row_sum's column mask lets one lane past the row end through
            "mask=cols < n_cols, other=0.0)", "mask=cols <= n_cols, other=0.0)"),
    "02": ("attention_flash",  # the window keeps one key too many (the tile bounds the lab
           # once held are minimodel.kernels.key_range now, shared with the paged kernels)
           "visible &= j > pos_i[:, None] - window", "visible &= j >= pos_i[:, None] - window"),
    "03": ("paged_attention",  # the paged decode kernel reads a key before its window
           "visible = (j >= lo) & (j < end)", "visible = (j > lo) & (j < end)"),
    "04": ("attention_mqa_gqa",  # the query heads of a group taken from the wrong kv head
           "q_groups = q.to(compute).reshape(b, hkv, g * nq, d)",
           "q_groups = q.to(compute).reshape(b, g, hkv, nq, d).transpose(1, 2)"
           ".reshape(b, hkv, g * nq, d)"),
    "05": ("predictions",  # the FP8 cache's scales forgotten: the bytes of one-byte K and V only
           "scales = 2 * b * hkv * nk * 4", "scales = 0"),
}


def by_lab(labs, fast=("00", "05")) -> list:
    """A sweep over labs: `make test` keeps the `fast` ones, the others are in the slow set
    (`make test-slow`; CI runs both)."""
    return [lab if lab in fast else pytest.param(lab, marks=pytest.mark.slow) for lab in labs]


def skeletons(lab: str) -> list[Path]:
    return sorted((ROOT / "exercises" / f"lab{lab}").glob("*.py"))


def check_mine(lab: str, mywork: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`make check-mine LAB=lab` with mywork as the learner's folder; outcome counts from JUnit."""
    report = mywork.parent / f"report-{lab}.xml"
    # On a GPU the runs share Triton's autotuning results on disk (keyed by the kernel's source,
    # so a changed kernel is tuned afresh) instead of benchmarking every tile config again.
    env = {**os.environ, "TRITON_CACHE_AUTOTUNING": "1"}
    # On a GPU a lab's run compiles its kernels for the GPU and adds speed-scale shapes: alone it
    # takes minutes, so it runs on four workers (the GPU has room for them all); on a CPU the
    # outer run's workers already fill the cores.
    workers = ["-n", "4"] if torch.cuda.is_available() else []
    result = subprocess.run(
        [sys.executable, "-m", "pytest", f"--lab={lab}", f"--mywork={mywork}", "-q",
         "-p", "no:cacheprovider", f"--junitxml={report}", *workers, *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    counts = {"passed": 0, "failed": 0, "skipped": 0, "messages": []}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                counts["failed"] += 1
                counts["messages"].append(failure.get("message", "") + (failure.text or ""))
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
    return result, counts


def test_there_are_labs_to_do():
    assert set(LABS) == {"00", "01", "01b", "02", "03", "04", "05"}


@pytest.mark.parametrize("lab", LABS)
def test_skeletons_import_and_raise_not_written_yet(lab):
    for path in skeletons(lab):
        spec = importlib.util.spec_from_file_location(f"skeleton_{lab}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert (ROOT / "src/minimodel" / path.name).exists(), f"{path} names no package module"
        assert "not written yet" in path.read_text()


@pytest.mark.parametrize("lab", by_lab(LABS))
def test_every_test_of_the_lab_fails_on_the_skeleton(lab, tmp_path):
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    for path in skeletons(lab):
        shutil.copy(path, mywork)
    result, counts = check_mine(lab, mywork)
    assert counts["failed"] > 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert counts["passed"] == 0, f"{counts['passed']} tests of lab {lab} pass on the skeleton"
    assert all("not written yet" in m for m in counts["messages"]), \
        [m[:300] for m in counts["messages"] if "not written yet" not in m][:3]


@pytest.mark.parametrize("lab", by_lab(LABS))
def test_the_solution_in_mywork_passes(lab, tmp_path):
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    for path in skeletons(lab):
        shutil.copy(ROOT / "src/minimodel" / path.name, mywork)
    result, counts = check_mine(lab, mywork)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert counts["passed"] > 0 and counts["failed"] == 0
    assert f"minimodel.{skeletons(lab)[0].stem} is {mywork}" in result.stdout  # the header says so


@pytest.mark.parametrize("lab", sorted(MUTANTS))
def test_a_solution_with_a_known_bug_fails(lab, tmp_path):
    module, old, new = MUTANTS[lab]
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    source = (ROOT / "src/minimodel" / f"{module}.py").read_text()
    assert source.count(old) == 1, f"the mutant's target is not in {module}.py any more"
    (mywork / f"{module}.py").write_text(source.replace(old, new))
    result, counts = check_mine(lab, mywork, "-x")
    # Exit 1: tests failed; on a GPU the lab runs on workers, and there -x ends the run as
    # interrupted (exit 2) at the first failure. Either way a test of the lab must have failed.
    assert result.returncode in (1, 2) and counts["failed"] >= 1, result.stdout[-2000:]


# Lab 04's solution in other words: every message reworded (still naming what the task says it
# names), the divisors listed smallest first. The lab's tests must accept it.
REWORDED_04 = [
    ('check_int("n_kv_heads", n_kv_heads, 1)',
     'if isinstance(n_kv_heads, bool) or not isinstance(n_kv_heads, int) or n_kv_heads < 1:\n'
     '        raise ValueError(f"bad n_kv_heads {n_kv_heads!r}: want a count >= 1")'),
    ("range(h, 0, -1)", "range(1, h + 1)"),
    ('f"n_kv_heads={n_kv_heads} does not divide n_heads={h}: each kv head must serve a "',
     'f"{h} query heads do not split into {n_kv_heads} equal groups; "'),
    ('f"whole group of query heads; choose one of {divisors} ({h} is MHA, 1 is MQA)"',
     'f"the counts that do: {divisors}"'),
    ('f"model must be a MiniGPT, got {type(model).__name__}"',
     'f"mean_pool_kv converts a MiniGPT, and this model is a {type(model)}"'),
    ('f"cannot mean-pool {old.n_kv_heads} kv heads into {n_kv_heads}: each new kv head "',
     'f"{old.n_kv_heads} old heads do not fall into {n_kv_heads} equal groups "'),
    ('f"dtype must be a floating-point torch.dtype (NaN marks the slots "',
     'f"blank slots hold NaN, so the dtype must be a float one "'),
    ('f"cache must be a KVCache, got {type(cache).__name__}"',
     'f"expected a KVCache as cache, not {type(cache)}"'),
]


def reworded(tmp_path: Path, module: str, replacements: list[tuple[str, str]]) -> Path:
    """A learner's folder holding the solution's `module` with its messages reworded."""
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    source = (ROOT / "src" / "minimodel" / f"{module}.py").read_text()
    for old, new in replacements:
        assert source.count(old) == 1, f"{old} is not in {module}.py any more"
        source = source.replace(old, new)
    (mywork / f"{module}.py").write_text(source)
    return mywork


def test_a_solution_in_its_own_words_passes_among_other_files(tmp_path):
    """Lab 04's solution reworded passes `make check-mine LAB=04`, beside another lab's broken
    file and stray files, which are ignored and listed as ignored."""
    mywork = reworded(tmp_path, "attention_mqa_gqa", REWORDED_04)
    (mywork / "block_manager.py").write_text("class BlockManager(:\n")  # Lab 03, half written
    (mywork / "scratch.py").write_text("import no_such_module\n")
    (mywork / "notes.txt").write_text("try MQA first\n")
    quick = "not prefill_then_decode and not measured_cache_bytes"  # the slow ones, for time
    result, counts = check_mine("04", mywork, "-k", quick)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert counts["passed"] > 0 and counts["failed"] == 0
    for name in ("block_manager.py", "scratch.py", "notes.txt"):
        assert f"ignored {mywork / name} (not a module of lab 04)" in result.stdout


# Lab 00's solution in other words: each kind of refusal reworded, still naming the values the
# task's table "What a refusal names" asks for. The lab's tests must accept it (a few seconds).
REWORDED_00 = [
    ('f"{name} is NaN: the softmax of a row holding NaN is undefined"', 'f"NaN found at {name}"'),
    ('f"{name}[{i}] must be a finite real number, got {x!r}"', 'f"bad entry {x!r} at {name}[{i}]"'),
    ('f"all {n} logits are -inf: the softmax of a fully masked row is undefined (0/0)"',
     'f"every logit is {-math.inf}"'),
    ('f"need m_new >= m_old (a running maximum only grows), got m_old={m_old}, m_new={m_new}"',
     'f"the maximum went from {m_old} to {m_new}"'),
    ('f"SoftmaxState.l must be finite and >= 0, got {self.l}"', 'f"bad l: {self.l}"'),
    ('check_int("chunk", chunk, 1)',
     'if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:\n'
     '        raise ValueError(f"bad chunk {chunk!r}")'),
    ('f"scale must be finite and positive, got {scale}"', 'f"bad scale {scale}"'),
    ('f"keys[{j}] has length {len(k)}, but q has length {d}"',
     'f"len(keys[{j}]) = {len(k)} != len(q) = {d}"'),
    ('f"visible[{j}] must be a bool, got {seen!r}"', 'f"not a bool: visible[{j}] = {seen!r}"'),
    ('f"visible has more entries than the {n} keys"', 'f"visible is too long for {n} keys"'),
]


def test_lab00_in_its_own_words_passes(tmp_path):
    """Lab 00's solution with its messages reworded passes `make check-mine LAB=00`."""
    result, counts = check_mine("00", reworded(tmp_path, "online_softmax", REWORDED_00))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert counts["passed"] > 0 and counts["failed"] == 0


def test_one_part_of_a_lab_is_checked_alone(tmp_path):
    """`make check-mine LAB=03 PART=1`: part 1's tests on part 1's files; part 2's skeleton,
    still unwritten, is ignored."""
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    shutil.copy(ROOT / "exercises/lab03/paged_attention.py", mywork)  # part 2, not written yet
    shutil.copy(ROOT / "src/minimodel/block_manager.py", mywork)
    quick = "not state_machine and not serving and not window_releases"  # for time
    result, counts = check_mine("03", mywork, "--part=1", "-k", quick)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert counts["passed"] > 0 and counts["failed"] == 0
    assert f"minimodel.block_manager is {mywork / 'block_manager.py'}" in result.stdout
    assert "minimodel.paged_kv_cache is the solution" in result.stdout
    assert f"ignored {mywork / 'paged_attention.py'} (not a module of lab 03, part 1)" \
        in result.stdout
    wrong, _ = check_mine("03", mywork, "--part=3")
    assert wrong.returncode != 0 and "its parts are 1, 2" in wrong.stderr


def test_a_learner_file_that_does_not_import_is_reported(tmp_path):
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    (mywork / "online_softmax.py").write_text("def softmax(xs):\n    return [\n")
    result, _ = check_mine("00", mywork)
    assert result.returncode != 0
    assert "online_softmax.py does not import (line 2): SyntaxError" in result.stderr


def test_a_learner_file_missing_a_name_is_reported(tmp_path):
    mywork = tmp_path / "mywork"
    mywork.mkdir()
    (mywork / "online_softmax.py").write_text("def softmax(xs):\n    return []\n")
    result, _ = check_mine("00", mywork)
    assert result.returncode != 0
    assert "online_softmax.py lacks rescale_factor, SoftmaxState" in result.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
def test_make_exercise_copies_the_skeletons_and_never_overwrites(tmp_path):
    mywork = tmp_path / "mywork"
    make = ["make", "--no-print-directory", "exercise", "LAB=00", f"MYWORK={mywork}"]
    first = subprocess.run(make, cwd=ROOT, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    mine = mywork / "online_softmax.py"
    assert mine.read_text() == (ROOT / "exercises/lab00/online_softmax.py").read_text()
    mine.write_text("# my work\n")
    again = subprocess.run(make, cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0 and "kept" in again.stdout
    assert mine.read_text() == "# my work\n"
    wrong = subprocess.run([*make[:3], "LAB=99", f"MYWORK={mywork}"], cwd=ROOT,
                           capture_output=True, text=True)
    assert wrong.returncode != 0 and "one of" in wrong.stdout

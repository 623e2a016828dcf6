# ~/~ begin <<docs/lab/05-exam.md#tests/test_predictions.py>>[init]
"""The exam's tests: a learner's predictions against the course's (tangled from
docs/lab/05-exam.md). `make check-mine LAB=05` runs them on mywork/predictions.py."""

import json
from pathlib import Path

import pytest

from minimodel.predictions import (
    cross_attention,
    fp8_kv_decode,
    mixed_batch,
    mqa_decode,
    sliding_window_prefill,
    verification,
)

pytestmark = pytest.mark.lab("05")  # the task's tests: `make check-mine LAB=05` runs them


# ~/~ begin <<docs/lab/05-exam.md#exam-check-predictions>>[init]
KEY_FILE = Path(__file__).resolve().parents[1] / "data" / "exam-predictions.json"
TIME_BAR = 0.25  # the time is scored within a quarter of the course's prediction
FUNCTIONS = {f.__name__: f for f in (fp8_kv_decode, verification, mixed_batch,
                                     sliding_window_prefill, cross_attention, mqa_decode)}


def course_key() -> dict[str, dict[str, dict]]:
    """The course's predictions: {function: {case: {"flops", "bytes", "intensity", ...}}}."""
    key: dict[str, dict[str, dict]] = {}
    for entry in json.loads(KEY_FILE.read_text())["cases"]:
        key.setdefault(entry["function"], {})[entry["case"]] = entry
    return key


def answers(function: str) -> list[tuple[str, object, dict]]:
    """(case, your Prediction, the course's) for each case of one variant."""
    mine = FUNCTIONS[function]()
    key = course_key()[function]
    assert isinstance(mine, dict) and sorted(mine) == sorted(key), (
        f"{function}() must return a dict of the cases {sorted(key)}, got "
        f"{sorted(mine) if isinstance(mine, dict) else type(mine).__name__}")
    return [(case, mine[case], key[case]) for case in sorted(key)]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_flops_and_bytes_equal_the_course_models(function):
    for case, mine, key in answers(function):
        assert mine.flops == key["flops"], (
            f"{function}()[{case!r}].flops = {mine.flops}; the course's model: {key['flops']}")
        assert mine.nbytes == key["bytes"], (
            f"{function}()[{case!r}].nbytes = {mine.nbytes}; the course's model: {key['bytes']}")


@pytest.mark.parametrize("function", FUNCTIONS)
def test_intensity_and_roof_match(function):
    for case, mine, key in answers(function):
        assert mine.intensity == pytest.approx(key["intensity"], rel=1e-6), (
            f"{function}()[{case!r}].intensity = {mine.intensity}; the course's: "
            f"{key['intensity']}")
        assert mine.roof == key["roof"], (
            f"{function}()[{case!r}].roof = {mine.roof!r}; the course's: {key['roof']!r}")


@pytest.mark.parametrize("function", FUNCTIONS)
def test_time_within_a_quarter_of_the_course_s(function):
    for case, mine, key in answers(function):
        error = mine.time_us / key["time_us"] - 1
        assert abs(error) <= TIME_BAR, (
            f"{function}()[{case!r}].time_us = {mine.time_us:.4g}, {error:+.0%} from the "
            f"course's {key['time_us']:.4g} (the bar is {TIME_BAR:.0%})")
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/05-exam.md#tests/test_exam.py>>[init]
"""The course's side of the exam (tangled from docs/lab/05-exam.md): the counts the exam added
to minimodel.roofline, the roofs, the committed predictions against the models, the measuring
bench on tiny shapes, and the error table and figure from a measurement."""

import json

import pytest
import torch

from bench import exam
from figures import exam as exam_figures
from figures.core import h200_measured
from minimodel import paged_attention, predictions
from minimodel.predictions import h200_roofs
from minimodel.reference import visible_mask
from minimodel.roofline import (
    attention_flops,
    attention_min_bytes,
    varlen_attention_flops,
    varlen_attention_min_bytes,
)


# ~/~ begin <<docs/lab/05-exam.md#exam-check-varlen>>[init]
@pytest.mark.parametrize(("causal", "window"), [(False, None), (True, None), (True, 3)])
def test_varlen_flops_count_each_sequence_s_own_mask(causal, window):
    seqs = [(5, 9), (1, 4), (7, 7), (9, 5)]
    pairs = sum(int(visible_mask(nq, nk, causal=causal, window=window).sum()) for nq, nk in seqs)
    assert varlen_attention_flops(3, 16, seqs, causal=causal, window=window) == 4 * 3 * 16 * pairs


@pytest.mark.parametrize(("b", "hq", "hkv", "nq", "nk", "d"),
                         [(1, 1, 1, 1, 1, 8), (4, 8, 2, 3, 17, 64), (16, 64, 8, 1, 16384, 128)])
def test_varlen_equals_the_uniform_counts(b, hq, hkv, nq, nk, d):
    seqs = [(nq, nk)] * b
    assert varlen_attention_flops(hq, d, seqs, causal=True) == attention_flops(
        b, hq, nq, nk, d, causal=True)
    for e in (1, 2, 4):
        assert varlen_attention_min_bytes(hq, hkv, d, seqs, elem_bytes=e) == \
            attention_min_bytes(b, hq, hkv, nq, nk, d, elem_bytes=e)


def test_varlen_bytes_by_hand():
    # Hq = 2, Hkv = 1, d = 4: a prompt of 3 tokens and a decode step against 5 keys.
    # rows 3 + 1 = 4: 2 heads x 4 rows x 4 elements x 2 bytes, read and written = 128;
    # keys 3 + 5 = 8: K and V, 1 head x 8 tokens x 4 elements x 2 bytes each = 128.
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)]) == 128 + 128
    # the same cache in one byte an element with a 4-byte scale per token, head and tensor:
    # K and V, 1 head x 8 tokens x (4 x 1 + 4) bytes each = 128
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)], kv_elem_bytes=1,
                                      kv_scale_bytes=4) == 128 + 128
    assert varlen_attention_min_bytes(2, 1, 4, [(3, 3), (1, 5)], kv_elem_bytes=1) == 128 + 64


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: varlen_attention_flops(2, 8, []), r"seqs must be a non-empty list"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4), (0, 4)]), r"seqs\[1\] nq must be"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4, 5)]), r"seqs\[0\] must be an \(nq, nk\)"),
        (lambda: varlen_attention_flops(2, 8, [(1, 4)], window=2), r"window=2 needs causal"),
        (lambda: varlen_attention_min_bytes(3, 2, 8, [(1, 4)]), r"Hq=3 .* Hkv=2"),
        (lambda: varlen_attention_min_bytes(2, 1, 8, [(1, 4)], kv_elem_bytes=0),
         r"kv_elem_bytes must be an int >= 1, got 0"),
        (lambda: varlen_attention_min_bytes(2, 1, 8, [(1, 4)], kv_scale_bytes=-4),
         r"kv_scale_bytes must be an int >= 0, got -4"),
    ],
)
def test_varlen_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-check-course>>[init]
def test_the_roofs_are_the_figures_roofs():
    assert h200_roofs() == h200_measured()


def test_the_key_covers_every_variant_of_the_task():
    cases = {(c["function"], c["case"]) for c in json.loads(exam.PREDICTIONS.read_text())["cases"]}
    assert {f for f, _ in cases} == set(predictions.__all__) - {"ROOF_NAMES", "Prediction",
                                                                 "h200_roofs"}
    assert len(cases) == 13


def test_a_prediction_names_a_roof():
    with pytest.raises(ValueError, match="roof must be one of .*'bandwidth'"):
        predictions.Prediction(1, 1, 1.0, "bandwidth", 1.0)


def test_the_committed_key_is_the_models_today():
    committed = json.loads(exam.PREDICTIONS.read_text())
    fresh = json.loads(json.dumps(exam.predict()))  # tuples become lists, as committed
    assert committed["roofs"] == fresh["roofs"]
    assert committed["cases"] == fresh["cases"]
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-check-bench>>[init]
def test_the_bench_runs_every_case_on_tiny_shapes():
    record = exam.measure(smoke=True, rounds=1)
    got = {(r["function"], r["case"], r["impl"]): r for r in record["cases"]}
    expected = [(c.function, c.case) for c in exam.CASES] + [("mixed_batch", "apart")]
    assert sorted({(f, c) for f, c, _ in got}) == sorted(expected)
    for (_, case, impl), rec in got.items():
        if "skipped" in rec and impl == "sdpa_cudnn":  # no cuDNN on a CPU, SDPA cannot, or the
            # fp16 case holds the 8-bit case's anchors: skipped, saying why
            assert any(w in rec["skipped"] for w in ("CUDA", "SDPA", "anchors")), rec
        elif case == "fp8" and exam.fp8_support() is not None:
            assert "k_scale" in rec["skipped"]
        else:
            assert rec["check"] == "ok", rec  # checked; a CPU times nothing
    assert record["smoke"] and record["predictions"]["commit"] == json.loads(
        exam.PREDICTIONS.read_text())["environment"]["commit"]


@pytest.mark.skipif(not paged_attention.INTERPRET, reason="CPU tensors through the interpreter")
def test_the_fp8_case_runs_once_paged_decode_takes_scales(monkeypatch):
    real = paged_attention.paged_decode

    def fp8_decode(q, k_pool, v_pool, tables, lens, *, k_scale, v_scale, **kw):
        """What the 8-bit kernel computes, in PyTorch: the pools dequantised, then decoded."""
        k16, v16 = ((p.float() * s[..., None]).to(q.dtype) for p, s in
                    ((k_pool, k_scale), (v_pool, v_scale)))
        return real(q, k16, v16, tables, lens, **kw)

    monkeypatch.setattr(paged_attention, "paged_decode", fp8_decode)
    assert exam.fp8_support() is None
    cases = [exam.smoke_case(c) for c in exam.CASES if c.function == "fp8_kv_decode"]
    recs = exam.measure_variant(cases, torch.device("cpu"), rounds=1)
    fp8 = next(r for r in recs if r["case"] == "fp8" and r["impl"] == "ours")
    assert fp8["check"] == "ok" and "float8_e4m3fn" in fp8["api"]


def test_the_fp8_reference_is_the_dequantised_cache():
    torch.manual_seed(0)
    pool = torch.randn(3, exam.BLOCK_SIZE, 2, 16).half()
    q8, scale = exam.quantize_e4m3(pool)
    assert q8.dtype == torch.float8_e4m3fn and scale.shape == (3, exam.BLOCK_SIZE, 2)
    amax = pool.float().abs().amax(-1)  # one scale per token and kv head: its largest maps to
    torch.testing.assert_close(scale, amax / exam.E4M3_MAX)  # e4m3's largest, 448
    back = q8.float() * scale[..., None]  # 3 mantissa bits: within 1/16 of the token's largest
    assert ((back - pool.float()).abs() <= amax[..., None] / 16).all()


def test_the_bench_refuses_to_write_a_smoke_run_into_data():
    with pytest.raises(SystemExit):
        exam.main(["--measure", "--smoke"])
# ~/~ end


# ~/~ begin <<docs/lab/05-exam.md#exam-check-figure>>[init]
def made_up_measurement(key: dict, factor: float) -> dict:
    """A measurement of the committed predictions: ours `factor` times the prediction, cuDNN
    0.9 times, the fp8 case skipped, no cuDNN for the window."""
    cases = [(c["function"], c["case"], c["time_us"]) for c in key["cases"]]
    apart = sum(t for f, c, t in cases if f == "mixed_batch" and c in ("prefill", "decode"))
    recs = []
    for function, case, us in [*cases, ("mixed_batch", "apart", apart)]:
        ours = ({"skipped": "no FP8 kernel yet"} if case == "fp8" else
                {"check": "ok", "graph_ms": factor * us / 1e3})
        cudnn = ({"skipped": "SDPA has no sliding window"} if case == "window" else
                 {"check": "ok", "graph_ms": 0.9 * us / 1e3})
        recs += [{"function": function, "case": case, "impl": "ours", **ours},
                 {"function": function, "case": case, "impl": "sdpa_cudnn", **cudnn}]
    return {"environment": {"device": "NVIDIA H200", "torch": "t", "triton": "t",
                            "commit": "c", "date": "9999-01-01T00:00:00+00:00"},
            "smoke": False, "copy_bytes_per_s": [4.2e12],
            "predictions": {k: key["environment"][k] for k in ("commit", "date")},
            "cases": recs}


def test_the_error_table_and_figure_from_a_measurement(tmp_path):
    key = exam_figures.load()
    path = tmp_path / "exam-h200.json"
    path.write_text(json.dumps(made_up_measurement(key, 1.5)))
    measured = exam_figures.load_measured(key, path)
    table = exam_figures.errors_table(key, measured)
    assert "pending" not in table and "**+50%**" in table and "-10%" in table
    assert table.count("| skipped | n/a |") == 2  # ours on fp8, cuDNN on the window
    rows = [line for line in table.splitlines() if line.startswith("| 3 | apart")]
    assert len(rows) == 1 and "**+50%**" in rows[0]
    svg = exam_figures.figure(key, measured)
    assert svg.lstrip().startswith(b"<?xml") and svg != exam_figures.figure(key)


@pytest.mark.parametrize(("change", "why"), [
    (lambda m: m.update(smoke=True), "smoke run"),
    (lambda m: m["predictions"].update(commit="0000000"), "not the committed ones"),
    (lambda m: m["environment"].update(date="2000-01-01T00:00:00+00:00"), "dated before"),
])
def test_a_measurement_of_other_predictions_is_refused(tmp_path, change, why):
    key = exam_figures.load()
    measured = made_up_measurement(key, 1.0)
    change(measured)
    path = tmp_path / "exam-h200.json"
    path.write_text(json.dumps(measured))
    with pytest.raises(SystemExit, match=why):
        exam_figures.load_measured(key, path)
# ~/~ end
# ~/~ end

"""Lab 05's exam (docs/lab/05-exam.md): six attention variants the course never built, each
predicted from minimodel.roofline's models on the committed roofs before it is measured.

    python -m bench.exam --predict                             # data/exam-predictions.json, no GPU
    PYTHONPATH=src python -m bench.exam --measure              # on the H200: data/exam-h200.json
    python -m bench.exam --measure --smoke --out /tmp/x.json   # tiny shapes; a CPU interprets them
"""

import dataclasses
import inspect
import itertools
import json
import os
import sys
import time
from pathlib import Path

import torch

from bench import core
from bench.core import DATA, ROOT, environment, error, paged_cache, randn, save, sdpa_cudnn

PREDICTIONS = DATA / "exam-predictions.json"
MEASURED = DATA / "exam-h200.json"


@dataclasses.dataclass(frozen=True)
class Case:
    """One case of one variant: the call's shapes, and the API that runs it."""

    function: str  # the function of minimodel.predictions that answers it
    case: str  # its key in that function's dictionary
    hq: int
    hkv: int
    d: int
    groups: tuple[tuple[int, int, int], ...]  # (sequences, query rows, keys) of each kind
    causal: bool = True
    window: int | None = None
    kv_dtype: str = "float16"  # "float8_e4m3fn": one byte an element plus float32 scales
    run: str = "attention"  # "attention", "paged_decode" or "paged_prefill"

    @property
    def seqs(self) -> list[tuple[int, int]]:
        """(query rows, keys) of every sequence of the call, in order."""
        return [(nq, nk) for count, nq, nk in self.groups for _ in range(count)]


FP8 = "float8_e4m3fn"
FP8_SCALE_BYTES = 4  # one float32 scale per token, kv head and tensor (K, V): the assumption

CASES = [
    Case("fp8_kv_decode", "fp8", 64, 8, 128, ((16, 1, 16384),), kv_dtype=FP8, run="paged_decode"),
    Case("fp8_kv_decode", "fp16", 64, 8, 128, ((16, 1, 16384),), run="paged_decode"),
    *(
        Case("verification", f"k{k}", 32, 8, 128, ((64, k, 4096),), run="paged_prefill")
        for k in (2, 4, 8)
    ),
    Case("mixed_batch", "mixed", 32, 8, 128, ((1, 8192, 8192), (63, 1, 4096)), run="paged_prefill"),
    Case("mixed_batch", "prefill", 32, 8, 128, ((1, 8192, 8192),), run="paged_prefill"),
    Case("mixed_batch", "decode", 32, 8, 128, ((63, 1, 4096),), run="paged_decode"),
    Case("sliding_window_prefill", "window", 32, 4, 64, ((1, 65536, 65536),), window=2048),
    Case("sliding_window_prefill", "causal", 32, 4, 64, ((1, 65536, 65536),)),
    Case("cross_attention", "cross", 32, 32, 128, ((64, 64, 4096),), causal=False),
    Case("mqa_decode", "mqa", 64, 1, 128, ((256, 1, 2048),)),
    Case("mqa_decode", "gqa8", 64, 8, 128, ((256, 1, 2048),)),
]


# --- the course's predictions ---------------------------------------------------------------------


def predict_case(case: Case, roofs) -> dict:
    """FLOPs and compulsory bytes from minimodel.roofline, placed on the roofs: the time at the
    attainable rate, min(attention's compute roof at d, I beta)."""
    from minimodel import roofline as r

    flops = r.varlen_attention_flops(
        case.hq, case.d, case.seqs, causal=case.causal, window=case.window
    )
    fp8 = case.kv_dtype == FP8
    kv = {"kv_elem_bytes": 1 if fp8 else None, "kv_scale_bytes": FP8_SCALE_BYTES if fp8 else 0}
    nbytes = r.varlen_attention_min_bytes(case.hq, case.hkv, case.d, case.seqs, **kv)
    intensity = r.arithmetic_intensity(flops, nbytes)
    roof = "memory" if intensity * roofs.bandwidth <= roofs.attention_roof(case.d) else "compute"
    time_us = flops / roofs.attainable(intensity, head_dim=case.d) * 1e6
    out = dataclasses.asdict(case) | {"flops": flops, "bytes": nbytes, "intensity": intensity}
    return out | {"roof": roof, "time_us": time_us}


def predict() -> dict:
    """The course's predictions of every case, with the roofs they stand on."""
    from minimodel.predictions import h200_roofs

    roofs = h200_roofs()
    return {
        "roofs": {k: getattr(roofs, k) for k in ("name", "peak_flops", "bandwidth", "exp_rate")}
        | {"attention_roof": {str(d): roofs.attention_roof(d) for d in (64, 128)}},
        "cases": [predict_case(case, roofs) for case in CASES],
    }


def write_predictions(out: Path) -> None:
    inputs = {}  # where the roofs came from: each input file's own environment
    for name in ("ceilings-h200.json", "mufu-h200.json"):
        env = json.loads((DATA / name).read_text())["environment"]
        inputs[f"data/{name}"] = {k: env.get(k) for k in ("device", "commit", "date")}
    record = {
        "environment": {"commit": core.commit(), "date": core.now(), "inputs": inputs},
        "model": "flops: minimodel.roofline.varlen_attention_flops (4 d Hq over the visible "
        "pairs, masks bottom-right per sequence); bytes: varlen_attention_min_bytes "
        "(queries read and outputs written once in fp16, every sequence's K and V read "
        "once at their stored size; fp8: 1 byte an element plus a float32 scale per "
        "token, kv head and tensor); time: flops / Ceilings.attainable(I, head_dim=d) "
        "on minimodel.predictions.h200_roofs(), the exponential roof not overlapped; "
        "roof: memory when I * bandwidth <= attention_roof(d)",
        **predict(),
    }
    save(out, record)


# --- the measurement -----------------------------------------------------------------------------

BLOCK_SIZE = 16
ROUNDS = 2
CHECK_TOL = 2e-2  # max |O - reference| for fp16 outputs of unit-variance inputs (fp8: same bar)
E4M3_MAX = 448.0  # the largest float8_e4m3fn
CPU_TIMING = "smoke run on a CPU: kernels in Triton's interpreter, checked, not timed"

# Tiny shapes of the same cases: the smoke run (CPU interpreter) that keeps this bench from rotting.
SMALL = {"hq": 4, "hkv": 2, "d": 16}
SMOKE_SHAPES = {  # function: the case's tiny shapes
    "fp8_kv_decode": lambda c: SMALL | {"groups": ((2, 1, 40),)},
    "verification": lambda c: SMALL | {"groups": ((2, c.groups[0][1], 40),)},
    "mixed_batch": lambda c: (
        SMALL | {"groups": tuple((1, 24, 24) if nq > 1 else (3, 1, 40) for _, nq, _ in c.groups)}
    ),
    "sliding_window_prefill": lambda c: (
        SMALL | {"groups": ((1, 64, 64),), "window": c.window and 16}
    ),
    "cross_attention": lambda c: SMALL | {"hq": 2, "groups": ((2, 8, 40),)},
    "mqa_decode": lambda c: SMALL | {"hkv": min(c.hkv, 2), "groups": ((4, 1, 32),)},
}


def smoke_case(case: Case) -> Case:
    return dataclasses.replace(case, **SMOKE_SHAPES[case.function](case))


def from_pool(pool: torch.Tensor, table: torch.Tensor, row: int, n: int) -> torch.Tensor:
    """The first n keys of sequence `row` read back through its table: (Hkv, n, d)."""
    blocks = pool[table[row, : -(-n // BLOCK_SIZE)].long()]  # (nb, BLOCK_SIZE, Hkv, d)
    return blocks.permute(2, 0, 1, 3).flatten(1, 2)[:, :n]


def quantize_e4m3(pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One float32 scale per token and kv head (the assumption of the page): the pool in
    float8_e4m3fn and its scales (num_blocks, BLOCK_SIZE, Hkv)."""
    scale = (pool.float().abs().amax(dim=-1) / E4M3_MAX).clamp(min=1e-12)
    return (pool.float() / scale[..., None]).to(torch.float8_e4m3fn), scale


def fp8_support() -> str | None:
    """Why paged_decode cannot run the FP8 case, or None if its signature takes the scales."""
    from minimodel.paged_attention import paged_decode

    if not {"k_scale", "v_scale"} <= set(inspect.signature(paged_decode).parameters):
        return (
            "paged_decode takes no k_scale / v_scale: the 8-bit cache of Lab 03 part 2 is absent "
            "(or names its scales otherwise: then adapt bench.exam.build), so the fp8 case is "
            "not measured and its prediction stands alone"
        )
    return None


def attempt(fn, api: str, check) -> dict:
    """fn run once and checked: {"fn", "api", "max_err"}, or {"error", "api"} if it raised."""
    try:
        return {"fn": fn, "api": api, "max_err": check(fn())}
    except Exception as e:  # noqa: BLE001 - a refusal is data too
        return {"error": error(e), "api": api}


def build(case: Case, device: torch.device, gen: torch.Generator) -> dict[str, dict]:
    """The implementations of one case: impl -> {"fn", "api", "max_err"} or {"skipped"} /
    {"error"}; every fn already run once and checked against the reference."""
    from minimodel.attention import attention
    from minimodel.paged_attention import paged_decode, paged_prefill

    lens, rows = [nk for _, nk in case.seqs], [nq for nq, _ in case.seqs]
    b = len(lens)
    rand = lambda *shape: randn(*shape, generator=gen, device=device)
    k, v = rand(b, case.hkv, max(lens), case.d), rand(b, case.hkv, max(lens), case.d)
    cudnn = "SDPA cuDNN, contiguous" + (", enable_gqa" if case.hq != case.hkv else "")
    anchor, as_ours = None, lambda out: out  # SDPA-cuDNN's (fn, what), where one exists
    if case.run == "attention":
        q = rand(b, case.hq, rows[0], case.d)
        fn = lambda: attention(q, k, v, causal=case.causal, window=case.window)
        r = min(rows[0], 64)

        def sequence(out, i):  # its last r rows: output, queries, keys, values
            return out[i, :, -r:], q[i, :, -r:], k[i], v[i]

        api = "minimodel.attention, contiguous tensors"
        if case.window is None:
            anchor = (lambda: sdpa_cudnn(q, k, v, is_causal=case.causal and rows[0] > 1), cudnn)
    elif case.run == "paged_decode":
        q = rand(b, case.hq, case.d)
        kp, vp, table, lens_t = paged_cache(k, v, lens, BLOCK_SIZE)
        scales = {}
        api = f"paged_decode, blocks of {BLOCK_SIZE}, random order, fast path"
        if case.kv_dtype == FP8:
            if (why := fp8_support()) is not None:
                return {"ours": {"skipped": why}}
            (kp, ks), (vp, vs) = quantize_e4m3(kp), quantize_e4m3(vp)
            scales = {"k_scale": ks, "v_scale": vs}
            api += ", float8_e4m3fn pools with per-token-per-head float32 scales"
        fn = lambda: paged_decode(q, kp, vp, table, lens_t, max_context_len=max(lens), **scales)

        def keys(pool, scale, i):  # the cache the kernel reads, dequantised for the reference
            pool = pool.float() if scale is None else pool.float() * scale[..., None]
            return from_pool(pool, table, i, lens[i])

        def sequence(out, i):
            ks, vs = scales.get("k_scale"), scales.get("v_scale")
            return out[i, :, None], q[i, :, None], keys(kp, ks, i), keys(vp, vs, i)

        if case.kv_dtype != FP8:  # the fp8 case's anchors are the fp16 case's
            anchor, as_ours = (lambda: sdpa_cudnn(q[:, :, None], k, v), cudnn), lambda o: o[:, :, 0]
    elif case.run == "paged_prefill":
        q = rand(sum(rows), case.hq, case.d)
        kp, vp, table, lens_t = paged_cache(k, v, lens, BLOCK_SIZE)
        starts = [0, *itertools.accumulate(rows)]
        starts_t = torch.tensor(starts, dtype=torch.int32, device=device)
        masks = {"causal": case.causal, "window": case.window}
        fn = lambda: paged_prefill(
            q, kp, vp, table, lens_t, starts_t, max_query_len=max(rows), **masks
        )

        def sequence(out, i):  # its last rows, at most 64
            last = slice(starts[i + 1] - min(rows[i], 64), starts[i + 1])
            kv = k[i, :, : lens[i]], v[i, :, : lens[i]]
            return out[last].transpose(0, 1), q[last].transpose(0, 1), *kv

        api = f"paged_prefill, blocks of {BLOCK_SIZE}, random order, fast path"
        if len(case.groups) == 1:
            (nq, nk), as_ours = case.seqs[0], lambda out: out.transpose(1, 2).reshape(q.shape)
            q4 = q.view(b, nq, case.hq, case.d).transpose(1, 2)
            if nq == nk or nq == 1:
                anchor = (lambda: sdpa_cudnn(q4, k, v, is_causal=nq > 1), cudnn)
            else:  # a few tokens at the end: causal aligned bottom-right, as a boolean mask
                mask = torch.ones(nq, nk, dtype=torch.bool, device=device).tril(nk - nq)
                what = cudnn + ", bottom-right causal as a mask"
                anchor = (lambda: sdpa_cudnn(q4, k, v, attn_mask=mask), what)
    else:
        raise ValueError(f"unknown run {case.run!r}")

    def check(out):  # the first kv head's group of the first and the last sequence's rows
        parts = [[t[None] for t in sequence(out, i)] for i in sorted({0, b - 1})]
        return max(core.group_error(*r, causal=case.causal, window=case.window) for r in parts)

    impls = {"ours": attempt(fn, api, check)}
    if device.type != "cuda":
        impls["sdpa_cudnn"] = {"skipped": "SDPA's cuDNN backend needs a CUDA GPU"}
    elif anchor is None:
        why = "SDPA takes no batch of sequences of different lengths: see prefill and decode"
        if case.kv_dtype == FP8:
            why = "the fp16 case holds this variant's anchors (our 16-bit cache, cuDNN on it)"
        impls["sdpa_cudnn"] = {"skipped": "SDPA has no sliding window" if case.window else why}
    else:
        impls["sdpa_cudnn"] = attempt(*anchor, lambda out: check(as_ours(out)))
    return impls


def measure_variant(cases: list[Case], device: torch.device, rounds: int) -> list[dict]:
    """Build, check and time every implementation of one variant's cases, in turns."""
    gen = torch.Generator(device=device).manual_seed(0)
    built = {case.case: build(case, device, gen) for case in cases}
    function = cases[0].function
    if function == "mixed_batch":  # apart: the prefill call, then the decode call
        parts = [built["prefill"], built["decode"]]
        built["apart"] = {}
        for impl in ("ours", "sdpa_cudnn"):
            calls = [p[impl].get("fn") for p in parts]
            if all(calls):
                built["apart"][impl] = {
                    "fn": lambda calls=calls: [f() for f in calls],
                    "api": " then ".join(p[impl]["api"] for p in parts),
                    "max_err": max(p[impl]["max_err"] for p in parts),
                }
            else:
                why = [p[impl].get("skipped") or p[impl].get("error") for p in parts]
                built["apart"][impl] = {"skipped": "; ".join(dict.fromkeys(w for w in why if w))}
    recs, fns = {}, {}  # by "case impl"; fns: those checked ok, timed on a GPU
    for case, impls in built.items():
        for impl, entry in impls.items():
            rec = {"function": function, "case": case, "impl": impl}
            rec |= {k: val for k, val in entry.items() if k != "fn"}
            recs[f"{case} {impl}"] = rec
            if "max_err" in rec:
                rec["check"] = "ok" if rec["max_err"] <= CHECK_TOL else "FAILED"
                if rec["check"] == "ok":
                    fns[f"{case} {impl}"] = entry["fn"]
    if device.type == "cuda":  # each fn under no SDPA backend of in_turns': it picks its own
        timed = {name: recs[name] for name in fns}
        core.in_turns(timed, fns, rounds, impls=dict.fromkeys(fns))
    return list(recs.values())


def outcome(rec: dict) -> str:
    """A measured record in a few words: its time, or why there is none."""
    if "graph_ms" in rec:
        return f"{rec['graph_ms'] * 1e3:,.1f} us"
    return rec.get("skipped") or rec.get("error") or rec.get("graph_error") or rec["check"]


def measure(*, smoke: bool, rounds: int = ROUNDS) -> dict:
    """Every variant, in order; the record bench.exam --measure writes."""
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    cases = [smoke_case(c) if smoke else c for c in CASES]
    key = json.loads(PREDICTIONS.read_text())["environment"]
    record = {
        "environment": environment(),
        "smoke": smoke,
        "predictions": {"file": "data/exam-predictions.json"}
        | {k: key[k] for k in ("commit", "date")},
        "timing": core.GRAPH_TIMING if gpu else CPU_TIMING,
        "check": f"max |O - attention_ref| in float32 on some rows (the first and the last "
        f"sequence, the first kv head's group, at most 64 last rows) <= {CHECK_TOL}",
        "copy_bytes_per_s": [core.copy_rate()] if gpu else [],
        "cases": [],
    }
    functions = list(dict.fromkeys(c.function for c in cases))
    for i, function in enumerate(functions, 1):
        start = time.perf_counter()
        recs = measure_variant([c for c in cases if c.function == function], device, rounds)
        record["cases"] += recs
        said = "; ".join(f"{r['case']} {r['impl']} {outcome(r)}" for r in recs)
        took = time.perf_counter() - start
        print(f"[{i}/{len(functions)}] {function} ({took:.0f} s): {said}", flush=True)
    if gpu:
        record["copy_bytes_per_s"].append(core.copy_rate())
    return record


def main(argv: list[str] | None = None) -> None:
    predict, measured = (f.relative_to(ROOT) for f in (PREDICTIONS, MEASURED))
    flags = {"predict": f"write {predict}", "measure": f"run the cases ({measured})"}
    parser = core.arguments(__doc__, required=False, **flags, smoke="with --measure: tiny shapes")
    args = parser.parse_args(argv)
    if args.predict == args.measure:
        parser.error("say --predict or --measure")
    if args.predict:
        write_predictions(args.out or PREDICTIONS)
        return
    if args.smoke and args.out is None:
        parser.error("--smoke writes only where --out says (never data/)")
    if not torch.cuda.is_available():
        if not args.smoke:
            parser.error("--measure needs a CUDA GPU (or --smoke, which runs tiny shapes anywhere)")
        # no GPU: the kernels run in Triton's interpreter, which must be chosen before triton is
        # imported (not at this module's import: the figures import it too, and must not get it)
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("triton was imported before TRITON_INTERPRET=1 could be set: set it")
        os.environ["TRITON_INTERPRET"] = "1"
    record = measure(smoke=args.smoke)
    save(args.out or MEASURED, record)


if __name__ == "__main__":
    main()

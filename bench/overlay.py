"""Every case of the roofline overlay (bench.bytes.CASES) timed on the GPU, then profiled under
Nsight Compute with the same Flash tiles (bench.bytes), for Lab 01 and Results.

    python -m bench.overlay                   # on the H200 (ncu needs counter access: README)
    python -m bench.overlay --out DIR         # into DIR instead of data/
"""

import json
import time

import torch

from bench import bytes as measure_bytes
from bench.core import DATA, arguments, environment, save, time_ms


def totals(kernels: list[dict]) -> dict[str, float]:
    """Each metric summed over a case's kernels (None where ncu gave no value)."""
    metrics = dict.fromkeys(
        m for k in kernels for m, v in k.items() if m != "kernel" and v is not None
    )
    return {m: sum((k[m] for k in kernels if k.get(m) is not None), 0.0) for m in metrics}


def time_case(fn) -> dict[str, float]:
    """Two times, in seconds. device: CUDA-graph replay of back-to-back calls
    (triton.testing.do_bench_cudagraph, median of 10 replays): the kernels alone, with no host
    work between them and the L2 as the previous call left it. call: each call timed from Python
    (triton.testing.do_bench, median, L2 flushed before each call): what a caller waits, the
    wrapper's host work included when it outlasts the kernels."""
    q = [0.5, 0.2, 0.8]
    device, call = (
        time_ms(fn, graph=True, rep=20, quantiles=q),
        time_ms(fn, warmup=10, rep=40, quantiles=q),
    )
    return {
        f"{name}{suffix}_s": ms / 1e3
        for name, times in (("device", device), ("call", call))
        for suffix, ms in zip(("", "_q20", "_q80"), times, strict=True)
    }


def main() -> None:
    args = arguments(__doc__, DATA, smoke="the MHA cases at N = 64 only").parse_args()
    out, cases = args.out, measure_bytes.CASES
    if args.smoke:
        cases = [c for c in cases if c.heads == "MHA" and c.n == 64]
    timed, errors, pins = {}, {}, {}
    t0 = time.time()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    time_ms(lambda: a @ a, rep=3000)  # products for 3 s, so that the clocks have ramped up
    for attempt in ("first", "kept"):  # the second pass is kept; the first is recorded beside it
        for case in cases:
            if case.id in errors:
                continue
            try:
                with torch.no_grad():
                    fn, params = measure_bytes.prepared(case)
                    torch.cuda.synchronize()
                    times = time_case(fn)
            except Exception as e:  # recorded: the data file says which case failed, and why
                errors[case.id] = f"{type(e).__name__}: {e}"[:300]
                print(f"{case.id}: FAILED {errors[case.id]}", flush=True)
                continue
            if attempt == "first":
                timed[case.id] = {"first_pass": times}
                continue
            timed[case.id].update(params=params, **times)
            if case.impl == "flash":
                pins[case.id] = params
            us = {k: f"{times[k + '_s'] * 1e6:.1f} us" for k in ("device", "call")}
            print(f"{case.id}: {us} {params} ({time.time() - t0:.0f} s)", flush=True)
    (out / ".pins.json").write_text(json.dumps(pins))
    record = {"environment": environment(), "cases": timed, "errors": errors}
    save(out / "roofline-overlay-h200.json", record)  # kept if ncu fails
    ids = ",".join(c.id for c in cases) if args.smoke else "-"
    profiled = measure_bytes.measure(out / "bytes-h200.json", str(out / ".pins.json"), ids=ids)
    for case_id, entry in profiled["cases"].items():
        if (rec := timed.get(case_id)) is not None:
            rec |= {mode: totals(entry.get(mode, [])) for mode in ("all", "none")}
            rec["kernels"] = [k["kernel"] for k in entry.get("all", [])]
            if entry["params"] != rec.get("params"):
                rec["params_under_ncu"] = entry["params"]
    record |= {
        "timing": " ".join(time_case.__doc__.split(". ", 1)[1].split()),
        "errors": {**errors, **profiled["errors"]},
        "ncu": profiled["commands"],
    }
    save(out / "roofline-overlay-h200.json", record)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

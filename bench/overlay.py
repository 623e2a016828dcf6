"""Time every case of the roofline overlay (bench/bytes.py's CASES) on the GPU, then profile the
same cases under Nsight Compute with the same Flash tiles (bench/bytes.py); writes
data/roofline-overlay-h200.json and data/bytes-h200.json. `python -m figures.overlay` draws them.

    python -m bench.overlay                   # on the H200 (ncu needs counter access: README)
    python -m bench.overlay --out-dir DIR     # into DIR instead of data/
"""

import argparse
import json
import time
from pathlib import Path

import torch

from bench.bytes import CASES
from bench.core import DATA, environment

# ------------------------------------------------------------------------------------


def totals(kernels: list[dict]) -> dict[str, float]:
    """Each metric summed over a case's kernels (None where ncu gave no value)."""
    out: dict[str, float] = {}
    for k in kernels:
        for metric, value in k.items():
            if metric != "kernel" and value is not None:
                out[metric] = out.get(metric, 0.0) + value
    return out


def warm_up_gpu(seconds: float = 3.0) -> None:
    """Matrix products for a few seconds, so that the clocks (left alone) have ramped up."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def time_case(fn) -> dict[str, float]:
    """Two times, in seconds. device: CUDA-graph replay of back-to-back calls
    (triton.testing.do_bench_cudagraph, median of 10 replays): the kernels alone, with no host
    work between them and the L2 as the previous call left it. call: each call timed from Python
    (triton.testing.do_bench, median, L2 flushed before each call): what a caller waits, the
    wrapper's host work included when it outlasts the kernels."""
    from bench.core import time_ms

    dev = time_ms(fn, graph=True, rep=20, quantiles=[0.5, 0.2, 0.8])
    call = time_ms(fn, warmup=10, rep=40, quantiles=[0.5, 0.2, 0.8])
    return {
        "device_s": dev[0] / 1e3,
        "device_q20_s": dev[1] / 1e3,
        "device_q80_s": dev[2] / 1e3,
        "call_s": call[0] / 1e3,
        "call_q20_s": call[1] / 1e3,
        "call_q80_s": call[2] / 1e3,
    }


def measure(out_dir: Path, log=print) -> None:
    """Time every case twice over (the second pass is kept; the first is recorded beside it),
    then profile the same cases under ncu with the same Flash tiles; write both data files into
    out_dir."""
    from bench import bytes as measure_bytes

    out_dir.mkdir(parents=True, exist_ok=True)
    timed, errors, pins = {}, {}, {}
    t0 = time.time()
    warm_up_gpu()
    for attempt in ("first", "kept"):
        for case in CASES:
            if case.id in errors:
                continue
            try:
                with torch.no_grad():
                    fn = measure_bytes.build(case)
                    params = measure_bytes.probe(case, fn)
                    torch.cuda.synchronize()
                    times = time_case(fn)
            except Exception as e:  # recorded: the data file says which case failed, and why
                errors[case.id] = f"{type(e).__name__}: {e}"[:300]
                log(f"{case.id}: FAILED {errors[case.id]}")
                continue
            if attempt == "first":
                timed[case.id] = {"first_pass": times}
                continue
            timed[case.id].update(params=params, **times)
            if case.impl == "flash":
                pins[case.id] = params
            log(
                f"{case.id}: device {times['device_s'] * 1e6:.1f} us, call "
                f"{times['call_s'] * 1e6:.1f} us {params} ({time.time() - t0:.0f} s)"
            )
    pins_path = out_dir / ".pins.json"
    pins_path.write_text(json.dumps(pins))
    (out_dir / "roofline-overlay-h200.json").write_text(
        json.dumps(  # kept if ncu fails
            {"environment": environment(), "cases": timed, "errors": errors}, indent=1
        )
        + "\n"
    )
    profiled = measure_bytes.measure(out_dir / "bytes-h200.json", str(pins_path), log=log)
    for case_id, entry in profiled["cases"].items():
        if case_id in timed:
            timed[case_id]["all"] = totals(entry.get("all", []))
            timed[case_id]["none"] = totals(entry.get("none", []))
            timed[case_id]["kernels"] = [k["kernel"] for k in entry.get("all", [])]
            if entry["params"] != timed[case_id].get("params"):
                timed[case_id]["params_under_ncu"] = entry["params"]
    record = {
        "environment": environment(),
        "timing": " ".join(time_case.__doc__.split(". ", 1)[1].split()),
        "cases": timed,
        "errors": {**errors, **profiled["errors"]},
        "ncu": profiled["commands"],
    }
    (out_dir / "roofline-overlay-h200.json").write_text(json.dumps(record, indent=1) + "\n")
    log(f"done in {time.time() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=DATA)
    args = parser.parse_args()
    measure(args.out_dir, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()

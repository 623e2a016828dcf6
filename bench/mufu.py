"""Measure the exponential rate of the special-function units (MUFU): exp2 per second.

A Triton kernel keeps many independent values in registers and applies x -> 2^(-x) to each of
them again and again, so that nothing but the exponentials limits it: no memory traffic inside
the loop (one load and one store per value, at the ends), no tensor cores, a negation the
instruction absorbs. The map takes [0, 1] into [0.5, 1], so the values stay normal and bounded.
Each run is timed with triton.testing.do_bench (median); the rate is the fastest configuration's
exp2 count over its median time. Theory 00's exponential roof uses it
(minimodel.ceilings.exp_roof; figures/core.py reads the file).

    python -m bench.mufu                  # on a GPU: writes data/mufu-h200.json
    python -m bench.mufu --out x.json     # somewhere else
    TRITON_INTERPRET=1 python -m bench.mufu --smoke   # CPU check: tiny, writes nothing

The environment (GPU, torch, triton, commit, date, SM count, the SM clocks nvidia-smi reports) is
recorded beside the numbers. The smoke mode runs the same kernel in Triton's interpreter on a tiny
grid, checks its result against a float64 reference and prints the JSON record; its "rate" times
the interpreter, not a GPU, and it never writes under data/.
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from bench.core import environment

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "data" / "mufu-h200.json"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _exp2_chains(x_ptr, out_ptr, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """BLOCK independent chains per program, each iters * UNROLL exponentials long."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(iters):
        for _ in tl.static_range(UNROLL):
            x = tl.math.exp2(-x)  # one MUFU exponential per value; the negation is free
    tl.store(out_ptr + offs, x)


def reference(x: torch.Tensor, steps: int) -> torch.Tensor:
    """The same chain in float64."""
    y = x.double()
    for _ in range(steps):
        y = torch.exp2(-y)
    return y


def run_config(
    device: torch.device,
    programs: int,
    block: int,
    iters: int,
    unroll: int,
    num_warps: int,
    reps: int,
) -> dict:
    """Time one configuration; check its output against the float64 chain."""
    n = programs * block
    gen = torch.Generator().manual_seed(27)
    x = torch.rand(n, generator=gen, dtype=torch.float32).to(device)
    out = torch.empty_like(x)

    def launch() -> None:
        _exp2_chains[(programs,)](x, out, iters, BLOCK=block, UNROLL=unroll, num_warps=num_warps)

    launch()
    check = min(n, 4096)  # the chain contracts (|d/dx 2^-x| < 0.7): errors do not grow
    err = (out[:check].double().cpu() - reference(x[:check].cpu(), iters * unroll)).abs().max()
    if not err < 1e-4:
        raise RuntimeError(
            f"exp2 chain is wrong: max error {err:.3g} (programs={programs}, "
            f"block={block}, iters={iters}, unroll={unroll})"
        )
    if device.type == "cuda":
        from bench.core import time_ms

        runs = [time_ms(launch, warmup=50, rep=300) for _ in range(reps)]
    else:  # the interpreter: wall time, only to exercise the code path
        runs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            launch()
            runs.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(runs)
    count = n * iters * unroll
    return {
        "programs": programs,
        "block": block,
        "iters": iters,
        "unroll": unroll,
        "num_warps": num_warps,
        "exp2": count,
        "ms_runs": runs,
        "ms": ms,
        "exp2_per_s": count / (ms * 1e-3),
        "max_err": float(err),
    }


def nvidia_smi(fields: str) -> list[str] | None:
    """Values of `nvidia-smi --query-gpu=fields` for GPU 0, or None where it is unavailable."""
    try:
        res = subprocess.run(
            [
                "nvidia-smi",
                f"--query-gpu={fields}",
                "--format=csv,noheader,nounits",
                "-i",
                str(torch.cuda.current_device()),
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [v.strip() for v in res.stdout.strip().split(",")]


def sample_clock(samples: list[float], stop: threading.Event) -> None:
    """Read the SM clock every half second while the benchmark runs."""
    while not stop.wait(0.5):
        value = nvidia_smi("clocks.sm")
        if value and value[0].replace(".", "", 1).isdigit():
            samples.append(float(value[0]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny grid, for TRITON_INTERPRET=1 on a CPU; writes nothing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where to write the JSON (default {DEFAULT_OUT.relative_to(ROOT)})",
    )
    parser.add_argument("--reps", type=int, default=5, help="do_bench medians per config")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")

    gpu = torch.cuda.is_available() and not INTERPRET
    if args.smoke:
        if not INTERPRET:
            parser.error("--smoke runs the kernel in Triton's interpreter: set TRITON_INTERPRET=1")
        device, sms = torch.device("cpu"), 1
        configs = [(2, 64, 3, 4, 4)]  # programs, block, iters, unroll, warps
    elif not gpu:
        sys.exit(
            "no CUDA GPU: run on one, or try the CPU check with "
            "TRITON_INTERPRET=1 python -m bench.mufu --smoke"
        )
    else:
        device = torch.device("cuda")
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        # 2,048 threads per SM at most: 16 programs of 4 warps, or 8 of 8, fill every SM; each
        # thread holds block / (32 warps) chains, the independent work that hides the latency.
        configs = [
            (sms * 16, 1024, 512, 8, 4),
            (sms * 8, 2048, 512, 8, 8),
            (sms * 16, 2048, 256, 8, 4),
            (sms * 32, 1024, 512, 8, 4),
        ]

    runs, clocks, stop = [], [], threading.Event()
    sampler = threading.Thread(target=sample_clock, args=(clocks, stop), daemon=True)
    if gpu:
        sampler.start()
    try:
        for i, (programs, block, iters, unroll, warps) in enumerate(configs, 1):
            r = run_config(
                device, programs, block, iters, unroll, warps, 1 if args.smoke else args.reps
            )
            runs.append(r)
            print(
                f"[{i}/{len(configs)}] programs={programs} block={block} warps={warps}: "
                f"{r['ms']:.3f} ms, {r['exp2_per_s'] / 1e12:.3f} T exp2/s",
                flush=True,
            )
    finally:
        stop.set()
        if gpu:
            sampler.join()

    best = max(runs, key=lambda r: r["exp2_per_s"])
    env = environment(sm_count=sms)
    if not gpu:
        env["device"] = f"CPU ({platform.machine()}), Triton interpreter"
    mufu = {
        "exp2_per_s": best["exp2_per_s"],
        "config": {k: best[k] for k in ("programs", "block", "iters", "unroll", "num_warps")},
    }
    if gpu:
        smi = nvidia_smi("clocks.max.sm,driver_version")
        env["driver"] = smi[1] if smi else None
        env["sm_clock_max_mhz"] = float(smi[0]) if smi and smi[0].isdigit() else None
        env["sm_clock_mhz_during_run"] = clocks
        if env["sm_clock_max_mhz"]:
            mufu["exp2_per_clock_per_sm_at_max_clock"] = best["exp2_per_s"] / (
                sms * env["sm_clock_max_mhz"] * 1e6
            )
        if clocks:
            clock = statistics.median(clocks) * 1e6
            mufu["exp2_per_clock_per_sm_at_median_clock"] = best["exp2_per_s"] / (sms * clock)
    record = {
        "environment": env,
        "method": "Triton kernel chaining x -> 2^(-x) (tl.math.exp2) over independent values in "
        "registers; triton.testing.do_bench median per round, median over rounds; "
        "rate = exp2 count / time of the fastest configuration",
        "mufu": mufu,
        "runs": runs,
    }
    text = json.dumps(record, indent=1) + "\n"
    if args.smoke:
        print(text)
        if args.out is not None:
            out = args.out.resolve()
            if out.is_relative_to(ROOT / "data"):
                sys.exit(f"--smoke never writes under data/ (got {args.out})")
            out.write_text(text)
        return
    out = args.out or DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    per_clock = mufu.get("exp2_per_clock_per_sm_at_max_clock", math.nan)
    print(
        f"wrote {out}: {best['exp2_per_s'] / 1e12:.3f} T exp2/s "
        f"({per_clock:.2f} per clock per SM at the maximum SM clock)"
    )


if __name__ == "__main__":
    main()

"""The exponential rate of the special-function units (MUFU), exp2 per second, on the GPU primer's
method ("The special-function units"); read by minimodel.ceilings.exp_roof.

    python -m bench.mufu                  # on a GPU: writes data/mufu-h200.json
"""

import statistics
import subprocess
import threading

import torch
import triton
import triton.language as tl

from bench.core import DATA, arguments, environment, save, time_ms

CONFIG = ("programs", "block", "iters", "unroll", "num_warps")


@triton.jit
def _exp2_chains(x_ptr, out_ptr, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """BLOCK independent chains per program, each iters * UNROLL exponentials long."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(iters):
        for _ in tl.static_range(UNROLL):
            x = tl.math.exp2(-x)  # one MUFU exponential per value; the negation is free
    tl.store(out_ptr + offs, x)


def run_config(programs: int, block: int, iters: int, unroll: int, num_warps: int) -> dict:
    """Time one configuration (five do_bench medians); check its output against the same chain
    in float64."""
    n = programs * block
    x = torch.rand(n, generator=torch.Generator().manual_seed(27)).cuda()
    out = torch.empty_like(x)

    def launch() -> None:
        _exp2_chains[(programs,)](x, out, iters, BLOCK=block, UNROLL=unroll, num_warps=num_warps)

    launch()
    ref = x[:4096].cpu().double()  # the chain contracts (|d/dx 2^-x| < 0.7): errors do not grow
    for _ in range(iters * unroll):
        ref = torch.exp2(-ref)
    config = dict(zip(CONFIG, (programs, block, iters, unroll, num_warps), strict=True))
    err = (out[:4096].double().cpu() - ref).abs().max()
    if not err < 1e-4:
        raise RuntimeError(f"exp2 chain is wrong: max error {err:.3g} ({config})")
    runs = [time_ms(launch, warmup=50, rep=300) for _ in range(5)]
    ms, count = statistics.median(runs), n * iters * unroll
    config |= {"exp2": count, "ms_runs": runs, "ms": ms}
    print(f"{config}: {count / (ms * 1e-3) / 1e12:.3f} T exp2/s", flush=True)
    return config | {"exp2_per_s": count / (ms * 1e-3), "max_err": float(err)}


def nvidia_smi(fields: str) -> list[str] | None:
    """Values of `nvidia-smi --query-gpu=fields` for GPU 0, or None where it is unavailable."""
    gpu = str(torch.cuda.current_device())
    command = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", gpu]
    try:
        res = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return [v.strip() for v in res.stdout.strip().split(",")]


def main() -> None:
    args = arguments(__doc__, DATA / "mufu-h200.json").parse_args()
    sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    # 2,048 threads per SM at most: 16 programs of 4 warps, or 8 of 8, fill every SM; each thread
    # holds block / (32 warps) chains, the independent work that hides the latency.
    configs = [(sms * 16, 1024, 512, 8, 4), (sms * 8, 2048, 512, 8, 8), (sms * 16, 2048, 256, 8, 4)]
    configs.append((sms * 32, 1024, 512, 8, 4))  # (programs, block, iters, unroll, warps) each
    clocks, stop = [], threading.Event()

    def sample_clock() -> None:  # the SM clock every half second while the benchmark runs
        while not stop.wait(0.5):
            value = nvidia_smi("clocks.sm")
            if value and value[0].replace(".", "", 1).isdigit():
                clocks.append(float(value[0]))

    sampler = threading.Thread(target=sample_clock, daemon=True)
    sampler.start()
    try:
        runs = [run_config(*c) for c in configs]
    finally:
        stop.set()
        sampler.join()
    best = max(runs, key=lambda r: r["exp2_per_s"])
    smi = nvidia_smi("clocks.max.sm,driver_version")
    max_mhz = float(smi[0]) if smi and smi[0].isdigit() else None
    clock = {"sm_clock_max_mhz": max_mhz, "sm_clock_mhz_during_run": clocks}
    env = environment(sm_count=sms, driver=smi[1] if smi else None, **clock)
    mufu = {"exp2_per_s": best["exp2_per_s"], "config": {k: best[k] for k in CONFIG}}
    for name, mhz in (("max", max_mhz), ("median", clocks and statistics.median(clocks))):
        if mhz:
            mufu[f"exp2_per_clock_per_sm_at_{name}_clock"] = best["exp2_per_s"] / (sms * mhz * 1e6)
    method = (
        "Triton kernel chaining x -> 2^(-x) (tl.math.exp2) over independent values in "
        "registers; triton.testing.do_bench median per round, median over rounds; rate = "
        "exp2 count / time of the fastest configuration"
    )
    save(args.out, {"environment": env, "method": method, "mufu": mufu, "runs": runs})


if __name__ == "__main__":
    main()

# ~/~ begin <<docs/gpu-primer.md#src/minimodel/timing.py>>[init]
"""One timer for every benchmark: GPU time under CUDA-graph replay, host time per call.

Tangled from docs/gpu-primer.md (Timing a call).
"""

import statistics
import time
from collections.abc import Callable

import torch

from minimodel.checks import check_int

__all__ = ["eager_time_us", "gpu_time_ms", "host_time_us"]

# ~/~ begin <<docs/gpu-primer.md#timing-timing>>[init]
def _check(what: str, fn: object) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} times CUDA work and needs a CUDA GPU; none is available")
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
# ~/~ end

# ~/~ begin <<docs/gpu-primer.md#timing-gpu>>[init]
def gpu_time_ms(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median GPU time of fn() in milliseconds, replayed in a CUDA graph (no host time inside).

    fn must be capturable: no host synchronisation, no new allocations that outlive it."""
    import triton.testing

    _check("gpu_time_ms", fn)
    check_int("rep_ms", rep_ms, 1)
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
# ~/~ end

# ~/~ begin <<docs/gpu-primer.md#timing-host>>[init]
def host_time_us(fn: Callable[[], object], calls: int = 200, rounds: int = 5,
                 tries: int = 6) -> float:
    """CPU wall time of one fn() call in microseconds, the GPU held busy by a sleeping kernel
    so that no call waits for the GPU; the dispatch of a custom op counts. The median of
    `rounds` rounds of `calls` calls each."""
    _check("host_time_us", fn)
    for name, value in (("calls", calls), ("rounds", rounds), ("tries", tries)):
        check_int(name, value, 1)
    fn()  # compile, allocate and cache before timing
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    guess_s = time.perf_counter() - start
    torch.cuda.synchronize()
    cycles = int(2 * guess_s * 2e9) + 1_000_000
    times = []
    for _ in range(tries * rounds):
        torch.cuda._sleep(cycles)
        asleep = torch.cuda.Event()
        asleep.record()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        still_asleep = not asleep.query()
        torch.cuda.synchronize()
        if not still_asleep:  # the queue drained: a call may have waited; sleep longer
            cycles *= 2
            continue
        times.append(elapsed / calls * 1e6)
        if len(times) == rounds:
            return statistics.median(times)
    raise RuntimeError(f"host_time_us: the GPU finished its sleep before {calls} calls were "
                       f"issued, {tries * rounds - len(times)} times; the calls must be waiting "
                       "for the GPU")


def eager_time_us(fn: Callable[[], object], calls: int = 200, rounds: int = 5) -> float:
    """What a Python loop of fn() calls sees, in microseconds per call: the wall time of `calls`
    calls back to back and one synchronisation, the median of `rounds` rounds. It is the larger
    of the host time and the GPU time, plus whatever of each the other does not hide."""
    _check("eager_time_us", fn)
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)
# ~/~ end
# ~/~ end

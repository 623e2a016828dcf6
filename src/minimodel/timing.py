# ~/~ begin <<docs/gpu-primer.md#src/minimodel/timing.py>>[init]
"""One timer for every benchmark: GPU time under CUDA-graph replay, host time per call.

Tangled from docs/gpu-primer.md (Timing a call).
"""

import statistics
import time
from collections.abc import Callable

import torch

from minimodel.checks import check_int

__all__ = ["eager_time_us", "eager_times_us", "gpu_time_ms", "host_time_us", "host_times_us"]

# ~/~ begin <<docs/gpu-primer.md#timing-gpu>>[init]
def gpu_time_ms(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median GPU time of fn() in milliseconds, replayed in a CUDA graph (no host time inside).

    fn must be capturable: no host synchronisation, no new allocations that outlive it."""
    import triton.testing

    _checked("gpu_time_ms", {"fn": fn}, rep_ms=rep_ms)
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
# ~/~ end

# ~/~ begin <<docs/gpu-primer.md#timing-host>>[init]
def host_time_us(fn: Callable[[], object], calls: int = 200, rounds: int = 5,
                 tries: int = 6) -> float:
    """CPU wall time of one fn() call in microseconds, the GPU held busy by a sleeping kernel
    so that no call waits for the GPU; the dispatch of a custom op counts. The median of
    `rounds` rounds of `calls` calls each."""
    return host_times_us({"fn": fn}, calls, rounds, tries)["fn"]


def host_times_us(fns: dict[str, Callable[[], object]], calls: int = 200, rounds: int = 5,
                  tries: int = 6) -> dict[str, float]:
    """host_time_us of each of fns, timed in turns (_in_turns)."""
    names = _checked("host_times_us", fns, calls=calls, rounds=rounds, tries=tries)
    eager = eager_times_us(fns, calls, 1)  # compiles, allocates and caches before timing too
    cycles = {name: int(2 * us * calls * 1e-6 * 2e9) + 1_000_000 for name, us in eager.items()}
    failed = dict.fromkeys(names, 0)

    def one_round(name: str) -> float | None:
        fn = fns[name]
        torch.cuda._sleep(cycles[name])
        asleep = torch.cuda.Event()
        asleep.record()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        still_asleep = not asleep.query()
        torch.cuda.synchronize()
        if still_asleep:
            return elapsed / calls * 1e6
        failed[name] += 1  # the queue drained: a call may have waited; sleep longer
        cycles[name] *= 2
        if failed[name] == tries * rounds:
            raise RuntimeError(
                f"host_time_us: the GPU finished its sleep before {calls} calls of {name} "
                f"were issued, {failed[name]} times; the calls must be waiting for the GPU")
        return None

    return _in_turns(names, rounds, one_round)


def eager_time_us(fn: Callable[[], object], calls: int = 200, rounds: int = 5) -> float:
    """What a Python loop of fn() calls sees, in microseconds per call: the wall time of `calls`
    calls back to back and one synchronisation, the median of `rounds` rounds. It is the larger
    of the host time and the GPU time, plus whatever of each the other does not hide."""
    return eager_times_us({"fn": fn}, calls, rounds)["fn"]


def eager_times_us(fns: dict[str, Callable[[], object]], calls: int = 200,
                   rounds: int = 5) -> dict[str, float]:
    """eager_time_us of each of fns, timed in turns as host_times_us times them."""
    names = _checked("eager_times_us", fns, calls=calls, rounds=rounds)
    for name in names:
        fns[name]()
    torch.cuda.synchronize()

    def one_round(name: str) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fns[name]()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    return _in_turns(names, rounds, one_round)


def _in_turns(names: list[str], rounds: int, one_round) -> dict[str, float]:
    """The median of `rounds` readings one_round(name) of each name, taken in turns: each pass
    reads every name still short of `rounds` once (a None reading is retaken), starting one place
    further along the names than the pass before, so that a drift of the host's speed reaches
    all of them alike and their differences can be read within one run."""
    times: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    while any(len(t) < rounds for t in times.values()):
        for name in names[turn:] + names[:turn]:
            if len(times[name]) < rounds and (reading := one_round(name)) is not None:
                times[name].append(reading)
        turn = (turn + 1) % len(names)
    return {name: statistics.median(t) for name, t in times.items()}


def _checked(what: str, fns: object, **counts: int) -> list[str]:
    """fns' names after the checks every timer makes: a GPU, callables, counts >= 1."""
    if not isinstance(fns, dict) or not fns:
        raise TypeError(f"{what} takes a non-empty dict of name: callable, got {fns!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} times CUDA work and needs a CUDA GPU; none is available")
    for fn in fns.values():
        if not callable(fn):
            raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    for name, value in counts.items():
        check_int(name, value, 1)
    return list(fns)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/theory/00-motivation.md#src/minimodel/ceilings.py>>[init]
"""The roofs of the roofline: a device's ceilings (datasheet or measured) and attention's
exponential roof.

Tangled from docs/theory/00-motivation.md; edit the page, not this file.
"""

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minimodel.roofline import _check_positive, _is_finite_positive

__all__ = ["HARDWARE", "MUFU_EXP2_PER_CLOCK", "Ceilings", "exp_roof", "measure_ceilings",
           "mufu_rate"]

# ~/~ begin <<docs/theory/00-motivation.md#ceilings-class>>[init]
@dataclass(frozen=True)
class Ceilings:
    """The roofs of one device, plus the on-chip sizes that tile choices depend on."""

    name: str
    peak_flops: float  # pi, FLOP/s (dense fp16/bf16 matrix rate, or a measured matmul)
    bandwidth: float  # beta, bytes/s of device memory (HBM, or DRAM on a CPU)
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    source: str = ""
    exp_rate: float | None = None  # R_exp, exp2 per second of the special-function units
    sm_count: int | None = None
    clock_hz: float | None = None  # the SM clock that exp_rate assumes
    measured: bool = False  # measured on a device rather than read off a datasheet

    def __post_init__(self):
        for field in ("peak_flops", "bandwidth"):  # an infinite roof is no roof
            if not _is_finite_positive(getattr(self, field)):
                raise ValueError(f"ceilings must be positive and finite: {field} must be a "
                                 f"number in (0, inf), got {getattr(self, field)!r}")
        for field, value in (("exp_rate", self.exp_rate), ("clock_hz", self.clock_hz)):
            if value is not None and not _is_finite_positive(value):
                raise ValueError(f"{field} must be positive or None, got {value!r} "
                                 "(a finite number > 0)")
        for field in ("sm_count", "l2_bytes", "smem_per_sm_bytes"):
            if getattr(self, field) is not None:
                _check_positive(**{field: getattr(self, field)})

    @property
    def ridge(self) -> float:
        """I* = pi / beta: the intensity (FLOP/byte) where the two roofs meet."""
        return self.peak_flops / self.bandwidth

    def attention_roof(self, head_dim: int, *, overlapped: bool = False) -> float:
        """The compute roof of attention at head dim d: pi lowered by the exponentials."""
        if self.exp_rate is None:
            raise ValueError(f"{self.name!r} has no exponential rate (exp_rate=None)")
        return exp_roof(head_dim, self.peak_flops, self.exp_rate, overlapped=overlapped)

    def attainable(
        self, intensity: float, *, head_dim: int | None = None, overlapped: bool = False
    ) -> float:
        """min(pi, I * beta): the best rate a kernel of intensity I can reach. With head_dim,
        attention's exponential roof replaces pi."""
        if not intensity > 0:
            raise ValueError(f"intensity must be positive, got {intensity}")
        roof = (self.peak_flops if head_dim is None
                else self.attention_roof(head_dim, overlapped=overlapped))
        return min(roof, intensity * self.bandwidth)
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#ceilings-measure>>[init]
def _median_seconds(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median time of one fn() in seconds. On a GPU, triton.testing.do_bench: eager launches,
    the L2 cache flushed before each (its run count set by time, not reps); on a CPU the wall
    clock over reps runs, after two warm-up runs."""
    if device.type == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, return_mode="median") / 1e3
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_ceilings(
    device: str | torch.device | None = None,
    *,
    dtype: torch.dtype | None = None,
    matmul_n: int | None = None,
    copy_bytes: int | None = None,
    reps: int = 10,
) -> Ceilings:
    """Measure (peak matmul FLOP/s, copy bytes/s) of `device` (default: CUDA if present).

    Defaults: on a GPU an 8192^3 fp16 matmul and a 2 GiB copy; on a CPU a 1024^3 float32
    matmul and a 256 MiB copy. reps: the runs a CPU median takes (a GPU's are do_bench's).
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = device.type == "cuda"
    dtype = dtype if dtype is not None else (torch.float16 if gpu else torch.float32)
    n = matmul_n if matmul_n is not None else (8192 if gpu else 1024)
    copy_bytes = copy_bytes if copy_bytes is not None else (2 * 2**30 if gpu else 256 * 2**20)
    if n < 1 or copy_bytes < 1024 or reps < 1:
        raise ValueError(
            f"need matmul_n >= 1, copy_bytes >= 1024, reps >= 1; got {n}, {copy_bytes}, {reps}"
        )

    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))  # never zeros
    matmul_s = _median_seconds(lambda: a @ b, device, reps)
    src = torch.randn(copy_bytes // 4, device=device)
    dst = torch.empty_like(src)
    copy_s = _median_seconds(lambda: dst.copy_(src), device, reps)

    name = torch.cuda.get_device_name(device) if gpu else f"CPU ({platform.machine()})"
    props = torch.cuda.get_device_properties(device) if gpu else None
    return Ceilings(
        f"{name} (measured)",
        peak_flops=2 * n**3 / matmul_s,
        bandwidth=2 * src.nbytes / copy_s,  # read + write
        l2_bytes=getattr(props, "L2_cache_size", None),
        smem_per_sm_bytes=getattr(props, "shared_memory_per_multiprocessor", None),
        sm_count=getattr(props, "multi_processor_count", None),
        source=f"measure_ceilings: {n}^3 {dtype} matmul, {src.nbytes} B copy, median "
        + ("of triton.testing.do_bench" if gpu else f"of {reps}"),
        measured=True,
    )
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#ceilings-exp-roof>>[init]
MUFU_EXP2_PER_CLOCK = 16  # exp2 per clock per SM, compute capability 8.0 and 9.0


def mufu_rate(sm_count: int, clock_hz: float, per_clock: int = MUFU_EXP2_PER_CLOCK) -> float:
    """R_exp = SMs x exp2 per clock per SM x clock: the special-function units' exp2 per second."""
    _check_positive(sm_count=sm_count, per_clock=per_clock)
    if not clock_hz > 0:
        raise ValueError(f"clock_hz must be positive, got {clock_hz}")
    return sm_count * per_clock * clock_hz


def exp_roof(
    head_dim: int, peak_flops: float, exp_rate: float, *, overlapped: bool = False
) -> float:
    """Attention's compute roof when each visible score costs 4d matmul FLOPs and one exp2.

    Not overlapped (exponentials and matrix products take turns): 4d / (4d / pi + 1 / R_exp).
    Overlapped perfectly: min(pi, 4d * R_exp), the slower of the two units.
    """
    _check_positive(head_dim=head_dim)
    if not (peak_flops > 0 and exp_rate > 0):
        raise ValueError(
            f"need peak_flops > 0 and exp_rate > 0, got peak_flops={peak_flops}, "
            f"exp_rate={exp_rate}"
        )
    flops_per_exp = 4 * head_dim
    if overlapped:
        return min(peak_flops, flops_per_exp * exp_rate)
    return flops_per_exp / (flops_per_exp / peak_flops + 1 / exp_rate)
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#ceilings-hardware>>[init]
KiB, MiB = 2**10, 2**20

# The datasheets' dense tensor rates are SMs x tensor FLOPs per clock per SM (4096 on Hopper, 2048
# on Ampere) x the boost clock they assume (H100 whitepaper, table 3); the exponential rates use
# the same clock, so each entry's two compute roofs belong to one operating point.
HARDWARE: dict[str, Ceilings] = {
    "H200": Ceilings(
        "H200 SXM", peak_flops=989.4e12, bandwidth=4.8e12, l2_bytes=60 * MiB,
        smem_per_sm_bytes=228 * KiB, sm_count=132, clock_hz=1.83e9,
        exp_rate=mufu_rate(132, 1.83e9),
        source="NVIDIA H200 datasheet (dense FP16/BF16 tensor core, HBM3e); L2 and SM count as "
        "reported by torch.cuda.get_device_properties on our H200; shared memory per SM from "
        "the CUDA C++ programming guide, compute capability 9.0 (227 KiB usable by one block); "
        "exp2 rate = SMs x 16 per clock (programming guide, arithmetic instructions) x 1.83 GHz, "
        "the clock of the tensor rate (132 x 4096 FLOP x 1.83 GHz = 989.4 TFLOP/s)",
    ),
    "H100": Ceilings(
        "H100 SXM", peak_flops=989.4e12, bandwidth=3.35e12, l2_bytes=50 * MiB,
        smem_per_sm_bytes=228 * KiB, sm_count=132, clock_hz=1.83e9,
        exp_rate=mufu_rate(132, 1.83e9),
        source="NVIDIA H100 datasheet (SXM5, dense FP16/BF16 tensor core, HBM3); L2, SM count "
        "and tensor-core clock from the Hopper architecture whitepaper; shared memory per SM "
        "from the CUDA C++ programming guide, compute capability 9.0; exp2 rate = SMs x 16 per "
        "clock x 1.83 GHz",
    ),
    "A100": Ceilings(
        "A100 SXM 80GB", peak_flops=312e12, bandwidth=2.039e12, l2_bytes=40 * MiB,
        smem_per_sm_bytes=164 * KiB, sm_count=108, clock_hz=1.41e9,
        exp_rate=mufu_rate(108, 1.41e9),
        source="NVIDIA A100 datasheet (SXM 80GB, dense FP16/BF16 tensor core, HBM2e); L2, SM "
        "count and boost clock from the Ampere architecture whitepaper; shared memory per SM "
        "from the CUDA C++ programming guide, compute capability 8.0 (163 KiB usable by one "
        "block); exp2 rate = SMs x 16 per clock x 1.41 GHz",
    ),
}
# ~/~ end
# ~/~ end

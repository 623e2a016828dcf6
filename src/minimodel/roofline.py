# ~/~ begin <<docs/theory/00-motivation.md#src/minimodel/roofline.py>>[init]
"""The roofline model: hardware ceilings, FLOP and byte counts for attention, and the plot.

Every FLOP and byte figure in minimodel comes from this module. Tangled from
docs/theory/00-motivation.md (the Flash byte model from docs/theory/02-flash-attention.md, the
MLA counts from docs/theory/04-gqa-mqa-mla.md); edit the pages, not this file.
"""

import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from minimodel.reference import check_mask_args

__all__ = [
    "HARDWARE", "MUFU_EXP2_PER_CLOCK", "Ceilings", "LayerCosts", "RooflinePoint",
    "arithmetic_intensity", "attention_flops", "attention_min_bytes", "decoder_layer_costs",
    "exp_roof", "flash_attention_bytes", "kv_cache_bytes", "measure_ceilings",
    "mla_cache_bytes", "mla_decode_bytes", "mla_decode_flops", "mufu_rate",
    "naive_attention_bytes", "plot_roofline", "visible_pairs",
]

# ~/~ begin <<docs/theory/00-motivation.md#roofline-ceilings>>[init]
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


# ~/~ begin <<docs/theory/00-motivation.md#roofline-measure>>[init]
def _median_seconds(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median wall time of fn() over reps runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
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
    matmul and a 256 MiB copy.
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
        source=f"measure_ceilings: {n}^3 {dtype} matmul, {src.nbytes} B copy, median of {reps}",
        measured=True,
    )
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-flops>>[init]
def visible_pairs(nq: int, nk: int, *, causal: bool = False, window: int | None = None) -> int:
    """|V| = sum_i |V(i)|: the visible (query, key) pairs, masks aligned bottom-right."""
    check_mask_args(causal, window)
    _check_positive(nq=nq, nk=nk)
    if not causal:
        return nq * nk
    # Query i stands at key position pos_i = i + nk - nq <= nk - 1 and sees min(pos_i + 1, W)
    # keys (none when pos_i < 0). Over pos = a ... nk - 1, with a = max(0, nk - nq), that is
    # S(nk) - S(a), S(n) = sum_{t=1}^{n} min(t, W): a closed form, O(1) for any size.
    def s(n: int) -> int:
        if window is None or n <= window:
            return n * (n + 1) // 2
        return window * (window + 1) // 2 + (n - window) * window

    return s(nk) - s(max(0, nk - nq))


def attention_flops(
    b: int, hq: int, nq: int, nk: int, d: int, *, causal: bool = False, window: int | None = None
) -> int:
    """F = 4 * B * Hq * d * |V|: the matmul FLOPs of the forward pass (QK^T and PV)."""
    _check_positive(b=b, hq=hq, d=d)
    return 4 * b * hq * d * visible_pairs(nq, nk, causal=causal, window=window)
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-bytes>>[init]
def naive_attention_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2
) -> int:
    """HBM bytes of three-kernel attention that writes and re-reads S and P."""
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    per_batch = hq * (2 * nq * d + 4 * nq * nk) + hkv * 2 * nk * d
    return elem_bytes * b * per_batch


def attention_min_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2
) -> int:
    """Compulsory HBM bytes: read Q, K, V once and write O once (the fused kernel's floor)."""
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    return elem_bytes * b * (2 * hq * nq * d + 2 * hkv * nk * d)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """I = F / bytes moved, in FLOP per byte: finite flops >= 0 over finite nbytes > 0."""
    if not ((flops == 0 or _is_finite_positive(flops)) and _is_finite_positive(nbytes)):
        raise ValueError(f"need finite flops >= 0 and nbytes > 0, got flops={flops!r}, "
                         f"nbytes={nbytes!r}")
    return flops / nbytes


def _is_finite_positive(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value) and value > 0)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_nonnegative(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-exp>>[init]
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


# ~/~ begin <<docs/theory/00-motivation.md#roofline-hardware>>[init]
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


# ~/~ begin <<docs/theory/02-flash-attention.md#roofline-flash-bytes>>[init]
def flash_attention_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, block_m: int,
    block_n: int | None = None, elem_bytes: int = 2, causal: bool = False,
    window: int | None = None, lse: bool = True,
) -> int:
    """HBM bytes of Lab 02's Flash forward if no tile is ever served from a cache: an upper bound.

    One program per (batch, query head, tile of block_m queries) reads its Q tile once, writes
    its O tile once and, with lse=True (Lab 02 always does), one float32 log-sum-exp per row. It
    reads every K and V tile of block_n keys in its key range [lo, hi): all of them without a
    mask; with causal/window only the whole tiles Lab 02 visits (bottom-right alignment). Rows
    past nq or nk are zero-filled by the TMA, not read. block_n matters only under a mask and is
    required there. Hkv changes nothing: every query head's programs read their kv head's tiles
    themselves, so GQA's saving shows in attention_min_bytes and, on a GPU, in the L2 cache.
    """
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, block_m=block_m,
                    elem_bytes=elem_bytes)
    check_mask_args(causal, window)
    if hq % hkv:
        raise ValueError(f"query heads Hq={hq} must be a multiple of kv heads Hkv={hkv}")
    if not isinstance(lse, bool):
        raise ValueError(f"lse must be a bool, got {lse!r}")
    if block_n is not None:
        _check_positive(block_n=block_n)
    elif causal:
        raise ValueError("causal=True needs block_n: which key tiles are visited depends on it")
    kv_rows = sum(_flash_key_rows(i0, nq, nk, block_m, block_n, causal, window)
                  for i0 in range(0, nq, block_m))  # summed over the query tiles of one head
    per_head = elem_bytes * (2 * nq * d + 2 * kv_rows * d) + (4 * nq if lse else 0)
    return b * hq * per_head


def _flash_key_rows(i0: int, nq: int, nk: int, block_m: int, block_n: int | None, causal: bool,
                    window: int | None) -> int:
    """Key rows that the query tile starting at row i0 loads: Lab 02's [lo, hi), in whole tiles."""
    if not causal:
        return nk
    shift = nk - nq  # query i stands at key position pos_i = i + shift
    pos_first, pos_last = i0 + shift, i0 + block_m - 1 + shift
    hi = max(min(nk, pos_last + 1), 0)  # keys past pos_last: invisible to the whole tile
    lo = 0 if window is None else max(0, pos_first - window + 1) // block_n * block_n
    if hi <= lo:
        return 0  # every row of the tile sees nothing (Nq > Nk): Q read, zeros written
    tiles = -(-(hi - lo) // block_n)  # the last tile is loaded whole, cut only at nk
    return min(lo + tiles * block_n, nk) - lo
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-decoder>>[init]
@dataclass(frozen=True)
class LayerCosts:
    """One decoder layer, one decode step (one new token per sequence)."""

    proj_flops: int  # projections + MLP, whole batch
    attn_flops: int  # QK^T and PV against the context, whole batch
    weight_bytes: int  # every weight read once, shared by the batch
    kv_bytes: int  # every sequence's K and V cache read once


def decoder_layer_costs(
    d_model: int, n_heads: int, n_kv_heads: int, context: int, *, batch: int = 1,
    mlp_ratio: int = 4, elem_bytes: int = 2,
) -> LayerCosts:
    """FLOPs and bytes of one decode step of one layer (the counts on Theory 00)."""
    _check_positive(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, context=context,
                    batch=batch, mlp_ratio=mlp_ratio, elem_bytes=elem_bytes)
    if d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError(
            f"need n_heads | d_model and n_kv_heads | n_heads, got d_model={d_model}, "
            f"n_heads={n_heads}, n_kv_heads={n_kv_heads}"
        )
    head_dim = d_model // n_heads
    d_kv = n_kv_heads * head_dim
    weights = 2 * d_model * d_model + 2 * d_model * d_kv + 2 * mlp_ratio * d_model**2
    return LayerCosts(
        proj_flops=2 * batch * weights,
        attn_flops=4 * batch * context * d_model,
        weight_bytes=elem_bytes * weights,
        kv_bytes=kv_cache_bytes(1, n_kv_heads, head_dim, context, batch=batch,
                                elem_bytes=elem_bytes),
    )


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, *, batch: int = 1,
    elem_bytes: int = 2,
) -> int:
    """A KV cache of `tokens` tokens per sequence: K and V, 2 * L * Hkv * d * E bytes a token."""
    _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, batch=batch,
                    elem_bytes=elem_bytes)
    _check_nonnegative(tokens=tokens)
    return 2 * n_layers * n_kv_heads * head_dim * elem_bytes * tokens * batch
# ~/~ end


# ~/~ begin <<docs/theory/04-gqa-mqa-mla.md#roofline-mla>>[init]
def mla_cache_bytes(
    n_layers: int, latent_dim: int, rope_dim: int, tokens: int, *, batch: int = 1,
    elem_bytes: int = 2,
) -> int:
    """MLA's cache: one latent c_j (latent_dim) and one shared RoPE key (rope_dim) a token/layer."""
    _check_positive(n_layers=n_layers, latent_dim=latent_dim, batch=batch, elem_bytes=elem_bytes)
    _check_nonnegative(rope_dim=rope_dim, tokens=tokens)
    return n_layers * (latent_dim + rope_dim) * elem_bytes * tokens * batch


def mla_decode_flops(b: int, n_heads: int, nk: int, latent_dim: int, rope_dim: int) -> int:
    """One new token per sequence over nk cached latents, up-projections folded into q and out:
    2 (d_c + d_R) FLOPs per key and head for the scores, 2 d_c for the values."""
    _check_positive(b=b, n_heads=n_heads, nk=nk, latent_dim=latent_dim)
    _check_nonnegative(rope_dim=rope_dim)
    return b * n_heads * nk * (2 * (latent_dim + rope_dim) + 2 * latent_dim)


def mla_decode_bytes(
    b: int, n_heads: int, nk: int, latent_dim: int, rope_dim: int, *, elem_bytes: int = 2
) -> int:
    """Compulsory bytes of one MLA decode step of one layer, on attention_min_bytes' basis:
    every head's absorbed query (d_c + d_R) read once, the nk cached latents and RoPE keys read
    once, every head's output in latent space (d_c, before W^UV) written once."""
    _check_positive(b=b, n_heads=n_heads, nk=nk, latent_dim=latent_dim, elem_bytes=elem_bytes)
    _check_nonnegative(rope_dim=rope_dim)
    queries, outputs = n_heads * (latent_dim + rope_dim), n_heads * latent_dim
    return elem_bytes * b * (queries + nk * (latent_dim + rope_dim) + outputs)
# ~/~ end


# ~/~ begin <<docs/theory/00-motivation.md#roofline-plot>>[init]
@dataclass(frozen=True)
class RooflinePoint:
    """A kernel on the roofline: its intensity and, if measured, its achieved FLOP/s."""

    label: str
    intensity: float
    flops_per_s: float | None = None  # None: drawn at the attainable rate (a prediction)


# One colour per kind of roof in every figure: datasheet roofs blue, measured roofs orange (a
# second roof of the same kind takes the next colour of its tuple); points red.
ROOF_COLORS = {False: ("C0", "C4", "C8"), True: ("C1", "C5", "C9")}
POINT_COLOR = "C3"
LabelBox = tuple[str, tuple[float, float, float, float]]  # a label and its (x0, y0, x1, y1) px


def plot_roofline(
    ceilings: Sequence[Ceilings],
    points: Sequence[RooflinePoint],
    path: str | Path,
    *,
    title: str | None = None,
    head_dim: int | None = None,
) -> list[LabelBox]:
    """Draw one roof per entry of `ceilings` and the labelled points; save to `path` (.svg/.png).

    Datasheet roofs are blue and measured ones (Ceilings.measured) orange. With head_dim, every
    ceiling that has an exp_rate also gets its exponential roof, dashed: the cap of a kernel
    that does not overlap its exponentials with its matrix products. Predicted points (no
    measured rate) sit hollow on the first ceiling's min(pi, I beta); measured ones are filled.
    Returns the label boxes in pixels (see _place_labels), so that a caller can check them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not ceilings:
        raise ValueError("plot_roofline needs at least one Ceilings")
    if head_dim is not None:
        _check_positive(head_dim=head_dim)
    for p in points:  # a log axis: an intensity of 0 (or a rate of 0) has no place on it
        if not _is_finite_positive(p.intensity):
            raise ValueError(f"point {p.label!r}: intensity must be a finite number > 0 on the "
                             f"log axis, got {p.intensity!r}")
        if p.flops_per_s is not None and not _is_finite_positive(p.flops_per_s):
            raise ValueError(f"point {p.label!r}: flops_per_s must be None or a finite number "
                             f"> 0, got {p.flops_per_s!r}")
    plt.rcParams["svg.hashsalt"] = "minimodel"  # stable SVG ids: regenerated figures diff cleanly
    intensities = [p.intensity for p in points] + [c.ridge for c in ceilings]
    lo, hi = min(intensities) / 4, max(intensities) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7, 5))
    drawn = {False: 0, True: 0}
    for c in ceilings:
        palette = ROOF_COLORS[c.measured]
        color = palette[drawn[c.measured] % len(palette)]
        drawn[c.measured] += 1
        ax.plot(xs, [c.attainable(x) / 1e12 for x in xs], color=color, label=c.name)
        if head_dim is not None and c.exp_rate is not None:
            roof = c.attention_roof(head_dim)
            flat = [x for x in xs if x * c.bandwidth >= roof]
            ax.plot(flat, [roof / 1e12] * len(flat), "--", color=color, lw=1.2,
                    label=f"{c.name}: exp2 not overlapped, d={head_dim}")
    anchors = []
    for p in points:
        rate = p.flops_per_s if p.flops_per_s is not None else ceilings[0].attainable(p.intensity)
        face = POINT_COLOR if p.flops_per_s is not None else "none"
        ax.plot(p.intensity, rate / 1e12, "o", markerfacecolor=face, markeredgecolor=POINT_COLOR)
        anchors.append((p.intensity, rate / 1e12))
    bottom = min([y for _, y in anchors] + [lo * c.bandwidth / 1e12 for c in ceilings]) / 3
    top = max(c.peak_flops for c in ceilings) / 1e12 * 1.8
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(bottom, top),
           xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s", title=title or "")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              frameon=False)  # below the axes, where it hides no roof and no point
    fig.tight_layout()  # before the labels: it moves the axes, and the labels are placed in pixels
    boxes = _place_labels(ax, anchors, [p.label for p in points])
    fig.savefig(path, metadata={"Date": None} if str(path).endswith(".svg") else None)
    plt.close(fig)
    return boxes


# Candidate label offsets in points, nearest first: a ring around the marker, then rings further
# out (ring > 0), which get a leader line back to their point.
_LABEL_OFFSETS = [(0, (7, 0)), (0, (6, 6)), (0, (6, -6)), (0, (-7, 0)), (0, (-6, 6)),
                  (0, (-6, -6)), (0, (0, 9)), (0, (0, -9))] + [
    (ring, (r * dx, r * dy)) for ring, r in enumerate((18, 30, 44, 60), start=1)
    for dx, dy in ((1, 0), (0.7, 0.7), (0.7, -0.7), (-1, 0), (-0.7, 0.7), (-0.7, -0.7), (0, 1),
                   (0, -1))]


def _boxes_overlap(a, b, pad: float = 0.5) -> bool:
    return a.x0 < b.x1 - pad and b.x0 < a.x1 - pad and a.y0 < b.y1 - pad and b.y0 < a.y1 - pad


def _place_labels(ax, anchors: list[tuple[float, float]], labels: list[str]) -> list[LabelBox]:
    """Label each point where its text stays inside the axes and overlaps no other label, no
    marker and not the legend; among such places prefer near ones that cross no drawn line."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    blocked = [legend.get_window_extent(renderer)] if legend is not None else []
    blocked += [Bbox.from_bounds(x - 5, y - 5, 10, 10) for x, y in ax.transData.transform(anchors)]
    curves = [ax.transData.transform(line.get_xydata()) for line in ax.get_lines()
              if line.get_linestyle() not in ("None", "none", "")]
    placed: list[tuple[str, Bbox]] = []
    for (x, y), text in zip(anchors, labels, strict=True):
        if not text:
            continue
        best = None
        for ring, (dx, dy) in _LABEL_OFFSETS:
            ann = ax.annotate(
                text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8,
                ha="left" if dx > 0 else "right" if dx < 0 else "center",
                va="bottom" if dy > 0 else "top" if dy < 0 else "center",
                arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6, "shrinkB": 4}
                if ring else None)
            box = ann.get_window_extent(renderer)
            inside = (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
                      and box.y1 <= frame.y1)
            clashes = sum(_boxes_overlap(box, b) for b in blocked + [b for _, b in placed])
            crossed = sum(any(box.x0 <= px <= box.x1 and box.y0 <= py <= box.y1
                              for px, py in curve) for curve in curves)
            score = (not inside, clashes, crossed + ring)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, ann, box)
            else:
                ann.remove()
            if score == (False, 0, 0):
                break
        placed.append((text, best[2]))
    return [(text, (float(b.x0), float(b.y0), float(b.x1), float(b.y1))) for text, b in placed]
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-lab01>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-naive-attention>>[init]
def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, hidden: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention as three kernels that write S and P to device memory (four with a mask): the
    implementation naive_attention_bytes_per_kernel counts, and Lab 01 measures.

    q: (B, Hq, Nq, d), k, v: (B, Hkv, Nk, d), contiguous. hidden: (Nq, Nk) bool, True where a
    query does NOT see a key (`~visible_mask(...)`), made once by the caller as a model keeps
    its causal mask. A row with no visible key gives NaN here (eager PyTorch's softmax), not the
    reference's zeros.
    """
    from minimodel.reference import check_attention_inputs, resolve_scale

    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    tau = resolve_scale(scale, d)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    if hidden is not None and (hidden.shape != (nq, nk) or hidden.dtype != torch.bool
                               or hidden.device != q.device):
        raise ValueError(f"hidden must be a bool ({nq}, {nk}) tensor on {q.device}, got "
                         f"{hidden.dtype} {tuple(hidden.shape)} on {hidden.device}")
    g = hq // hkv
    q3 = q.view(b * hkv, g * nq, d)  # the g query heads of a kv head, stacked: a view
    k3, v3 = k.view(b * hkv, nk, d), v.view(b * hkv, nk, d)
    s = torch.baddbmm(q.new_empty(()), q3, k3.mT, beta=0.0, alpha=tau)  # S = tau Q K^T
    if hidden is not None:  # in place: one kernel that reads S and the mask and writes S
        s.view(b * hkv, g, nq, nk).masked_fill_(hidden, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.bmm(p, v3).view(b, hq, nq, d)  # O = P V
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-naive-per-kernel>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-naive-per-kernel-interface>>[init]
def naive_attention_bytes_per_kernel(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, elem_bytes: int = 2,
    causal: bool = False, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """Device-memory bytes of each kernel of `naive_attention`, in launch order.

    Keys "scores" (S = tau Q K^T), "mask" (only when causal: S where the mask is True, else
    -inf), "softmax" (P) and "output" (O = P V); each value {"read": r, "write": w}, every
    input of the kernel read once and every output written once. q: (B, Hq, Nq, d); k, v:
    (B, Hkv, Nk, d); S and P: (B, Hq, Nq, Nk); all elem_bytes per element, except the mask: one
    bool (1 byte) per (query, key) pair, shared by every batch and head. A window changes the
    mask's values, not its bytes.
    """
# ~/~ end
    _check_positive(b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, elem_bytes=elem_bytes)
    check_mask_args(causal, window)
    _check_heads(hq, hkv)
    e = elem_bytes
    q, o, kv = e * b * hq * nq * d, e * b * hq * nq * d, e * b * hkv * nk * d  # K or V
    s = e * b * hq * nq * nk  # S or P
    kernels = {"scores": {"read": q + kv, "write": s}}
    if causal:
        kernels["mask"] = {"read": s + nq * nk, "write": s}  # the bool mask: 1 byte a pair
    kernels["softmax"] = {"read": s, "write": s}
    kernels["output"] = {"read": s + kv, "write": o}
    return kernels


def _check_heads(hq: int, hkv: int) -> None:
    if hq % hkv:
        raise ValueError(f"query heads Hq={hq} must be a multiple of kv heads Hkv={hkv}")
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-flash-forward-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-flash-forward-bytes-interface>>[init]
def flash_forward_bytes(
    b: int, hq: int, hkv: int, nq: int, nk: int, d: int, *, block_m: int,
    block_n: int | None = None, elem_bytes: int = 2, causal: bool = False,
    window: int | None = None,
) -> dict[str, int]:
    """{"read", "read_tiled", "write"} of Lab 02's `flash_attention` with tiles block_m x block_n.

    read: Q once, and once per kv head every K and V row that some query tile loads.
    read_tiled: every program's loads, the Q tile once and its K/V tiles [lo, hi) (rows past nk
    are zero-filled by the TMA, not read). write: O (elem_bytes) and the float32 lse, once.
    block_n is required with causal=True (which key tiles are visited depends on it).
    """
# ~/~ end
    tiled = flash_attention_bytes(b, hq, hkv, nq, nk, d, block_m=block_m, block_n=block_n,
                                  elem_bytes=elem_bytes, causal=causal, window=window)
    write = b * hq * nq * (elem_bytes * d + 4)  # O and the float32 lse
    first = 0  # the first key row the first query tile loads: a window's start, in whole tiles
    if window is not None:
        first = max(0, nk - nq - window + 1) // block_n * block_n
    read = elem_bytes * b * (hq * nq * d + 2 * hkv * (nk - first) * d)
    return {"read": read, "read_tiled": tiled - write, "write": write}
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-decode-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-decode-bytes-interface>>[init]
def decode_bytes(
    b: int, hq: int, hkv: int, context: int, d: int, *, num_splits: int = 1,
    elem_bytes: int = 2, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """Bytes of one decode step on a contiguous cache, per kernel: {"decode": {...}} and, when
    num_splits > 1, {"merge": {...}}, each {"read", "read_tiled", "write"}.

    The decode kernel runs one program per (sequence, kv head, split): it loads the g = Hq / Hkv
    query rows of its group (elem_bytes each), the K and V rows of its share of the visible keys
    (the last `window` keys, or all), and writes O (elem_bytes) and a float32 lse per query head;
    split, it writes float32 partial outputs and lse per split instead, which the merge kernel
    reads (the lse twice) and combines into O and lse.
    """
# ~/~ end
    _check_positive(b=b, hq=hq, hkv=hkv, context=context, d=d, num_splits=num_splits,
                    elem_bytes=elem_bytes)
    _check_heads(hq, hkv)
    check_mask_args(True, window)
    keys = context if window is None else min(context, window)
    q, kv = elem_bytes * b * hq * d, 2 * elem_bytes * b * hkv * keys * d
    out = b * hq * (elem_bytes * d + 4)  # O and the float32 lse
    if num_splits == 1:
        return {"decode": {"read": q + kv, "read_tiled": q + kv, "write": out}}
    partial = 4 * b * hq * num_splits * (d + 1)  # float32 O_u and lse_u of every split
    return {
        "decode": {"read": q + kv, "read_tiled": num_splits * q + kv, "write": partial},
        "merge": {"read": partial, "read_tiled": partial + 4 * b * hq * num_splits,
                  "write": out},
    }
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-paged-decode-bytes>>[init]
# ~/~ begin <<docs/lab/01-flash-bytes.md#roofline-paged-decode-bytes-interface>>[init]
def paged_decode_bytes(
    b: int, hq: int, hkv: int, context: int, d: int, *, block_size: int, block_n: int,
    num_splits: int = 1, elem_bytes: int = 2, window: int | None = None,
) -> dict[str, dict[str, int]]:
    """decode_bytes plus what paging adds to the decode kernel: each program loads its
    sequence's int32 context length and, for every key tile it visits, the block-table entries
    of the tile's visible keys (one entry per tile when block_size >= block_n, since the tile
    lies in one block)."""
# ~/~ end
    _check_positive(block_size=block_size, block_n=block_n)
    step = decode_bytes(b, hq, hkv, context, d, num_splits=num_splits, elem_bytes=elem_bytes,
                        window=window)
    lo = 0 if window is None else max(0, context - window)  # the first visible key
    blocks = -(-context // block_size) - lo // block_size  # blocks the visible keys fall in
    entries = 0  # table entries one program loads, tile by tile
    for start in range(lo // block_n * block_n, context, block_n):
        first, last = max(start, lo), min(start + block_n, context) - 1
        entries += 1 if block_size >= block_n else last // block_size - first // block_size + 1
    kernel = step["decode"]
    kernel["read"] += 4 * b * blocks + 4 * b  # the table and the lengths, once per sequence
    kernel["read_tiled"] += 4 * b * hkv * entries + 4 * b * hkv * num_splits
    return step
# ~/~ end


__all__ += ["decode_bytes", "flash_forward_bytes", "naive_attention",
            "naive_attention_bytes_per_kernel", "paged_decode_bytes"]
# ~/~ end
# ~/~ end

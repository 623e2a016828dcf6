# ~/~ begin <<docs/gpu-primer.md#src/minimodel/kernels.py>>[init]
"""What the kernel modules share: the interpreter switch, constants, dtypes, input checks, the SM
count, a lighter launch, the TMA's layout helpers and the key range of a query tile (Triton's;
the Gluon kernel has its twin, the byte model its Python copy).

Tangled from docs/gpu-primer.md (the TMA helpers and the key range from
docs/lab/02-flash-triton.md); edit the pages, not this file.
"""

import functools
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton import knobs
from triton._C.libtriton import native_specialize_impl as _specialize  # the JIT's own rule
from triton.runtime import driver

from minimodel.checks import check_int  # the kernels' integer arguments: checked as everywhere

__all__ = ["INTERPRET", "LN2", "LOG2E", "MAX_GRID_X", "MAX_GRID_Y", "MAX_PLANS", "SEEN",
           "SUPPORTED_DTYPES", "Prepared",
           "TmaArg", "capability", "cdiv", "check_forward_only", "check_int", "keep", "key_range",
           "launch", "next_power_of_2", "num_sms", "padded_width", "planned", "signature",
           "tma_layout", "tma_ready", "tma_strides"]

# ~/~ begin <<docs/gpu-primer.md#kernels-constants>>[init]
# Read when this module is imported, like triton itself reads it: set it before importing.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
LOG2E = 1.4426950408889634  # exp(x) = 2^(x log2 e)
LN2 = tl.constexpr(0.6931471805599453)  # log(x) = log2(x) ln 2; Gluon's constexpr is this one
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # of the Triton kernels
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535  # CUDA's limits on a grid's first and second axes
# ~/~ end


# ~/~ begin <<docs/gpu-primer.md#kernels-checks>>[init]
def check_forward_only(what: str, *tensors: torch.Tensor, why: str) -> None:
    """Refuse inputs that require grad while grad is enabled: `what` has no backward pass."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise ValueError(
            f"{what} is forward-only ({why}): its output would carry no gradient. Call it under "
            "torch.no_grad() or on tensors that do not require grad"
        )


def num_sms(device: torch.device) -> int:
    """The SM count of a CUDA device, read once per device; 4 under the interpreter."""
    if INTERPRET:
        return 4  # the interpreter has no SMs: split as for a small GPU, so the tests split too
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def capability(device: torch.device) -> tuple[int, int]:
    """The compute capability of a CUDA device, read once per device (each read costs µs)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability(index)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


# Host arithmetic of the launch wrappers. triton.cdiv and triton.next_power_of_2 are constexpr
# functions, made to be called inside kernels: from Python each call costs about 1.5 µs, a
# sizeable share of a decode step's host time. These are the plain versions.
def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, for n >= 0 (0 for n = 0, as triton's)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
# ~/~ end


# ~/~ begin <<docs/gpu-primer.md#kernels-launch>>[init]
# Triton versions whose compiled-kernel launcher `launch` calls directly (tested on the H200)
DIRECT_LAUNCH_TRITON = ("3.6",)
_DIRECT = triton.__version__.rsplit(".", 1)[0] in DIRECT_LAUNCH_TRITON and not INTERPRET
# key -> (kernel, function, metadata, constexprs, what a direct call needs or None)
_COMPILED: dict[tuple, tuple] = {}


class TmaArg(NamedTuple):
    """A TMA descriptor argument of a Gluon kernel, as `launch` takes it: what Gluon's
    TensorDescriptor holds (a TMA-ready base tensor, its shape and strides, the tile, the tile's
    shared-memory layout), without the object. The JIT gets the object; the direct path encodes
    the descriptor itself, so a call pays neither the object's checks nor Triton's wrapper."""
    base: torch.Tensor
    shape: list[int]
    strides: list[int]
    block_shape: list[int]
    layout: object


@functools.cache
def _backend(device: int):
    """Triton's compiler backend for a device: the `backend` its specialisation function takes."""
    from triton.compiler import make_backend
    with torch.cuda.device(device):
        return make_backend(driver.active.get_current_target())


def _hooked() -> bool:
    """Whether a launch hook is set (a profiler's): Triton 3.6 keeps its hooks in chains, empty
    unless one is added."""
    return any(getattr(hook, "calls", hook is not None)
               for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _classes(backend, args: tuple) -> list:
    """Each argument's class for launch's key: equal classes mean equal specialisations by
    Triton 3.6's native_specialize_impl (the key may be finer than Triton's, never coarser)."""
    return [
        # an int in the i32 range: 1 (a constexpr to Triton), a multiple of 16, or neither (a
        # negative int's & is two's complement, as in Triton's C++)
        ("1" if a == 1 else "D" if a & 15 == 0 else "")
        if (kind := type(a)) is int and -0x80000000 <= a <= 0x7FFFFFFF else
        # a tensor: its dtype (Triton's pointer type is a function of it) and alignment
        (a.dtype, a.data_ptr() & 15 == 0) if kind is torch.Tensor else
        # None (a constexpr to Triton) and a float (fp32): one class each
        kind if a is None or kind is float else
        # a descriptor: Triton types it by its dtype, tile and layout (its base is 16-byte
        # aligned by the TMA's rule, its shape and strides are runtime arguments)
        (TmaArg, a.base.dtype, *a.block_shape, a.layout) if kind is TmaArg else
        # a bool, a wider int, a subclass of Tensor...: Triton's own answer, a tuple, which
        # none of the classes above equals
        _specialize(backend, a, False, True, True)
        for a in args]


def _key(kernel, device: int, meta: dict, args) -> tuple:
    """launch's cache key: the kernel, the device, meta (constexprs and launch options) and
    each argument's class. id(kernel), not the kernel: a JITFunction hashes its source's hash at
    every call; the cache entry holds the kernel itself, so no other object can take its id."""
    return (id(kernel), device, *meta.items(), *_classes(_backend(device), args))


def _jit_args(args: tuple) -> tuple:
    """args as the JIT takes them: each TmaArg made Gluon's TensorDescriptor."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    return tuple(TensorDescriptor(*a) if type(a) is TmaArg else a for a in args)


def _direct(compiled, args: tuple) -> tuple | None:
    """What a direct call of compiled's launcher needs beyond the arguments: (the C launcher,
    cooperative, pdl, per TmaArg position the descriptor's encoding), or None where Triton 3.6's
    Python wrapper would add something (scratch memory, a descriptor not lowered to the TMA),
    which leaves the call to the JIT."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    run = compiled.run
    if run.global_scratch_size or run.profile_scratch_size:
        return None
    positions = [i for i, a in enumerate(args) if type(a) is TmaArg]
    raw = run.launch
    if positions:  # the wrapper that expands descriptors holds the C launcher in its closure
        cells = dict(zip(raw.__code__.co_freevars, raw.__closure__, strict=True))
        raw = cells["launcher"].cell_contents
        metas = getattr(compiled.metadata, "tensordesc_meta", None) or [None] * len(positions)
        if len(metas) != len(positions) or any(m is None or m["fp4_padded"] for m in metas):
            return None
    encodings = tuple(
        (i, m["swizzle"], m["elem_size"], TMA_DTYPE_DEVICE_TO_HOST[m["elem_type"]],
         m["block_size"]) for i, m in zip(positions, metas if positions else [], strict=True))
    return raw, run.launch_cooperative_grid, run.launch_pdl, encodings


def _encode(args: tuple, encodings: tuple) -> list:
    """args with each TmaArg expanded as the kernel's launcher takes it: the encoded descriptor
    (cuTensorMapEncodeTiled, through Triton's helper), then its shape and strides."""
    fill = driver.active.utils.fill_tma_descriptor
    out = list(args)
    for i, swizzle, elem_size, dtype, block in reversed(encodings):
        a = args[i]
        out[i:i + 1] = (fill(a.base.data_ptr(), swizzle, elem_size, dtype, block, a.shape,
                             a.strides, 0), *a.shape, *a.strides)
    return out


def launch(kernel, grid: tuple[int, ...], *args, **meta) -> None:
    """kernel[grid](*args, **meta), launched through the compiled kernel's launcher once the key
    (kernel, device, meta, the specialisation of each of args) has been seen: see the GPU
    primer. args are the kernel's runtime parameters in order (a Gluon descriptor as a TmaArg),
    meta its constexprs (all of them) and launch options."""
    if not isinstance(grid, tuple) or not 1 <= len(grid) <= 3:  # Triton would drop a 4th axis
        raise ValueError(f"launch({getattr(kernel, '__name__', kernel)}): grid must be a tuple "
                         f"of 1 to 3 program counts, got {grid!r}")
    if not _DIRECT or _hooked():
        kernel[grid](*_jit_args(args), **meta)
        return
    device = driver.active.get_current_device()
    key = _key(kernel, device, meta, args)
    hit = _COMPILED.get(key)
    if hit is None:
        params = kernel.params
        if len(args) > len(params) or any(p.is_constexpr for p in params[:len(args)]) or any(
                not p.is_constexpr or p.name not in meta for p in params[len(args):]):
            raise TypeError(
                f"launch({kernel.fn.__name__}) takes its {sum(not p.is_constexpr for p in params)}"
                f" runtime arguments by position, then every constexpr by name; got "
                f"{len(args)} positional and {sorted(meta)}")
        # compiles (or finds) the kernel, and launches
        compiled = kernel[grid](*_jit_args(args), **meta)
        _COMPILED[key] = (kernel, compiled.function, compiled.packed_metadata,
                          tuple(meta[p.name] for p in params[len(args):]),
                          _direct(compiled, args))
        return
    _, function, metadata, constants, direct = hit
    if direct is None:
        kernel[grid](*_jit_args(args), **meta)
        return
    raw, cooperative, pdl, encodings = direct
    gx, gy, gz = (*grid, 1, 1)[:3]
    # no scratch, no launch metadata and no enter or exit hook: Triton's wrapper passes None for
    # each likewise when no hook is set and the kernel needs no scratch
    raw(gx, gy, gz, driver.active.get_current_stream(device), function, cooperative, pdl, None,
        None, metadata, None, None, None, *(_encode(args, encodings) if encodings else args),
        *constants)
# ~/~ end
# ~/~ begin <<docs/gpu-primer.md#kernels-launch>>[1]
class Prepared:
    """One call site's launch with every argument fixed but its tensors: `Prepared(kernel, grid,
    args, meta)(*tensors)` is `launch(kernel, grid, *args, **meta)` with `tensors` in the places
    of args' tensors, in order (a TmaArg's place takes its new base). What a wrapper keeps per
    call signature, so that a call re-derives nothing but pointers: made from the arguments of a
    call that `launch` has just run, it calls the C launcher itself from its first call, filling
    in the tensors and encoding only the descriptors' bases (made before any launch of its key,
    it goes through `launch` once first). The caller guarantees each new tensor the class of the
    one it replaces (dtype, 16-byte alignment; for a TmaArg's base, the descriptor's shape and
    strides): a signature that holds them is the key it keeps a Prepared under. Outputs a call
    allocates are 16-byte aligned by PyTorch's caching allocator (it aligns to 512 bytes). It
    keeps no tensor of args."""

    def __init__(self, kernel, grid: tuple[int, ...], args: tuple, meta: dict) -> None:
        self.kernel, self.meta = kernel, meta
        self.grid = (*grid, 1, 1)[:3]  # (x, y, z), as the C launcher takes it
        kinds = list(map(type, args))
        self.places = [i for i, t in enumerate(kinds) if t is torch.Tensor or t is TmaArg]
        self.device = None  # the device the direct call launches on
        # what a direct call needs (None: not yet compiled under this key; False: never)
        self.direct = self._bind(args)
        self.args = list(args)  # args without their tensors: no tensor of a call is kept alive
        for i in self.places:
            self.args[i] = TmaArg(None, *args[i][1:]) if kinds[i] is TmaArg else None

    def __call__(self, *tensors: torch.Tensor) -> None:
        if self.direct and not _hooked() and driver.active.get_current_device() == self.device:
            raw, stream, head, template, fills, constants = self.direct
            out = template.copy()
            for (pos, encoding), t in zip(fills, tensors, strict=True):
                out[pos] = t if encoding is None else encoding[0](t.data_ptr(), *encoding[1:])
            raw(*self.grid, stream(), *head, *out, *constants)
            return
        args = list(self.args)
        for i, t in zip(self.places, tensors, strict=True):
            args[i] = TmaArg(t, *args[i][1:]) if type(args[i]) is TmaArg else t
        launch(self.kernel, self.grid, *args, **self.meta)
        if self.direct is None:
            self.direct = self._bind(args)

    def _bind(self, args) -> tuple | bool | None:
        """The C launcher and the arguments as it takes them, with the position of each tensor
        (or descriptor) to fill at a call: None if `launch` has not compiled args' key yet, False
        off the direct path (no direct launch on this Triton, scratch memory)."""
        if not _DIRECT:
            return False
        if _hooked():  # a profiler's hook: bound at a later call without one
            return None
        self.device = device = driver.active.get_current_device()
        hit = _COMPILED.get(_key(self.kernel, device, self.meta, args))
        if hit is None:
            return None
        _, function, metadata, constants, direct = hit
        if direct is None:
            return False
        raw, cooperative, pdl, encodings = direct
        by_place = {e[0]: e[1:] for e in encodings}
        fill = driver.active.utils.fill_tma_descriptor
        template, fills = [], []
        for i, a in enumerate(args):
            if type(a) is TmaArg:  # the encoded descriptor, then its shape and strides
                swizzle, elem_size, dtype, block = by_place[i]
                fills.append((len(template), (fill, swizzle, elem_size, dtype, block, a.shape,
                                              a.strides, 0)))
                template += [None, *a.shape, *a.strides]
            else:
                if i in self.places:
                    fills.append((len(template), None))
                template.append(None if i in self.places else a)
        stream = functools.partial(driver.active.get_current_stream, device)
        head = (function, cooperative, pdl, None, None, metadata, None, None, None)
        return raw, stream, head, template, fills, tuple(constants)


MAX_PLANS = 256  # plans and marks a wrapper keeps: prompts of many lengths come and go
SEEN = object()  # a signature's mark, after its first call


def planned(plans: dict, key: tuple | None):
    """The plan kept for signature `key`, or None (never seen, seen once, or no signature)."""
    plan = plans.get(key)
    return None if plan is SEEN else plan


def keep(plans: dict, key: tuple | None, make_plan) -> None:
    """After a call of signature `key` took the whole path: a mark at the signature's first call,
    the plan make_plan() at its second, so that a signature seen once pays for no plan. Once
    MAX_PLANS are kept, all are dropped first (dropping the oldest one at a time costs every
    call that misses a scan past the deleted entries). Nothing for key None or a planned key."""
    kept = plans.get(key)
    if key is None or (kept is not None and kept is not SEEN):  # no signature, or planned
        return
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = make_plan() if kept is SEEN else SEEN


def signature(tensors: tuple, *options: object) -> tuple | None:
    """What a wrapper's checks and launch arguments read of a call, none of its values: each
    tensor's shape, strides, dtype, device and address mod 16 (None for an optional tensor left
    out), and each option with its type (True == 1 otherwise). None if one of tensors is
    neither None nor a plain strided torch.Tensor with storage (a subclass, a tensor being
    traced, a sparse one): such a call takes the wrapper's full path."""
    if any(t is not None and (type(t) is not torch.Tensor or t.layout is not torch.strided)
           for t in tensors):
        return None  # a sparse tensor has no strides: the wrapper's checks refuse it
    try:
        key = (*(None if t is None else (t.shape, t.stride(), t.dtype, t.device,
                                         t.data_ptr() & 15) for t in tensors),
               *((type(o), o) for o in options))
        hash(key)
    except (RuntimeError, TypeError):  # a tensor without storage (a functorch wrapper...), an
        return None  # option that cannot be a key (a list): the full path, whose checks refuse
    return key
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#kernels-tma>>[init]
def padded_width(d: int, elem: int) -> int:
    """d rounded up so that a row of it fills a multiple of 16 bytes (the TMA's stride unit)."""
    per = 16 // elem
    return (d + per - 1) // per * per


def tma_ready(t: torch.Tensor) -> bool:
    """Whether the TMA can read t in place: unit stride along head_dim, 16-byte multiples for
    the other strides, a 16-byte aligned start. A dimension of size 1 is never stepped along, so
    its stride does not matter (`tma_strides` gives it an aligned one)."""
    elem = t.element_size()
    strides_ok = all(s * elem % 16 == 0 for s, n in zip(t.stride()[:-1], t.shape[:-1], strict=True)
                     if n > 1)
    return (t.stride(-1) == 1 or t.shape[-1] == 1) and strides_ok and t.data_ptr() % 16 == 0


def tma_layout(t: torch.Tensor) -> torch.Tensor:
    """t itself if the TMA can read it in place; else a copy the TMA can read: the first d
    columns of a contiguous buffer whose rows are padded with zeros to a 16-byte multiple."""
    if tma_ready(t):
        return t
    d = t.shape[-1]
    buf = t.new_zeros((*t.shape[:-1], padded_width(d, t.element_size())))
    buf[..., :d] = t
    return buf[..., :d]


def tma_strides(t: torch.Tensor) -> list[int]:
    """The strides a descriptor of a `tma_ready` t is given: t's own, with an aligned stride for
    each dimension of size 1 (never stepped along) and 1 along head_dim."""
    aligned = padded_width(t.shape[-1], t.element_size())
    strides = [s if n > 1 else aligned for s, n in zip(t.stride(), t.shape, strict=True)]
    strides[-1] = 1
    return strides
# ~/~ end


# ~/~ begin <<docs/lab/02-flash-triton.md#kernels-key-range>>[init]
@triton.jit
def key_range(i0, n_q, n_k, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, WINDOWED: tl.constexpr):
    """The keys that query rows [i0, i0 + BLOCK_M) visit, masks aligned bottom-right: returns
    (lo_seen, lo, full_lo, full_hi, hi). [lo, hi) is the range in whole tiles, lo_seen <= hi the
    first key some row sees, [full_lo, full_hi) the interior where every pair is visible to
    every row. Every run boundary is tile-aligned or equal to hi."""
    shift = n_k - n_q  # query i stands at key position pos_i = i + shift
    lo_seen = 0
    lo = 0
    full_lo = 0
    hi = n_k
    full_hi = n_k // BLOCK_N * BLOCK_N
    if CAUSAL:
        pos_first = i0 + shift
        pos_last = i0 + BLOCK_M - 1 + shift
        hi = tl.maximum(tl.minimum(n_k, pos_last + 1), 0)  # keys past pos_last: invisible to all
        if WINDOWED:
            lo_seen = tl.maximum(0, pos_first - window + 1)
            lo = lo_seen // BLOCK_N * BLOCK_N
            full_lo = tl.maximum(0, pos_last - window + 1)
            full_lo = tl.minimum((full_lo + BLOCK_N - 1) // BLOCK_N * BLOCK_N, tl.maximum(hi, lo))
        full_hi = tl.maximum(tl.minimum(n_k, pos_first + 1), 0) // BLOCK_N * BLOCK_N
        full_hi = tl.minimum(tl.maximum(full_hi, full_lo), tl.maximum(hi, full_lo))
    return lo_seen, lo, full_lo, full_hi, hi
# ~/~ end
# ~/~ end

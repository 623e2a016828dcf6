# ~/~ begin <<docs/gpu-primer.md#tests/test_gpu_primer.py>>[init]
"""The primer's worked example (tangled from docs/gpu-primer.md)."""

import pytest
import torch
import triton
import triton.language as tl

from minimodel import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)

# ~/~ begin <<docs/gpu-primer.md#primer-grid-stride>>[init]
@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    """out = factor * x over n elements, whatever the grid's size."""
    for start in tl.range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + offs, factor * x, mask=offs < n)
# ~/~ end


def test_a_grid_stride_loop_covers_every_element():
    x = torch.arange(1000, dtype=torch.float32, device=DEVICE)
    out = torch.full((1000,), float("nan"), device=DEVICE)
    _scale_kernel[(3,)](x, out, 1000, 0.5, BLOCK=64)
    assert torch.equal(out, 0.5 * x)


# ~/~ begin <<docs/gpu-primer.md#kernels-launch-tests>>[init]
@pytest.mark.gpu
def test_launch_keeps_tritons_specialisation():
    x = torch.arange(1, 1002, dtype=torch.float32, device="cuda")
    # aligned n % 16 = 8, unaligned, n = 1, n % 16 = 0: four keys, each launched twice
    for src, n in [(x, 1000), (x[1:], 1000), (x, 1), (x, 992), (x[1:], 1000)]:
        for _ in range(2):
            out = torch.full((1000,), float("nan"), device="cuda")
            kernels.launch(_scale_kernel, (3,), src, out, n, 0.5, BLOCK=64)
            assert torch.equal(out[:n], 0.5 * src[:n]), (n, src.data_ptr())
            assert out[n:].isnan().all(), (n, src.data_ptr())
    keys = [k for k in kernels._COMPILED if k[0] == id(_scale_kernel)]
    assert not kernels._DIRECT or len(keys) == 4


@pytest.fixture
def direct_launch(monkeypatch):
    """launch's direct path on any machine: device 0, stream 7, Triton's base backend for the
    key, an empty cache; the test's stand-in kernel does the rest."""
    from types import SimpleNamespace

    from triton.backends.compiler import BaseBackend

    gpu = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 7)
    monkeypatch.setattr(kernels, "_DIRECT", True)
    monkeypatch.setattr(kernels, "_COMPILED", {})
    monkeypatch.setattr(kernels, "_backend", lambda device: BaseBackend)
    monkeypatch.setattr(kernels, "driver", SimpleNamespace(active=gpu))


def stand_in_launcher(launch, scratch: int = 0):
    """A compiled kernel's launcher as Triton 3.6 builds it, around a stand-in C launcher."""
    from types import SimpleNamespace

    return SimpleNamespace(launch=launch, global_scratch_size=scratch, profile_scratch_size=0,
                           launch_cooperative_grid=False, launch_pdl=False)


def test_launch_caches_by_specialisation(direct_launch):
    """launch's cache on any machine, with a stand-in kernel whose JIT call and compiled launcher
    record what they are given (the GPU tests around it run the real ones)."""
    from types import SimpleNamespace

    calls = []

    class Compiled:
        function, packed_metadata = "function", "metadata"
        run = stand_in_launcher(lambda *args: calls.append(("launcher", args)))

    class Kernel:  # x, n, then BLOCK: tl.constexpr
        params = [SimpleNamespace(name=name, is_constexpr=name == "BLOCK")
                  for name in ("x", "n", "BLOCK")]
        fn = _scale_kernel.fn

        def __getitem__(self, grid):
            return lambda *args, **meta: calls.append(("jit", args, meta)) or Compiled()

    kernel, x = Kernel(), torch.zeros(64)
    for args, block in [((x, 17), 4), ((x, 17), 4), ((x, 18), 4), ((x, 16), 4), ((x, 1), 4),
                        ((x[1:], 17), 4), ((x, 17), 8)]:
        kernels.launch(kernel, (2,), *args, BLOCK=block)
    # a new key for n % 16 == 0, n == 1, an unaligned x and another constexpr; 18 is 17's class
    assert [c[0] for c in calls] == ["jit", "launcher", "launcher", "jit", "jit", "jit", "jit"]
    assert calls[1][1] == (2, 1, 1, 7, "function", False, False, None, None, "metadata", None,
                           None, None, x, 17, 4)
    assert calls[2][1][-2:] == (18, 4)
    with pytest.raises(TypeError, match="every constexpr by name"):
        kernels.launch(kernel, (1,), x, 5, 4)
    with pytest.raises(ValueError, match="1 to 3 program counts, got \\(1, 1, 1, 2\\)"):
        kernels.launch(kernel, (1, 1, 1, 2), x, 17, BLOCK=4)


def test_launch_key_is_never_coarser_than_tritons():
    """Two arguments of one class are two arguments Triton 3.6 specialises alike, under every
    flag the JIT passes (is_const, do_not_specialize, do_not_specialize_on_alignment)."""
    from itertools import product

    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    ints = [0, 1, 2, 15, 16, 17, 32, -1, -15, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16,
            -2**31, -2**31 - 1, -2**31 - 16, 2**63 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1]
    tensors = [t for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int32,
                               torch.int64, torch.uint8, torch.float8_e4m3fn)
               for x in [torch.zeros(64, dtype=dtype)] for t in (x, x[1:], x[16:], x[:0])]
    tensors.append(torch.nn.Parameter(torch.zeros(8), requires_grad=False))  # a subclass
    values = ints + tensors + [None, 0.0, 1.0, -2.5, float("nan"), float("inf"), True, False]
    classes = kernels._classes(BaseBackend, values)
    for flags in product((False, True), repeat=3):
        triton_ = [native_specialize_impl(BaseBackend, v, *flags) for v in values]
        pairs = product(zip(classes, triton_, values, strict=True), repeat=2)
        for (c, t, v), (c2, t2, v2) in pairs:
            assert c != c2 or t == t2, (v, v2, flags, c, t, t2)
    # and for the kinds it answers itself, with the flags of a plain parameter, no finer either
    plain = [native_specialize_impl(BaseBackend, v, False, True, True) for v in values]
    own = [not isinstance(c, tuple) or isinstance(c[0], torch.dtype) for c in classes]
    for (c, t, o), (c2, t2, o2) in product(zip(classes, plain, own, strict=True), repeat=2):
        assert not (o and o2) or (c == c2) == (t == t2), (c, c2, t, t2)


def test_launch_key_does_not_grow_with_a_length(direct_launch):
    """A do_not_specialize int (a decode step's context length) takes three classes while it
    fits in an i32: 1,000 lengths, three entries."""
    from types import SimpleNamespace

    class Compiled:
        function = packed_metadata = None
        run = stand_in_launcher(lambda *args: None)

    class Kernel:  # x, n_k (do_not_specialize), then BLOCK: tl.constexpr
        params = [SimpleNamespace(name="x", is_constexpr=False, do_not_specialize=False),
                  SimpleNamespace(name="n_k", is_constexpr=False, do_not_specialize=True),
                  SimpleNamespace(name="BLOCK", is_constexpr=True, do_not_specialize=False)]

        def __getitem__(self, grid):
            return lambda *args, **meta: Compiled()

    kernel, x = Kernel(), torch.zeros(64)
    for n_k in range(1000):
        kernels.launch(kernel, (1,), x, n_k, BLOCK=64)
    assert len(kernels._COMPILED) == 3  # n_k = 1, a multiple of 16, any other


def test_launch_encodes_tma_arguments_itself(direct_launch, monkeypatch):
    """A TmaArg's class is its dtype, tile and layout (not its base, shape or strides); the
    JIT gets Gluon's TensorDescriptor, the direct path the descriptor encoded and expanded as
    Triton's wrapper expands it; a kernel that needs scratch memory stays with the JIT."""
    from types import SimpleNamespace

    import triton.experimental.gluon.language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    calls, filled = [], []

    def fill(ptr, swizzle, elem_size, dtype, block, shape, strides, padding):
        filled.append((ptr, swizzle, elem_size, dtype, block, shape, strides, padding))
        return "map"

    monkeypatch.setattr(kernels.driver.active, "utils", SimpleNamespace(fill_tma_descriptor=fill),
                        raising=False)

    def c_launcher(*args):
        calls.append(("launcher", args))

    def closure(launcher):  # Triton's wrapper: its C launcher in a closure
        return lambda *args: launcher(*args)

    meta = {"swizzle": 128, "elem_size": 2, "elem_type": 1, "block_size": [1, 1, 64, 64],
            "fp4_padded": False}

    def compiled(scratch):
        return SimpleNamespace(function="function", packed_metadata="metadata",
                               metadata=SimpleNamespace(tensordesc_meta=[meta]),
                               run=stand_in_launcher(closure(c_launcher), scratch))

    class Kernel:  # desc, n, then BLOCK: tl.constexpr
        params = [SimpleNamespace(name=name, is_constexpr=name == "BLOCK")
                  for name in ("desc", "n", "BLOCK")]
        fn = _scale_kernel.fn
        scratch = 0

        def __getitem__(self, grid):
            def jit(*args, **meta):
                calls.append(("jit", args))
                return compiled(self.scratch)
            return jit

    layout = gl.NVMMASharedLayout.get_default_for([1, 64], gl.float16)
    x, y = torch.zeros(4, 64, dtype=torch.float16), torch.zeros(8, 64, dtype=torch.float16)
    a = kernels.TmaArg(x, [4, 64], [64, 1], [1, 64], layout)
    b = kernels.TmaArg(y, [8, 64], [64, 1], [1, 64], layout)  # another base and shape: one class
    kernel = Kernel()
    for arg in (a, a, b):
        kernels.launch(kernel, (1,), arg, 17, BLOCK=4)
    assert [c[0] for c in calls] == ["jit", "launcher", "launcher"]
    assert type(calls[0][1][0]) is TensorDescriptor and calls[0][1][0].base is x
    assert calls[2][1][13:] == ("map", 8, 64, 64, 1, 17, 4)
    assert filled[1] == (y.data_ptr(), 128, 2, kernels_host_dtype(1), [1, 1, 64, 64], [8, 64],
                         [64, 1], 0)
    swizzle64 = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16, rank=2)
    other = kernels.TmaArg(x, [4, 64], [64, 1], [1, 64], swizzle64)  # another layout: a new key
    kernels.launch(kernel, (1,), other, 17, BLOCK=4)
    assert calls[-1][0] == "jit"
    kernel.scratch, calls[:] = 64, []  # scratch memory: Triton's wrapper allocates it, so the JIT
    kernels._COMPILED.clear()
    for _ in range(2):
        kernels.launch(kernel, (1,), a, 17, BLOCK=4)
    assert [c[0] for c in calls] == ["jit", "jit"]


def test_a_prepared_launch_fills_only_its_tensors(direct_launch, monkeypatch):
    """Prepared: the first call through launch (the JIT here), later calls straight to the C
    launcher with the call's tensors in their places (a descriptor encoded on its new base) and
    every other argument as prepared; no tensor of the first call kept; a hook or another
    current device sends a call back through launch."""
    import gc
    import weakref
    from types import SimpleNamespace

    import triton.experimental.gluon.language as gl

    calls, filled = [], []

    def fill(ptr, swizzle, elem_size, dtype, block, shape, strides, padding):
        filled.append((ptr, shape, strides))
        return f"map of {ptr}"

    monkeypatch.setattr(kernels.driver.active, "utils", SimpleNamespace(fill_tma_descriptor=fill),
                        raising=False)
    meta = {"swizzle": 128, "elem_size": 2, "elem_type": 1, "block_size": [1, 64],
            "fp4_padded": False}

    def closure(launcher):  # Triton's wrapper: its C launcher in a closure
        return lambda *args: launcher(*args)

    compiled = SimpleNamespace(function="function", packed_metadata="metadata",
                               metadata=SimpleNamespace(tensordesc_meta=[meta]),
                               run=stand_in_launcher(closure(
                                   lambda *args: calls.append(("launcher", args)))))

    class Kernel:  # desc, out, n, then BLOCK: tl.constexpr
        params = [SimpleNamespace(name=name, is_constexpr=name == "BLOCK")
                  for name in ("desc", "out", "n", "BLOCK")]
        fn = _scale_kernel.fn

        def __getitem__(self, grid):
            return lambda *args, **meta: calls.append(("jit",)) or compiled

    layout = gl.NVMMASharedLayout.get_default_for([1, 64], gl.float16)
    x, out = torch.zeros(4, 64, dtype=torch.float16), torch.zeros(8)
    first = weakref.ref(x)
    run = kernels.Prepared(Kernel(), (3,), (kernels.TmaArg(x, [4, 64], [64, 1], [1, 64], layout),
                                            out, 17), {"BLOCK": 4})
    run(x, out)
    del x, out
    gc.collect()
    assert first() is None  # the prepared launch keeps no tensor of its first call
    x2, out2 = torch.zeros(4, 64, dtype=torch.float16), torch.zeros(8)
    run(x2, out2)
    assert [c[0] for c in calls] == ["jit", "launcher"]
    assert calls[1][1] == (3, 1, 1, 7, "function", False, False, None, None, "metadata", None,
                           None, None, f"map of {x2.data_ptr()}", 4, 64, 64, 1, out2, 17, 4)
    assert filled[-1] == (x2.data_ptr(), [4, 64], [64, 1])
    x3, out3 = torch.ones(4, 64, dtype=torch.float16), torch.ones(8)
    run(x3, out3)  # the bound call again, with its own tensors
    assert calls[-1][1][13:] == (f"map of {x3.data_ptr()}", 4, 64, 64, 1, out3, 17, 4)
    with pytest.raises(ValueError):  # one tensor per place, no more, no fewer
        run(x2)
    monkeypatch.setattr(kernels.driver.active, "get_current_device", lambda: 1)
    run(x2, out2)  # another current device: through launch (a new key there: the JIT)
    assert calls[-1][0] == "jit"


def test_plans_are_kept_from_a_signatures_second_call(monkeypatch):
    """signature: None for what must take a wrapper's full path (a sparse tensor, an option that
    cannot be a key), the option's type in the key; keep: a mark first, the plan at the second
    call, all dropped at MAX_PLANS; planned: a mark is no plan."""
    x = torch.zeros(4, 8)
    assert kernels.signature((x.to_sparse(),)) is None
    assert kernels.signature((x,), [1]) is None
    assert kernels.signature((x,), True) != kernels.signature((x,), 1)
    assert kernels.signature((x, None), 1) == kernels.signature((torch.ones(4, 8), None), 1)
    monkeypatch.setattr(kernels, "MAX_PLANS", 2)
    plans, made = {}, []
    make = lambda: made.append(1) or "plan"  # noqa: E731
    for key in ("a", "a", "a"):
        kernels.keep(plans, key, make)
    assert plans == {"a": "plan"} and len(made) == 1  # marked, planned, planned again
    assert kernels.planned(plans, "a") == "plan"
    kernels.keep(plans, "b", make)
    assert kernels.planned(plans, "b") is None and plans["b"] is kernels.SEEN
    kernels.keep(plans, "c", make)  # a third key: the two kept are dropped first
    assert list(plans) == ["c"]
    kernels.keep(plans, None, make)  # no signature: nothing kept
    assert list(plans) == ["c"]


def kernels_host_dtype(device_dtype: int) -> int:
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    return TMA_DTYPE_DEVICE_TO_HOST[device_dtype]


@pytest.mark.gpu
def test_launch_runs_the_hopper_kernel_directly():
    """Calls after the first of a shape class take the direct path, each with its own inputs
    (new bases, lengths, descriptors encoded anew), and match the reference."""
    from minimodel.attention_flash_hopper import _attn_fwd_ws, flash_attention_hopper
    from minimodel.reference import attention_ref

    if kernels.capability(torch.device("cuda"))[0] != 9:
        pytest.skip("flash_attention_hopper needs compute capability 9.x")
    for n in (300, 300, 517, 300):
        q, k, v = (torch.randn(2, 4, n, 64, dtype=torch.float16, device="cuda") for _ in "qkv")
        got = flash_attention_hopper(q, k, v, causal=True)
        want = attention_ref(q.double(), k.double(), v.double(), causal=True)
        torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=2e-3)
    hits = [h for key, h in kernels._COMPILED.items() if key[0] == id(_attn_fwd_ws)]
    assert hits and all(h[4] is not None and len(h[4][3]) == 4 for h in hits)


@pytest.mark.gpu
def test_launch_leaves_a_profilers_hook_to_the_jit():
    x, seen = torch.ones(16, device="cuda"), []
    hook = seen.append  # called with the launch's metadata, by the JIT's path only
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        for _ in range(2):
            kernels.launch(_scale_kernel, (1,), x, torch.empty_like(x), 16, 0.5, BLOCK=64)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 2


@pytest.mark.gpu
def test_launch_refuses_a_constexpr_by_position():
    x = torch.ones(16, device="cuda")
    with pytest.raises(TypeError, match="every constexpr by name"):
        kernels.launch(_scale_kernel, (1,), x, torch.empty_like(x), 16, 0.5, 64)
# ~/~ end
# ~/~ end

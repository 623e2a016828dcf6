# ~/~ begin <<docs/lab/01-flash-bytes.md#tests/test_roofline_bytes.py>>[init]
"""Lab 01's checks: the byte formulas of minimodel.roofline against an independent count of the
bytes the kernels fetch (tangled from docs/lab/01-flash-bytes.md). On a CPU the Triton kernels
run in the interpreter, whose loads and stores are counted; naive attention's operators are
counted by a TorchDispatchMode."""

import collections
import contextlib
import dataclasses
import inspect
import math
import re

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from triton.runtime import interpreter

from minimodel import paged_attention
from minimodel.attention import attention, paged_decode
from minimodel.attention_flash import flash_attention
from minimodel.reference import naive_attention, visible_mask
from minimodel.roofline import (
    attention_min_bytes,
    decode_bytes,
    flash_attention_bytes,
    flash_forward_bytes,
    naive_attention_bytes,
    naive_attention_bytes_per_kernel,
    paged_decode_bytes,
)

pytestmark = pytest.mark.lab("01")  # the task's tests: `make check-mine LAB=01` runs them

# The kernels' loads are counted in Triton's interpreter, which a CUDA machine does not run them
# in; every other check (the operators counted, the formulas by hand) runs on any machine.
interpreter_counts = pytest.mark.skipif(
    torch.cuda.is_available(), reason="counts the bytes the interpreter's loads touch: CPU only")


def qkv(b, hq, hkv, nq, nk, d):
    torch.manual_seed(0)
    q = torch.randn(b, hq, nq, d, dtype=torch.float16)
    k, v = (torch.randn(b, hkv, nk, d, dtype=torch.float16) for _ in "kv")
    return q, k, v


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-count-interpreter>>[init]
@dataclasses.dataclass
class Launch:
    """What one kernel launch loaded and stored, by kernel argument."""

    kernel: str
    ranges: list[tuple[str, int, int]]  # (argument, first byte, one past the last byte)
    grid: tuple | None
    meta: dict  # integer arguments (tile sizes), and descriptors' block shapes
    tiled: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(int))
    addresses: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))

    def record(self, op: str, ptrs, mask) -> None:
        addr = np.unique(np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)])
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        owner = np.full(addr.shape, -1)
        for i, (_, lo, hi) in enumerate(self.ranges):
            owner[(owner < 0) & (addr >= lo) & (addr < hi)] = i
        assert (owner >= 0).all(), f"{self.kernel}: a {op} outside every argument"
        for i in np.unique(owner):
            name = self.ranges[i][0]
            self.tiled[op, name] += int((owner == i).sum()) * size
            self.addresses[op, name, size].append(addr[owner == i])

    def bytes(self) -> dict[str, int]:
        """{"read", "read_tiled", "write"}: distinct loaded bytes, loads summed, stores."""
        distinct = collections.Counter()
        for (op, _, size), parts in self.addresses.items():
            distinct[op] += np.unique(np.concatenate(parts)).size * size
        tiled = sum(v for (op, _), v in self.tiled.items() if op == "read")
        return {"read": distinct["read"], "read_tiled": tiled, "write": distinct["write"]}


def _span(t: torch.Tensor) -> tuple[int, int]:
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


@contextlib.contextmanager
def count_kernel_bytes():
    """Within the block, every Triton kernel run by the interpreter appends a Launch."""
    launches: list[Launch] = []
    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    init, load, store = (executor._init_args_hst, builder.create_masked_load,
                         builder.create_masked_store)

    def init_counted(self, args, kwargs):
        host_args, host_kwargs = init(self, args, kwargs)
        named = inspect.getcallargs(self.fn, *host_args, **host_kwargs)
        ranges, meta = [], {}
        for name, arg in named.items():
            if isinstance(arg, interpreter.TensorDescriptor):
                meta[name] = list(arg.block_shape)
                arg = arg.base
            if isinstance(arg, torch.Tensor):
                ranges.append((name, *_span(arg)))
            elif isinstance(arg, int):
                meta[name] = arg
        grid = self.grid if isinstance(self.grid, tuple) else None
        launches.append(Launch(self.fn.__name__, ranges, grid, meta))
        return host_args, host_kwargs

    def load_counted(self, ptrs, mask, *args, **kwargs):
        launches[-1].record("read", ptrs, mask)
        return load(self, ptrs, mask, *args, **kwargs)

    def store_counted(self, ptrs, value, mask, *args, **kwargs):
        launches[-1].record("write", ptrs, mask)
        return store(self, ptrs, value, mask, *args, **kwargs)

    executor._init_args_hst = init_counted
    builder.create_masked_load, builder.create_masked_store = load_counted, store_counted
    try:
        yield launches
    finally:
        executor._init_args_hst = init
        builder.create_masked_load, builder.create_masked_store = load, store
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-count-dispatch>>[init]
ALLOCATIONS = {torch.ops.aten.empty, torch.ops.aten.new_empty, torch.ops.aten.empty_like,
               torch.ops.aten.empty_strided}


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements of t: a dimension of stride 0 is one element."""
    return math.prod(n for n, s in zip(t.shape, t.stride(), strict=True) if s) * t.element_size()


class CountOperators(TorchDispatchMode):
    """Every operator that writes new memory, with the bytes it reads and writes, in order."""

    def __init__(self):
        super().__init__()
        self.kernels: list[tuple[str, dict[str, int]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if func.overloadpacket in ALLOCATIONS:
            return out  # an allocation: no kernel
        if func is torch.ops.aten.baddbmm.default and kwargs.get("beta", 1) == 0:
            inputs = inputs[1:]  # beta = 0: BLAS never reads C
        storages = {t.untyped_storage().data_ptr() for t in inputs}
        in_place = func._schema.is_mutable
        if not in_place and all(o.untyped_storage().data_ptr() in storages for o in outputs):
            return out  # a view: no kernel
        read = sum(_distinct_bytes(t) for t in {id(t): t for t in inputs if t.dim()}.values())
        self.kernels.append((func.__name__, {"read": read,
                                             "write": sum(o.nbytes for o in outputs)}))
        return out
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-check-naive>>[init]
@pytest.mark.parametrize(
    ("b", "hq", "hkv", "nq", "nk", "d", "causal", "window"),
    [(2, 4, 2, 33, 50, 32, False, None), (1, 4, 1, 20, 20, 16, True, None),
     (2, 6, 3, 17, 40, 24, True, 5), (1, 2, 2, 40, 9, 8, True, None)],
)
def test_naive_kernels_match_the_operators_counted(b, hq, hkv, nq, nk, d, causal, window):
    q, k, v = qkv(b, hq, hkv, nq, nk, d)
    hidden = ~visible_mask(nq, nk, causal=True, window=window) if causal else None
    with CountOperators() as counted:
        naive_attention(q, k, v, hidden=hidden)
    model = naive_attention_bytes_per_kernel(b, hq, hkv, nq, nk, d, causal=causal, window=window)
    assert list(model) == (["scores", "mask", "softmax", "output"] if causal
                           else ["scores", "softmax", "output"])
    assert list(model.values()) == [c for _, c in counted.kernels], counted.kernels


@pytest.mark.parametrize(("hkv", "elem"), [(8, 2), (2, 4), (1, 1)])
def test_naive_kernels_sum_to_theory_00(hkv, elem):
    model = naive_attention_bytes_per_kernel(3, 8, hkv, 100, 300, 64, elem_bytes=elem)
    total = sum(k["read"] + k["write"] for k in model.values())
    assert total == naive_attention_bytes(3, 8, hkv, 100, 300, 64, elem_bytes=elem)
    masked = naive_attention_bytes_per_kernel(3, 8, hkv, 100, 300, 64, elem_bytes=elem,
                                              causal=True, window=7)
    assert sum(k["read"] + k["write"] for k in masked.values()) - total == (
        2 * elem * 3 * 8 * 100 * 300 + 100 * 300)
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-check-flash>>[init]
@interpreter_counts
@pytest.mark.parametrize(
    ("b", "hq", "hkv", "nq", "nk", "d", "causal", "window"),
    [(1, 2, 1, 40, 70, 48, False, None),  # GQA, a ragged tile, d padded to 64 by the TMA
     (2, 4, 2, 33, 50, 32, True, None),
     (1, 2, 2, 70, 70, 32, True, 20),  # a window wider than a key tile
     (1, 4, 1, 20, 90, 16, True, 7),  # MQA, Nq < Nk, a window narrower than a tile
     (1, 2, 1, 90, 20, 32, True, 3)],  # Nq > Nk: the first query tiles see nothing
)
def test_flash_matches_the_interpreter(b, hq, hkv, nq, nk, d, causal, window):
    q, k, v = qkv(b, hq, hkv, nq, nk, d)
    with count_kernel_bytes() as launches:
        flash_attention(q, k, v, causal=causal, window=window)
    (launch,) = launches
    block_m, block_n = launch.meta["desc_q"][2], launch.meta["desc_k"][2]
    model = flash_forward_bytes(b, hq, hkv, nq, nk, d, block_m=block_m, block_n=block_n,
                                causal=causal, window=window)
    assert model == launch.bytes()


@pytest.mark.parametrize("causal", [False, True])
def test_flash_distinct_reads_are_the_compulsory_bytes(causal):
    # Without a window the distinct reads are Theory 00's floor less the output; GQA divides the
    # K/V part by g there, and leaves the tiled part alone.
    kw = {"block_m": 64, "block_n": 32, "causal": causal}
    for hkv in (8, 2, 1):
        got = flash_forward_bytes(2, 8, hkv, 300, 500, 64, **kw)
        assert got["read"] + 2 * 2 * 8 * 300 * 64 == attention_min_bytes(2, 8, hkv, 300, 500, 64)
        assert got["read_tiled"] + got["write"] == flash_attention_bytes(2, 8, hkv, 300, 500, 64,
                                                                         **kw)
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-check-decode>>[init]
def decode_case(b, hq, hkv, ctx, d):
    q = torch.randn(b, hq, d, dtype=torch.float16)
    k, v = (torch.randn(b, hkv, ctx, d, dtype=torch.float16) for _ in "kv")
    return q, k, v


@pytest.fixture
def two_launches(monkeypatch):
    # The model counts the merge as a kernel of its own; FOLD_MERGE can fold it into the decode
    # kernel's last program instead (Lab 03 part 2), which the model does not count.
    monkeypatch.setattr(paged_attention, "FOLD_MERGE", False)


@interpreter_counts
@pytest.mark.usefixtures("two_launches")
@pytest.mark.parametrize(
    ("b", "hq", "hkv", "ctx", "d", "window"),
    [(3, 4, 2, 70, 32, None), (1, 4, 1, 130, 32, None),  # 130 keys, one program: 2 splits
     (2, 4, 4, 100, 24, 9), (2, 8, 1, 33, 16, 50)],
)
def test_decode_matches_the_interpreter(b, hq, hkv, ctx, d, window):
    q, k, v = decode_case(b, hq, hkv, ctx, d)
    with count_kernel_bytes() as launches:  # the model counts the lse: a call stores it if asked
        attention(q[:, :, None], k, v, causal=True, window=window, return_lse=True)
    splits = launches[0].grid[1]
    model = decode_bytes(b, hq, hkv, ctx, d, num_splits=splits, window=window)
    assert [launch.kernel for launch in launches] == (
        ["_paged_decode_fwd"] + (["_merge_splits"] if splits > 1 else []))
    assert list(model.values()) == [launch.bytes() for launch in launches]


@interpreter_counts
@pytest.mark.usefixtures("two_launches")
@pytest.mark.parametrize(("b", "hq", "hkv", "ctx", "d", "window"),
                         [(3, 4, 2, 70, 32, None), (2, 8, 1, 41, 16, 20)])
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("splits", [1, 3])
def test_paged_decode_matches_the_interpreter(b, hq, hkv, ctx, d, window, block_size, splits):
    q, _, _ = decode_case(b, hq, hkv, ctx, d)
    per_seq = -(-ctx // block_size)
    pool = b * per_seq + 3
    k_pool, v_pool = (torch.randn(pool, block_size, hkv, d, dtype=torch.float16) for _ in "kv")
    tables = torch.randperm(pool)[: b * per_seq].view(b, per_seq).int()  # scattered blocks
    lens = torch.full((b,), ctx, dtype=torch.int32)
    with count_kernel_bytes() as launches:  # return_lse: as above
        paged_decode(q, k_pool, v_pool, tables, lens, num_splits=splits, window=window,
                     return_lse=True)
    block_n = launches[0].meta["BLOCK_N"]
    model = paged_decode_bytes(b, hq, hkv, ctx, d, block_size=block_size, block_n=block_n,
                               num_splits=splits, window=window)
    assert list(model.values()) == [launch.bytes() for launch in launches]


def test_each_split_loads_its_queries():
    # By hand: 2 sequences, 2 kv heads, 3 splits: 12 programs, each loading the 4 query rows of
    # its group (d = 16, 2 bytes): the queries are loaded 3 times in all, read once.
    one, three = decode_bytes(2, 8, 2, 100, 16), decode_bytes(2, 8, 2, 100, 16, num_splits=3)
    q = 2 * 8 * 16 * 2
    assert three["decode"]["read"] == one["decode"]["read"]
    assert three["decode"]["read_tiled"] == one["decode"]["read_tiled"] + 2 * q


def test_paging_adds_only_the_table_and_the_lengths():
    # 2048 keys in blocks of 16: 128 blocks; a window of 40 keeps keys 2008..2047, blocks 125..127
    for window, blocks in ((None, 128), (40, 3)):
        flat = decode_bytes(64, 16, 4, 2048, 64, num_splits=3, window=window)
        paged = paged_decode_bytes(64, 16, 4, 2048, 64, block_size=16, block_n=128,
                                   num_splits=3, window=window)
        assert paged["decode"]["write"] == flat["decode"]["write"]
        assert paged["decode"]["read"] - flat["decode"]["read"] == 4 * 64 * blocks + 4 * 64
        assert paged["merge"] == flat["merge"]
# ~/~ end


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-check-errors>>[init]
def named(value: str, message: str) -> bool:
    """Whether the message names value as a whole word or number (4 is not named by 40 or 0.4)."""
    before = r"(?<![A-Za-z0-9_])" if value[0].isalpha() else r"(?<![A-Za-z0-9.])"
    return re.search(before + re.escape(value) + r"(?![A-Za-z0-9_]|\.\d)", message) is not None


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: naive_attention_bytes_per_kernel(1, 4, 3, 8, 8, 16), ["4", "3"]),
        (lambda: naive_attention_bytes_per_kernel(0, 4, 4, 8, 8, 16), ["b", "0"]),
        (lambda: naive_attention_bytes_per_kernel(1, 4, 4, 8, 8, 16, window=3),
         ["window", "causal"]),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8, 16, block_m=16, causal=True), ["block_n"]),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8.0, 16, block_m=16), ["nk", "8.0"]),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8, 16, block_m=16, block_n=16, causal=True,
                                     window=0), ["window", "0"]),
        (lambda: decode_bytes(1, 4, 4, 0, 16), ["context", "0"]),
        (lambda: decode_bytes(1, 6, 4, 8, 16), ["6", "4"]),
        (lambda: decode_bytes(1, 4, 4, 8, 16, num_splits=0), ["num_splits", "0"]),
        (lambda: decode_bytes(1, 4, 4, 8, True), ["d", "True"]),
        (lambda: paged_decode_bytes(1, 4, 4, 8, 16, block_size=0, block_n=16),
         ["block_size", "0"]),
        (lambda: paged_decode_bytes(1, 4, 4, 8, 16, block_size=16, block_n=16, window=-1),
         ["window", "-1"]),
    ],
)
def test_bad_input_raises(call, names):
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    missing = [name for name in names if not named(name, message)]
    assert not missing, f"{message!r} should name {missing}"
# ~/~ end
# ~/~ end

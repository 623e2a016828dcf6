# ~/~ begin <<docs/lab/03b-paged-kernels.md#tests/test_paged_attention.py>>[init]
"""Checks of the paged decode and prefill kernels (tangled from docs/lab/03b-paged-kernels.md)."""

import pytest
import torch
import triton
from test_attention_flash import attention_same_dtype
from test_block_manager import raises_naming  # part 1's: a message names each value

from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.reference import attention_ref

pytestmark = pytest.mark.lab("03", part=2)  # `make check-mine LAB=03 PART=2` runs them

# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-helpers>>[init]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)
NAN = float("nan")


def make_cache(lens, hkv, d, block_size, *, dtype=torch.float32, device=DEVICE, seed=0,
               first_kept=None, spare_blocks=3, extra_columns=2):
    """The paged-KV recipe: the same keys and values contiguous, (B, Hkv, max(lens), d), and in a
    pool whose physical blocks are a random permutation. Everything a kernel must not read is
    NaN: the slots past each context, the spare blocks, the blocks entries -1 and num_blocks
    would point at (the pool is a view into a NaN-filled storage one block longer at each end),
    and, with first_kept[b], every block of
    sequence b that ends before key first_kept[b] (its table entry set to -1, as a cache that
    frees blocks behind a sliding window would)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    b, longest = len(lens), max(max(lens), 1)
    k = torch.randn(b, hkv, longest, d, generator=gen, device=device).to(dtype)
    v = torch.randn(b, hkv, longest, d, generator=gen, device=device).to(dtype)
    blocks = [triton.cdiv(n, block_size) for n in lens]
    total = sum(blocks) + spare_blocks
    perm = torch.randperm(total, generator=gen, device=device).tolist()
    k_store = torch.full((total + 2, block_size, hkv, d), NAN, dtype=dtype, device=device)
    v_store = torch.full_like(k_store, NAN)
    # The NaN fence: entry -1 would read k_store[0], entry num_blocks k_store[-1], both NaN.
    k_pool, v_pool = k_store[1:-1], v_store[1:-1]
    table = torch.full((b, max(blocks) + extra_columns), -1, dtype=torch.int32, device=device)
    for seq, n in enumerate(lens):
        for logical in range(blocks[seq]):
            lo, hi = logical * block_size, min(n, (logical + 1) * block_size)
            if first_kept is not None and hi <= first_kept[seq]:
                continue  # freed: behind the window of every query
            phys = perm.pop()
            table[seq, logical] = phys
            k_pool[phys, : hi - lo] = k[seq, :, lo:hi].transpose(0, 1)
            v_pool[phys, : hi - lo] = v[seq, :, lo:hi].transpose(0, 1)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=device)
    return k, v, k_pool, v_pool, table, lens_t


def make_q(b, hq, d, *, dtype=torch.float32, device=DEVICE, seed=1):
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(b, hq, d, generator=gen, device=device).to(dtype)


def check_row(out, lse, q4, k4, v4, *, causal=True, window=None, scale=None, fp16_bar=True):
    """Rows of one sequence against the float64 reference; error at most 2x PyTorch's own.
    q4: (1, Hq, Nq, d), k4/v4: (1, Hkv, n, d); out: (Hq, Nq, d), lse: (Hq, Nq)."""
    mask = {"causal": causal, "window": window, "scale": scale}
    ref, ref_lse = attention_ref(q4.double(), k4.double(), v4.double(), **mask, return_lse=True)
    ref, ref_lse = ref[0], ref_lse[0]
    torch_err = (attention_same_dtype(q4, k4, v4, **mask)[0].double() - ref).abs().max().item()
    assert not out.isnan().any()
    err = (out.double() - ref).abs().max().item()
    assert err <= 2 * torch_err + 1e-6, (err, torch_err)
    if q4.dtype == torch.float16 and fp16_bar:
        torch.testing.assert_close(out.float(), ref.float(), atol=1e-3, rtol=1e-3)
    assert torch.equal(lse.isinf(), ref_lse.isinf())  # -inf exactly where nothing is seen
    finite = ref_lse.isfinite()
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=1e-4, rtol=1e-4)


def check_decode(q, cache, lens, *, window=None, scale=None, **kwargs):
    k, v, k_pool, v_pool, table, lens_t = cache
    # index tensors inside the fence: strided, poison between the elements and past each row
    out, lse = paged_decode(q, k_pool, v_pool, fenced(table, spare_block(cache)),
                            fenced(lens_t, 10**6), window=window, scale=scale, return_lse=True,
                            **kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:2]
    for seq, n in enumerate(lens):
        if n == 0:  # nothing to attend to: zeros and lse = -inf
            assert (out[seq] == 0).all() and (lse[seq] == float("-inf")).all()
            continue
        check_row(out[seq, :, None], lse[seq, :, None], q[seq : seq + 1, :, None],
                  k[seq : seq + 1, :, :n], v[seq : seq + 1, :, :n], window=window, scale=scale)
    return out, lse


def check_prefill(ctx_lens, q_lens, hq, hkv, d, block_size, *, dtype=torch.float32, causal=True,
                  window=None, scale=None, first_kept=None, device=DEVICE, **kwargs):
    """Chunks of q_lens[b] new tokens against contexts of ctx_lens[b] keys (theirs included),
    packed along dim 0 with query_start_loc offsets; each sequence against the reference."""
    cache = make_cache(ctx_lens, hkv, d, block_size, dtype=dtype, device=device,
                       first_kept=first_kept)
    k, v, k_pool, v_pool, table, lens_t = cache
    gen = torch.Generator(device=device).manual_seed(2)
    q = torch.randn(sum(q_lens), hq, d, generator=gen, device=device).to(dtype)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    starts_t = torch.tensor(starts, dtype=torch.int32, device=device)
    out, lse = paged_prefill(q, k_pool, v_pool, fenced(table, spare_block(cache)),
                             fenced(lens_t, 10**6), fenced(starts_t, -7), causal=causal,
                             window=window, scale=scale, return_lse=True, **kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:2]
    for seq, (n, nq) in enumerate(zip(ctx_lens, q_lens, strict=True)):
        rows = slice(starts[seq], starts[seq + 1])
        if nq == 0:
            continue
        if n == 0:
            assert (out[rows] == 0).all() and (lse[rows] == float("-inf")).all()
            continue
        check_row(out[rows].transpose(0, 1), lse[rows].transpose(0, 1),
                  q[rows].transpose(0, 1)[None], k[seq : seq + 1, :, :n],
                  v[seq : seq + 1, :, :n], causal=causal, window=window, scale=scale)
    return out, lse
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-decode>>[init]
# Context lengths off the block size, 1 included, mixed in one batch (0 is checked on its own).
LENS = [1, 17, 40, 100, 64]
HEADS = [(4, 4), (4, 2), (4, 1), (6, 2)]  # MHA, GQA, MQA, a group of 3
HEAD_DIMS = [16, 32, 48, 64, 80]
BLOCK_SIZES = [8, 16, 32, 64, 128]
DECODE_GRID = [(bs, HEADS[i % len(HEADS)], HEAD_DIMS[i % len(HEAD_DIMS)])
               for i, bs in enumerate(BLOCK_SIZES + BLOCK_SIZES[::-1])]


@pytest.mark.parametrize(("block_size", "heads", "d"), DECODE_GRID)
def test_decode_matches_reference(block_size, heads, d):
    (hq, hkv), lens = heads, LENS
    check_decode(make_q(len(lens), hq, d), make_cache(lens, hkv, d, block_size), lens)


@pytest.mark.parametrize(("block_size", "heads", "d"), DECODE_GRID[::3])
def test_decode_float16(block_size, heads, d):
    (hq, hkv), lens, f16 = heads, LENS, torch.float16
    check_decode(make_q(len(lens), hq, d, dtype=f16),
                 make_cache(lens, hkv, d, block_size, dtype=f16), lens)


@pytest.mark.parametrize(("window", "block_size"), [(1, 8), (7, 32), (16, 16), (33, 8), (90, 128),
                                                  (500, 32)])
def test_decode_windows(window, block_size):
    lens = [1, 17, 40, 100, 130]
    first_kept = [max(0, n - window) for n in lens]  # blocks wholly behind the window are freed
    cache = make_cache(lens, 2, 32, block_size, first_kept=first_kept)
    for num_splits in (None, 3):
        check_decode(make_q(len(lens), 4, 32), cache, lens, window=window, num_splits=num_splits)


@pytest.mark.parametrize("num_splits", range(1, 7))
@pytest.mark.parametrize("window", [None, 20])
def test_decode_every_split_count(num_splits, window):
    # 45 keys are 3 blocks of 16: from 4 splits on, some splits have no key at all
    lens = [1, 20, 45]
    check_decode(make_q(3, 4, 32), make_cache(lens, 2, 32, 16), lens, num_splits=num_splits,
                 window=window)


@pytest.mark.parametrize("num_splits", [None, 1, 4])
def test_decode_empty_contexts_give_zeros_and_minus_inf(num_splits):
    lens = [0, 5, 0, 37]
    check_decode(make_q(4, 4, 32), make_cache(lens, 2, 32, 16), lens, num_splits=num_splits)
    cache = make_cache([0], 2, 32, 16)
    out, lse = paged_decode(make_q(1, 4, 32), *cache[2:], max_context_len=0,
                            num_splits=num_splits, return_lse=True)
    assert (out == 0).all() and (lse == float("-inf")).all()


def test_decode_host_max_context_len():
    lens = [3, 90, 41]
    cache, q = make_cache(lens, 2, 32, 16), make_q(3, 4, 32)
    out = paged_decode(q, *cache[2:])
    for given in (90, 128):  # the table holds 8 blocks of 16
        torch.testing.assert_close(paged_decode(q, *cache[2:], max_context_len=given), out)


def test_decode_strided_inputs():
    # q: one third of a packed qkv projection; pools: the head-major block layout
    # (num_blocks, Hkv, block_size, d) read through a (num_blocks, block_size, Hkv, d) view.
    lens = [5, 77]
    k, v, k_pool, v_pool, table, lens_t = make_cache(lens, 2, 32, 16)
    k_hm, v_hm = (p.transpose(1, 2).contiguous().transpose(1, 2) for p in (k_pool, v_pool))
    assert not k_hm.is_contiguous()
    qkv = make_q(2, 12, 32).view(2, 3, 4, 32)
    q = qkv[:, 1]
    assert not q.is_contiguous()
    check_decode(q, (k, v, k_hm, v_hm, table, lens_t), lens)


def test_decode_custom_scale_and_large_logits():
    lens = [60, 9]
    check_decode(make_q(2, 4, 64) * 30, make_cache(lens, 2, 64, 16), lens, scale=0.3)


# Large groups: MQA with 32 and 64 query heads, and groups of 24 and 48 (not powers of two),
# one split, the default split and three splits under a window.
@pytest.mark.parametrize(("hq", "hkv"), [(32, 1), (64, 1), (24, 1), (96, 2)])
@pytest.mark.parametrize(("num_splits", "window"), [(1, None), (None, None), (3, 20)])
def test_decode_large_groups(hq, hkv, num_splits, window):
    lens = [1, 40, 97]
    first_kept = None if window is None else [max(0, n - window) for n in lens]
    cache = make_cache(lens, hkv, 32, 16, first_kept=first_kept)
    check_decode(make_q(3, hq, 32), cache, lens, num_splits=num_splits, window=window)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-prefill>>[init]
PREFILL_CASES = [  # (context lengths, new tokens per sequence): chunks of the context's end
    ([1, 17, 40, 100], [1, 5, 40, 37]),  # a whole prompt (40 of 40), chunks, one token
    ([30, 17, 64, 50], [40, 0, 3, 50]),  # more new tokens than keys: 10 rows see nothing
]


MASKS = [{}, {"causal": False}, {"window": 24}]
PREFILL_GRID = [(*PREFILL_CASES[i % 2], *DECODE_GRID[i], MASKS[i % 3]) for i in range(10)]


@pytest.mark.parametrize(("ctx_lens", "q_lens", "block_size", "heads", "d", "mask"),
                         PREFILL_GRID)
def test_prefill_matches_reference(ctx_lens, q_lens, block_size, heads, d, mask):
    check_prefill(ctx_lens, q_lens, *heads, d, block_size, **mask)


@pytest.mark.parametrize(("block_size", "heads", "d"), DECODE_GRID[::4])
def test_prefill_float16(block_size, heads, d):
    check_prefill(*PREFILL_CASES[0], *heads, d, block_size, dtype=torch.float16, window=33)


@pytest.mark.parametrize("mask", [{}, {"window": 24}, {"window": 33}])
def test_prefill_offsets_through_a_whole_tile(mask):
    # 20 new tokens against 52..68 keys: Nk - Nq moves through a whole key tile (16 under the
    # interpreter), with windows wider than a tile that cut into every context, and the blocks
    # behind the first new token's window freed (blocks of 8, so some window starts fall on a
    # block boundary, right after a freed block).
    ctx_lens = list(range(52, 69))
    window = mask.get("window")
    first_kept = None if window is None else [max(0, n - 20 - window + 1) for n in ctx_lens]
    check_prefill(ctx_lens, [20] * len(ctx_lens), 1, 1, 32, 8, first_kept=first_kept, **mask)


def test_prefill_of_one_token_is_the_decode():
    lens = [1, 17, 40, 100]
    cache = make_cache(lens, 2, 32, 16)
    q = make_q(4, 4, 32)
    starts = torch.arange(5, dtype=torch.int32, device=DEVICE)
    out, lse = paged_prefill(q, *cache[2:], starts, window=21, return_lse=True)
    out_d, lse_d = paged_decode(q, *cache[2:], window=21, return_lse=True)
    torch.testing.assert_close(out, out_d, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse, lse_d, atol=1e-6, rtol=1e-5)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-errors>>[init]
def decode_args(**change):
    """Valid paged_decode arguments (B=2, Hq=4, Hkv=2, d=32, blocks of 16), with changes."""
    k, v, k_pool, v_pool, table, lens = make_cache([5, 40], 2, 32, 16)
    args = {"q": make_q(2, 4, 32), "k_pool": k_pool, "v_pool": v_pool, "block_tables": table,
            "context_lens": lens}
    args.update(change)
    return args


DECODE_ERRORS = [  # (arguments, keywords, what the message names: the words are the learner's)
    (lambda: decode_args(q=make_q(2, 4, 32)[:, :, None]), {}, ["q"]),
    (lambda: decode_args(v_pool=decode_args()["v_pool"][:-1]), {}, ["v_pool"]),
    (lambda: decode_args(q=make_q(2, 3, 32)), {}, [3, 2]),  # Hq, Hkv
    (lambda: decode_args(q=make_q(2, 4, 32).double()), {}, ["float64"]),
    (lambda: decode_args(q=make_q(2, 4, 32).half()), {}, ["float16"]),  # float32 pools
    (lambda: decode_args(q=torch.randn(2, 4, 32, device="meta")), {}, ["meta"]),
    (lambda: decode_args(block_tables=decode_args()["block_tables"].long()), {},
     ["block_tables", "int64"]),
    (lambda: decode_args(context_lens=decode_args()["context_lens"].long()), {},
     ["context_lens", "int64"]),
    (lambda: decode_args(context_lens=decode_args()["context_lens"][:1]), {}, ["context_lens"]),
    (lambda: decode_args(context_lens=torch.tensor([5, 81], dtype=torch.int32, device=DEVICE)),
     {}, ["context_lens", 81]),  # the table holds 3 + 2 blocks of 16: 80 keys at most
    (lambda: decode_args(context_lens=torch.tensor([-1, 4], dtype=torch.int32, device=DEVICE)),
     {}, ["context_lens", -1]),
    (decode_args, {"max_context_len": 81}, ["max_context_len", 81]),  # past the table's 80
    (decode_args, {"max_context_len": -1}, ["max_context_len", -1]),
    (decode_args, {"num_splits": 0}, ["num_splits", 0]),
    (decode_args, {"window": 0}, ["window", 0]),
    (decode_args, {"scale": -1.0}, ["scale", -1.0]),
]


@pytest.mark.parametrize(("make", "kwargs", "names"), DECODE_ERRORS)
def test_decode_bad_input_raises(make, kwargs, names):
    raises_naming(lambda: paged_decode(**make(), **kwargs), *names)


@pytest.mark.parametrize("block_size", [12, 256, 4])
def test_decode_block_sizes_outside_8_to_128_are_refused(block_size):
    pool = torch.randn(4, block_size, 2, 32, device=DEVICE)
    raises_naming(lambda: paged_decode(**decode_args(k_pool=pool, v_pool=pool)),
                  "block_size", block_size)


@pytest.mark.parametrize("d", [8, 20, 264])
def test_decode_head_dims_flash_refuses_are_refused(d):
    k, v, k_pool, v_pool, table, lens = make_cache([5, 40], 2, d, 16)
    raises_naming(lambda: paged_decode(make_q(2, 4, d), k_pool, v_pool, table, lens), d)


def test_decode_refuses_inputs_that_require_grad():
    with pytest.raises(ValueError):  # the kernels are forward-only
        paged_decode(**decode_args(q=make_q(2, 4, 32).requires_grad_()))


def prefill_args(**change):
    k, v, k_pool, v_pool, table, lens = make_cache([5, 40], 2, 32, 16)
    args = {"q": make_q(9, 4, 32), "k_pool": k_pool, "v_pool": v_pool, "block_tables": table,
            "context_lens": lens,
            "query_start_loc": torch.tensor([0, 4, 9], dtype=torch.int32, device=DEVICE)}
    args.update(change)
    return args


def starts(*values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


PREFILL_ERRORS = [  # (arguments, keywords, what the message names)
    (lambda: prefill_args(q=make_q(9, 4, 32)[None]), {}, ["q"]),
    (lambda: prefill_args(query_start_loc=starts(1, 4, 9)), {}, ["query_start_loc", 1]),
    (lambda: prefill_args(query_start_loc=starts(0, 4, 8)), {}, ["query_start_loc", 8]),
    (lambda: prefill_args(query_start_loc=starts(0, 6, 4, 9)), {}, []),  # B = 3, two rows
    (lambda: prefill_args(query_start_loc=starts(0, 6, 9).long()), {},
     ["query_start_loc", "int64"]),
    (lambda: prefill_args(q=make_q(9, 5, 32)), {}, [5, 2]),  # Hq, Hkv
    (prefill_args, {"causal": False, "window": 4}, ["window", "causal"]),
    (prefill_args, {"max_query_len": 10}, ["max_query_len", 10]),  # past total_q = 9
    (lambda: prefill_args(query_start_loc=starts(0)), {}, ["query_start_loc"]),  # B = 0
]


@pytest.mark.parametrize(("make", "kwargs", "names"), PREFILL_ERRORS)
def test_prefill_bad_input_raises(make, kwargs, names):
    raises_naming(lambda: paged_prefill(**make(), **kwargs), *names)


def test_prefill_rejects_decreasing_offsets():
    raises_naming(lambda: paged_prefill(**prefill_args(query_start_loc=starts(0, 6, 4))),
                  "query_start_loc")
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-bad-input>>[init]
# The fast path's error bits, as the interface fixes them.
BAD_ENTRY, BAD_LENGTH, BAD_QUERY_START = 1, 2, 4


def spare_block(cache):
    """A block of the pool that no sequence owns: all NaN, in range, never to be read."""
    table, num_blocks = cache[4], cache[2].shape[0]
    used = set(table[table >= 0].tolist())
    return next(i for i in range(num_blocks) if i not in used)


def fenced(t, poison):
    """The index tensor t (1-D or 2-D) as a view into a buffer filled with poison: every other
    element (every other column) and everything past each row. A kernel that ignores a stride,
    or reads past a table row, reads poison."""
    if t.dim() == 1:
        buf = torch.full((2 * t.shape[0] + 1,), poison, dtype=t.dtype, device=t.device)
        view = buf[: 2 * t.shape[0] : 2]
    else:
        rows, cols = t.shape
        buf = torch.full((rows + 1, 2 * cols + 2), poison, dtype=t.dtype, device=t.device)
        view = buf[:rows, : 2 * cols : 2]
    view.copy_(t)
    return view


def check_decode_keys(out, lse, q, k, v, seq, keep):
    """Row seq of a decode against the reference over the key positions keep only."""
    idx = torch.tensor(keep, device=k.device)
    check_row(out[seq, :, None], lse[seq, :, None], q[seq : seq + 1, :, None],
              k[seq : seq + 1, :, idx], v[seq : seq + 1, :, idx])


BAD_ENTRIES = ["num_blocks", -1, -(2**31), 2**31 - 1]


def bad_value(entry, k_pool):
    return k_pool.shape[0] if entry == "num_blocks" else entry


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_decode_checked_path_refuses_an_entry_outside_the_pool(entry):
    lens = [37, 50]
    k, v, k_pool, v_pool, table, lens_t = make_cache(lens, 2, 32, 16)
    table[1, 2] = value = bad_value(entry, k_pool)
    raises_naming(lambda: paged_decode(make_q(2, 4, 32), k_pool, v_pool, table, lens_t),
                  "block_tables", value)


def test_decode_checked_path_ignores_entries_it_does_not_read():
    # past the context and behind the window: -1 or anything else
    lens = [37, 50]
    cache = make_cache(lens, 2, 32, 16, first_kept=[0, 33])
    cache[4][0, 3:] = 10**6
    check_decode(make_q(2, 4, 32), cache, lens, window=17)


@pytest.mark.parametrize("entry", BAD_ENTRIES)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("block", [0, 1])  # the first tile a program reads, or a later one
def test_decode_fast_path_skips_an_entry_outside_the_pool_and_flags_it(entry, num_splits, block):
    lens = [37, 50, 20]
    cache = make_cache(lens, 2, 32, 16)
    k, v, k_pool, v_pool, table, lens_t = cache
    table[1, block] = bad_value(entry, k_pool)  # keys 16 block .. 16 block + 15 of sequence 1
    flags = torch.zeros(3, dtype=torch.int32, device=DEVICE)
    q = make_q(3, 4, 32)
    out, lse = paged_decode(q, k_pool, v_pool, fenced(table, spare_block(cache)),
                            fenced(lens_t, 10**6), max_context_len=50, num_splits=num_splits,
                            return_lse=True, error_flags=flags)
    assert flags.tolist() == [0, BAD_ENTRY, 0]
    for seq in (0, 2):
        check_decode_keys(out, lse, q, k, v, seq, range(lens[seq]))
    rest = [*range(16 * block), *range(16 * block + 16, 50)]
    check_decode_keys(out, lse, q, k, v, 1, rest)  # the rest, no NaN


@pytest.mark.parametrize("num_splits", [None, 1, 4])
def test_decode_fast_path_keeps_a_context_over_capacity_in_its_row(num_splits):
    # The case that exposed it: 4 blocks of 16 per row, context_lens [100, 64],
    # max_context_len=64.
    # Past each row the fenced table holds a NaN block; the length is cut to the row, flagged.
    cache = make_cache([64, 64], 2, 32, 16, extra_columns=0)
    k, v, k_pool, v_pool, table, _ = cache
    q = make_q(2, 4, 32)
    for bad_len in (100, -5):
        lens_t = torch.tensor([bad_len, 64], dtype=torch.int32, device=DEVICE)
        flags = torch.zeros(2, dtype=torch.int32, device=DEVICE)
        out, lse = paged_decode(q, k_pool, v_pool, fenced(table, spare_block(cache)), lens_t,
                                max_context_len=64, num_splits=num_splits, return_lse=True,
                                error_flags=flags)
        assert flags.tolist() == [BAD_LENGTH, 0]
        check_decode_keys(out, lse, q, k, v, 1, range(64))
        if bad_len > 0:
            check_decode_keys(out, lse, q, k, v, 0, range(64))
        else:
            assert (out[0] == 0).all() and (lse[0] == float("-inf")).all()


def test_decode_flags_are_only_ored_in():
    lens = [37, 50]
    k, v, k_pool, v_pool, table, lens_t = make_cache(lens, 2, 32, 16)
    flags = torch.tensor([8, 0], dtype=torch.int32, device=DEVICE)  # the caller's bits stay
    paged_decode(make_q(2, 4, 32), k_pool, v_pool, table, lens_t, max_context_len=50,
                 error_flags=flags)
    assert flags.tolist() == [8, 0]


def test_decode_empty_batch_and_bad_flags_tensor():
    k, v, k_pool, v_pool, table, lens_t = make_cache([5, 40], 2, 32, 16)
    out = paged_decode(make_q(0, 4, 32), k_pool, v_pool, table[:0], lens_t[:0])
    assert out.shape == (0, 4, 32)
    raises_naming(lambda: paged_decode(make_q(2, 4, 32), k_pool, v_pool, table, lens_t,
                                       error_flags=torch.zeros(3, dtype=torch.int32)),
                  "error_flags", 3)
    pool = torch.zeros(4, 16, 0, 32, device=DEVICE)
    raises_naming(lambda: paged_decode(make_q(2, 4, 32), pool, pool, table, lens_t), "Hkv", 0)


def test_decode_refuses_pools_that_require_grad():
    k, v, k_pool, v_pool, table, lens_t = make_cache([5, 40], 2, 32, 16)
    with pytest.raises(ValueError):
        paged_decode(make_q(2, 4, 32), k_pool.clone().requires_grad_(), v_pool, table, lens_t)


def fast_prefill(ctx_lens, q_lens, cache, *, table=None, lens_t=None, starts_t=None, **kwargs):
    k, v, k_pool, v_pool, table0, lens0 = cache
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    q = torch.randn(starts[-1], 4, 32, generator=torch.Generator(DEVICE).manual_seed(3),
                    device=DEVICE)
    flags = torch.zeros(len(ctx_lens), dtype=torch.int32, device=DEVICE)
    if starts_t is None:
        starts_t = torch.tensor(starts, dtype=torch.int32, device=DEVICE)
    out, lse = paged_prefill(q, k_pool, v_pool, fenced(table0 if table is None else table,
                                                       spare_block(cache)),
                             fenced(lens0 if lens_t is None else lens_t, 10**6),
                             fenced(starts_t, -7), return_lse=True, error_flags=flags,
                             **kwargs)
    return q, starts, out, lse, flags


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_prefill_checked_path_refuses_an_entry_outside_the_pool(entry):
    k, v, k_pool, v_pool, table, lens = make_cache([5, 40], 2, 32, 16)
    table[1, 1] = value = bad_value(entry, k_pool)
    q = make_q(9, 4, 32)
    raises_naming(lambda: paged_prefill(q, k_pool, v_pool, table, lens, starts(0, 4, 9)),
                  "block_tables", value)


@pytest.mark.parametrize("mask", [{}, {"window": 20}, {"causal": False}])
@pytest.mark.parametrize("entry", [-1, "num_blocks"])
def test_prefill_fast_path_skips_an_entry_outside_the_pool_and_flags_it(mask, entry):
    ctx_lens, q_lens = [40, 70, 33], [20, 50, 33]
    cache = make_cache(ctx_lens, 2, 32, 16)
    k, v, k_pool, _, table, _ = cache
    table = table.clone()
    table[1, 3] = bad_value(entry, k_pool)  # keys 48..63 of sequence 1
    q, st, out, lse, flags = fast_prefill(ctx_lens, q_lens, cache, table=table,
                                          max_query_len=50, **mask)
    assert flags.tolist() == [0, BAD_ENTRY, 0]
    assert not out.isnan().any()
    for seq in (0, 2):
        rows = slice(st[seq], st[seq + 1])
        check_row(out[rows].transpose(0, 1), lse[rows].transpose(0, 1),
                  q[rows].transpose(0, 1)[None], k[seq : seq + 1, :, : ctx_lens[seq]],
                  v[seq : seq + 1, :, : ctx_lens[seq]], **mask)
    if mask.get("causal") is False:  # every row sees every key: the rest, without 48..63
        keep = torch.tensor([*range(48), *range(64, 70)], device=DEVICE)
        rows = slice(st[1], st[2])
        check_row(out[rows].transpose(0, 1), lse[rows].transpose(0, 1),
                  q[rows].transpose(0, 1)[None], k[1:2, :, keep], v[1:2, :, keep], causal=False)


def test_prefill_fast_path_keeps_a_context_over_capacity_in_its_row():
    cache = make_cache([64, 30], 2, 32, 16, extra_columns=0)
    k, v, k_pool, _, table, _ = cache
    lens_t = torch.tensor([100, 30], dtype=torch.int32, device=DEVICE)
    q, st, out, lse, flags = fast_prefill([100, 30], [10, 5], cache, lens_t=lens_t,
                                          max_query_len=10)
    assert flags.tolist() == [BAD_LENGTH, 0]
    assert not out.isnan().any()
    check_row(out[10:].transpose(0, 1), lse[10:].transpose(0, 1), q[10:].transpose(0, 1)[None],
              k[1:2, :, :30], v[1:2, :, :30])


@pytest.mark.parametrize(("offsets", "flagged"), [
    ([0, 4, 30], [0, BAD_QUERY_START]),  # past total_q
    ([-3, 4, 9], [BAD_QUERY_START, 0]),  # before row 0
    ([0, 6, 4], [0, BAD_QUERY_START]),  # backwards
])
def test_prefill_fast_path_flags_offsets_outside_q(offsets, flagged):
    cache = make_cache([20, 40], 2, 32, 16)
    k, v = cache[:2]
    q, st, out, lse, flags = fast_prefill([20, 40], [4, 5], cache, starts_t=starts(*offsets),
                                          max_query_len=5)
    assert flags.tolist() == flagged
    seq = flagged.index(0)  # the good sequence is computed, the bad one not at all
    rows = slice(offsets[seq], offsets[seq + 1])
    n = [20, 40][seq]
    check_row(out[rows].transpose(0, 1), lse[rows].transpose(0, 1),
              q[rows].transpose(0, 1)[None], k[seq : seq + 1, :, :n], v[seq : seq + 1, :, :n])


@pytest.mark.parametrize("max_query_len", [0, 1, 17])
def test_prefill_a_short_max_query_len_costs_speed_not_correctness(max_query_len):
    check_prefill([1, 17, 40, 100], [1, 5, 40, 37], 2, 2, 32, 16, window=30,
                  max_query_len=max_query_len)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-gpu>>[init]
# On the H200: the speed-scale shapes, every dtype (bf16 only here: the interpreter refuses it).
GPU_DECODE = [  # (lengths, Hq, Hkv, d, block_size, window)
    ([1, 4097, 33000, 8191], 32, 8, 128, 16, None),
    ([131072], 32, 8, 128, 64, None),
    ([777, 20000], 16, 1, 64, 128, 4096),
    ([5000, 3, 12345], 8, 8, 256, 32, 1000),
    ([2049, 1000], 12, 4, 80, 8, None),
    ([4097, 1, 3000], 64, 1, 128, 16, None),  # MQA: a group of 64, one tile of 64 rows
    ([5000, 33], 48, 2, 64, 64, 1000),  # groups of 24: a tile of 32 rows, a quarter padding
    ([3000, 70], 128, 1, 64, 16, None),  # a group of 128: two chunks of 64
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("lens", "hq", "hkv", "d", "block_size", "window"), GPU_DECODE)
def test_gpu_decode_matches_reference(lens, hq, hkv, d, block_size, window, dtype):
    cache = make_cache(lens, hkv, d, block_size, dtype=dtype, device="cuda")
    check_decode(make_q(len(lens), hq, d, dtype=dtype, device="cuda"), cache, lens,
                 window=window)


GPU_PREFILL = [  # (context lengths, new tokens, Hq, Hkv, d, block_size, mask)
    ([4096, 3000], [1024, 3000], 8, 2, 128, 16, {}),
    ([2500, 777], [600, 1], 8, 8, 64, 64, {"window": 1000}),
    ([1500], [1500], 4, 1, 256, 32, {"causal": False}),
    ([3333, 100], [333, 100], 6, 2, 80, 8, {"window": 100}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("ctx_lens", "q_lens", "hq", "hkv", "d", "block_size", "mask"),
                         GPU_PREFILL)
def test_gpu_prefill_matches_reference(ctx_lens, q_lens, hq, hkv, d, block_size, mask, dtype):
    check_prefill(ctx_lens, q_lens, hq, hkv, d, block_size, dtype=dtype, device="cuda", **mask)
# ~/~ end
# ~/~ end

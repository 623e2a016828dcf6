# ~/~ begin <<docs/lab/03b-paged-kernels.md#tests/test_paged_attention_solution.py>>[init]
"""Checks of this page's solution itself, beyond the task's interface: the split choice, the
tiles, the rows each kernel writes, other tile shapes, the interpreter switch, the 16-bit Hopper
kernel, and the public entry point minimodel.attention (tangled from
docs/lab/03b-paged-kernels.md; not run by `make check-mine`)."""

import contextlib
import copy
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl
from test_attention_flash import make_qkv
from test_paged_attention import (
    BAD_ENTRY,
    BAD_LENGTH,
    DEVICE,
    bad_value,
    check_decode,
    check_decode_keys,
    check_prefill,
    check_row,
    decode_args,
    fenced,
    make_cache,
    make_q,
    prefill_args,
    spare_block,
    starts,
)
from test_paged_fp8 import sm90_ptx

from minimodel import attention as attention_module
from minimodel import kernels, paged_attention_hopper
from minimodel import paged_attention as pa  # its internals are looked up when a test runs:
from minimodel.attention import (  # a learner's module has none
    KernelPagedKVCache,
    attention,
    attention_op,
)
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.paged_kv_cache import PagedKVCache
from minimodel.reference import attention_ref

# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-split>>[init]
H200_SMS = 132


@pytest.mark.parametrize("chunks", [1, 4])  # the programs a large group is cut into
@pytest.mark.parametrize(("batch", "hkv", "context"), [
    (1, 8, 131072), (1, 8, 32768), (64, 8, 4096), (256, 8, 512), (64, 1, 4096), (64, 32, 4096),
    (1, 8, 100), (3, 2, 10**7), (1, 1, 64), (256, 1, 2048),
])
def test_split_fills_the_gpu_without_short_splits(batch, hkv, context, chunks):
    block_n = 64
    splits = pa.choose_num_splits(batch, hkv, context, block_n, H200_SMS, chunks)
    tiles = triton.cdiv(context, block_n)
    assert 1 <= splits <= pa.MAX_SPLITS
    target = pa.PROGRAMS_PER_SM * H200_SMS
    programs = batch * hkv * chunks
    if programs >= target:  # the batch alone fills the GPU: no split, no merge
        assert splits == 1
    else:  # enough programs, unless the context is too short (or the cap is reached)
        short = max(1, tiles // pa.MIN_TILES_PER_SPLIT)
        assert programs * splits >= target or splits in (short, pa.MAX_SPLITS)
        # and no more than that: one split fewer would leave the GPU short
        assert splits == 1 or programs * (splits - 1) < target
    assert splits == 1 or tiles // splits >= pa.MIN_TILES_PER_SPLIT


def test_the_extreme_shapes_split_as_intended():
    # B=1 at 128k splits into hundreds of programs; B=256 at 512 does not split at all
    target = pa.PROGRAMS_PER_SM * H200_SMS
    assert pa.choose_num_splits(1, 8, 131072, 64, H200_SMS) * 8 >= target
    assert pa.choose_num_splits(256, 8, 512, 64, H200_SMS) == 1


def test_the_cpu_tests_split_by_default():
    # Under the interpreter the split is chosen as for a 4-SM GPU, so the default path splits
    # the small contexts of the CPU tests too (and the merge runs).
    if pa.INTERPRET:
        assert kernels.num_sms(torch.device("cpu")) == 4
    assert pa.choose_num_splits(5, 2, 130, 16, 4) > 1  # test_decode_windows' batch


@pytest.mark.parametrize("lens", [
    [5, 9, 9, 1, 40, 0, 9],  # ties keep their batch order
    [-3, 2**31 - 1, 7, -2**31, 100, 100],  # bad lengths are ordered too (the kernel cuts them)
    [3] * 16,  # a full sort tile, all equal
    list(range(40)),  # shortest first as given: the order reversed
])
def test_split_programs_start_longest_sequence_first(lens):
    # _longest_first maps program rank r to the r-th longest sequence, ties by batch index, a
    # permutation of the batch; lengths read through a stride (every other int32 here).
    @triton.jit
    def by_rank(lens_ptr, out_ptr, batch, BLOCK_B: tl.constexpr):
        r = tl.program_id(0)
        tl.store(out_ptr + r, pa._longest_first(lens_ptr, 2, r, batch, BLOCK_B))

    b = len(lens)
    strided = torch.tensor([x for n in lens for x in (n, -7)], dtype=torch.int32, device=DEVICE)
    out = torch.full((b,), -1, dtype=torch.int64, device=DEVICE)
    by_rank[(b,)](strided, out, b, BLOCK_B=max(16, triton.next_power_of_2(b)))
    assert out.tolist() == sorted(range(b), key=lambda i: (-lens[i], i))


@pytest.mark.parametrize("fold", [True, False])  # the merge folded, or launched apart
def test_a_ragged_split_batch_in_longest_first_order_is_each_sequences_own(monkeypatch, fold):
    # A batch large enough to start longest first (LONGEST_FIRST_BATCH), split, on the fast
    # path: every sequence its own answer, and a bad length flags its own sequence only (its
    # row's entries past the context, -1 here, may add the entry bit).
    monkeypatch.setattr(pa, "FOLD_MERGE", fold)
    widths = []
    launch = pa.launch

    def spy(kernel, grid, *args, **meta):
        widths.append(meta.get("LONGEST_FIRST"))
        return launch(kernel, grid, *args, **meta)

    monkeypatch.setattr(pa, "launch", spy)
    lens = [(7 * i) % 23 for i in range(pa.LONGEST_FIRST_BATCH[0])]
    cache = make_cache(lens, 1, 16, 8)
    q = make_q(len(lens), 2, 16)
    check_decode(q, cache, lens, max_context_len=max(lens), num_splits=3)
    assert widths[0] == len(lens)  # the decode launch sorted the batch's lengths
    k, v, k_pool, v_pool, table, lens_t = cache
    bad = lens_t.clone()
    bad[5] = table.shape[1] * 8 + 1
    flags = torch.zeros(len(lens), dtype=torch.int32, device=DEVICE)
    out = paged_decode(q, k_pool, v_pool, table, bad, max_context_len=max(lens), num_splits=3,
                       error_flags=flags)
    assert flags[5] & BAD_LENGTH and not torch.cat([flags[:5], flags[6:]]).any()
    good = paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=max(lens), num_splits=3)
    assert torch.equal(torch.cat([out[:5], out[6:]]), torch.cat([good[:5], good[6:]]))


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("elem", [1, 2, 4])
@pytest.mark.parametrize("block_g", [16, 32, 64])
def test_decode_tiles_by_bytes_and_a_warp_per_16_rows(monkeypatch, head_dim, elem, block_g):
    monkeypatch.setattr(pa, "INTERPRET", False)
    cfg = pa.decode_config(head_dim, elem, block_g)
    budget = pa.FP8_DECODE_TILE_BYTES if elem == 1 else pa.DECODE_TILE_BYTES
    assert cfg.block_n in (16, 32, 64, 128)
    assert cfg.block_n * head_dim * elem <= budget or cfg.block_n == 16
    assert 2 * cfg.block_n * head_dim * elem > budget or cfg.block_n == 128  # the largest fit
    if elem == 1 or block_g > 16:  # one warp per 16 query rows
        assert cfg.num_warps == block_g // 16
    else:
        assert cfg.num_warps == 4


def test_the_host_arithmetic_is_triton_s():
    # The wrappers' plain cdiv and next_power_of_2 (triton's are slow to call from Python).
    for n in [*range(0, 300), 2**20 - 1, 2**20, 2**20 + 1, 2**40 + 3]:
        assert kernels.next_power_of_2(n) == triton.next_power_of_2(n), n
        for b in (1, 2, 16, 64, 128):
            assert kernels.cdiv(n, b) == triton.cdiv(n, b), (n, b)


def test_decode_contiguous_takes_one_query_row_per_head():
    q, k, v = make_qkv(1, 4, 2, 2, 40, 32, device=DEVICE)
    with pytest.raises(ValueError, match=r"\(1, 4, 2, 32\)"):
        pa.decode_contiguous(q, k, v, window=None, tau=32**-0.5)


def test_the_split_workspace_is_kept_per_thread():
    # A split decode's partials go to a workspace kept for the next call of the same shape from
    # the same thread and stream (in order on the GPU); another shape or thread gets its own.
    import threading

    dev = torch.device(DEVICE)
    first = pa._workspace(dev, 2, 4, 3, 32, 4)
    assert pa._workspace(dev, 2, 4, 3, 32, 4) is first
    assert first[0].shape == (2, 4, 3, 32) and first[1].shape == (2, 4, 3)
    assert all(t.dtype == torch.float32 and t.device.type == dev.type for t in first[:2])
    counts = first[2]  # the folded merge's counters: one per program of axis 0, at zero
    assert counts.dtype == torch.int32 and counts.shape == (4,) and not counts.any()
    elsewhere = []
    worker = threading.Thread(
        target=lambda: elsewhere.append(pa._workspace(dev, 2, 4, 3, 32, 4)))
    worker.start()
    worker.join()
    assert elsewhere[0][0].data_ptr() != first[0].data_ptr()
    assert elsewhere[0][2].data_ptr() != counts.data_ptr()
    assert pa._workspace(dev, 2, 4, 5, 32, 4)[0].shape == (2, 4, 5, 32)
    unfolded = pa._workspace(dev, 2, 4, 5, 32, 2, counts=False)  # the two-launch merge's
    assert unfolded[2] is None and unfolded[0].shape == (2, 4, 5, 32)
    folded = pa._workspace(dev, 2, 4, 5, 32, 2)  # the fold's next: the same, with counters
    assert folded[0] is unfolded[0] and folded[2].shape == (2,) and not folded[2].any()
    assert pa._workspace(dev, 2, 4, 5, 32, 2, counts=False) is folded  # kept
    lens = [70, 33]  # and calls through it stay right, twice in a row
    for _ in range(2):
        check_decode(make_q(2, 4, 32), make_cache(lens, 2, 32, 16), lens, num_splits=3)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-chunks>>[init]
# --- Large groups cut into chunks of query heads (DECODE_MAX_GROUP_ROWS) ----------------------
@pytest.mark.parametrize(("group", "g_max", "rows"), [
    (1, 16, (16, 1)), (4, 16, (16, 1)), (16, 16, (16, 1)), (17, 16, (16, 2)), (24, 16, (16, 2)),
    (64, 16, (16, 4)), (24, 32, (32, 1)), (48, 32, (32, 2)), (32, 64, (32, 1)),
    (64, 64, (64, 1)), (96, 64, (64, 2)),
])
def test_group_rows_cut_a_group_into_chunks(monkeypatch, group, g_max, rows):
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", g_max)
    assert pa.group_rows(group) == rows


@pytest.mark.parametrize("g_max", [8, 24, 0, 16.0, True])
def test_group_rows_refuse_a_bad_maximum(monkeypatch, g_max):
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", g_max)
    with pytest.raises(ValueError, match=f"DECODE_MAX_GROUP_ROWS.*{g_max}"):
        pa.group_rows(32)


def test_the_split_counts_the_chunks():
    # MQA at B = 64, 4k keys: 9 splits of a 32-row tile, or 5 of each of two 16-row chunks
    assert pa.choose_num_splits(64, 1, 4096, 64, H200_SMS) == 9
    assert pa.choose_num_splits(64, 1, 4096, 64, H200_SMS, 2) == 5


# Every maximum on the same inputs, paged (split, windowed) and contiguous (minimodel.attention):
# a group of 48 is 3 chunks of 16, 2 of 32 (the last half padding) or 1 of 64; 24 leaves half
# of its last chunk of 16 as padding, which would store over the next kv head's heads.
@pytest.mark.parametrize("g_max", [16, 32, 64])
@pytest.mark.parametrize(("hq", "hkv"), [(48, 1), (48, 2), (64, 1)])
def test_every_maximum_decodes_large_groups(monkeypatch, g_max, hq, hkv):
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", g_max)
    lens = [3, 70]
    cache = make_cache(lens, hkv, 32, 16, first_kept=[0, 20])
    check_decode(make_q(2, hq, 32), cache, lens, num_splits=2, window=50)
    q, k, v = make_qkv(2, hq, hkv, 1, 70, 32, seed=hq)
    for mask in ({}, {"window": 50}):
        out, lse = attention(q, k, v, causal=True, **mask, return_lse=True)
        for seq in range(2):
            check_row(out[seq], lse[seq], q[seq : seq + 1], k[seq : seq + 1], v[seq : seq + 1],
                      **mask)


@pytest.mark.parametrize("entry", ["num_blocks", -1])
def test_each_chunk_flags_a_bad_entry_and_skips_its_keys(monkeypatch, entry):
    # A group of 40 in chunks of 16, 16 and 8 (+8 padding rows): every chunk skips the bad
    # block's keys, and the flag is the same whichever chunk sets it.
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", 16)
    lens = [37, 50]
    cache = make_cache(lens, 1, 32, 16)
    k, v, k_pool, v_pool, table, lens_t = cache
    table[1, 1] = bad_value(entry, k_pool)
    flags = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    q = make_q(2, 40, 32)
    out, lse = paged_decode(q, k_pool, v_pool, fenced(table, spare_block(cache)),
                            fenced(lens_t, 10**6), max_context_len=50, num_splits=2,
                            return_lse=True, error_flags=flags)
    assert flags.tolist() == [0, BAD_ENTRY]
    check_decode_keys(out, lse, q, k, v, 0, range(37))
    check_decode_keys(out, lse, q, k, v, 1, [*range(16), *range(32, 50)])
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-rows>>[init]
def test_a_short_max_context_len_costs_speed_not_correctness():
    # The last split runs to the end of each context whatever max_context_len said.
    lens = [90, 41]
    check_decode(make_q(2, 4, 32), make_cache(lens, 2, 32, 16), lens, max_context_len=1,
                 num_splits=3)


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize(("num_splits", "window"), [(1, None), (3, None), (5, 20)])
@pytest.mark.parametrize("hq", [6, 48])  # groups of 3, and of 24: chunks of 16, half padding
def test_the_kernels_write_only_their_own_rows(monkeypatch, num_splits, window, hq, fold):
    # Outputs and the split workspace as views into NaN-filled buffers with gaps around every
    # row: a store that strays (a padded query head, a column past d, a split) shows as a
    # non-NaN gap, a row not written as a NaN inside.
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", 16)  # a group of more than 16 in chunks
    lens, hkv, d = [7, 50, 33], 2, 48
    k, v, k_pool, v_pool, table, lens_t = make_cache(lens, hkv, d, 16)
    q = make_q(3, hq, d)
    nan = float("nan")
    o_buf = torch.full((3, hq + 2, d + 8), nan, device=DEVICE)
    lse_buf = torch.full((3, hq + 2), nan, device=DEVICE)
    w_buf = torch.full((3, hq + 1, num_splits + 1, d + 8), nan, device=DEVICE)
    wl_buf = torch.full((3, hq + 1, num_splits + 1), nan, device=DEVICE)
    out = (o_buf[:, 1 : hq + 1, 4 : d + 4], lse_buf[:, 1 : hq + 1])
    counts = torch.zeros(3 * hkv * pa.group_rows(hq // hkv)[1], dtype=torch.int32, device=DEVICE)
    workspace = (w_buf[:, :hq, :num_splits, :d], wl_buf[:, :hq, :num_splits], counts)
    pa._launch_decode(
        q, k_pool, v_pool, table, lens_t, n_k=0, strides_k=k_pool.stride(),
        strides_v=v_pool.stride(), block_size=16, n_kv_heads=hkv, max_context_len=max(lens),
        num_splits=num_splits, window=window, tau=d**-0.5, out=out, workspace=workspace,
        fold_merge=fold)
    assert not out[0].isnan().any() and not out[1].isnan().any()
    assert not counts.any()  # the folded merge's counters back at zero (untouched unfolded)
    o_gap, lse_gap = o_buf.clone(), lse_buf.clone()
    o_gap[:, 1 : hq + 1, 4 : d + 4] = nan
    lse_gap[:, 1 : hq + 1] = nan
    assert o_gap.isnan().all() and lse_gap.isnan().all()
    if num_splits > 1:
        w_gap, wl_gap = w_buf.clone(), wl_buf.clone()
        w_gap[:, :hq, :num_splits, :d] = nan
        wl_gap[:, :hq, :num_splits] = nan
        assert w_gap.isnan().all() and wl_gap.isnan().all()
    expected = paged_decode(q, k_pool, v_pool, table, lens_t, window=window,
                            num_splits=num_splits)
    torch.testing.assert_close(out[0], expected)


@pytest.mark.parametrize("offsets", [(0, 4, 30), (-3, 4, 9), (0, 6, 4)])
def test_the_prefill_fast_path_writes_nothing_outside_o(offsets):
    # Offsets outside q on the fast path: the output as a view into a NaN buffer; a row written
    # outside it (a sequence not refused) shows as a non-NaN value in the fence. q sits inside a
    # buffer of finite rows, so a sequence not refused reads defined memory and writes finite
    # rows into the fence (a bare q would be read past its end: undefined, even a crash). This
    # is the test that kills the mutant `paged-prefill-rows-not-refused` (scripts/mutants.json
    # runs it first: the lab's test of the same offsets writes past a bare o and aborts).
    cache = make_cache([20, 40], 2, 32, 16)
    nan = float("nan")
    o_buf = torch.full((60, 4, 32), nan, device=DEVICE)
    lse_buf = torch.full((60, 4), nan, device=DEVICE)
    out = (o_buf[20:29], lse_buf[20:29])
    q_buf = torch.full((60, 4, 32), 0.5, device=DEVICE)
    q_buf[20:29] = make_q(9, 4, 32)
    flags = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    pa._prefill(q_buf[20:29], *cache[2:], torch.tensor(offsets, dtype=torch.int32,
                device=DEVICE), block_size=16, n_kv_heads=2, max_query_len=5, causal=True,
                window=None, tau=32**-0.5, error_flags=flags, out=out)
    assert (flags != 0).any()
    for buf in (o_buf, lse_buf):
        assert buf[:20].isnan().all() and buf[29:].isnan().all()


def test_the_prefill_writes_only_its_own_rows():
    # Sequences packed back to back: a stray store past a sequence's last row lands in the next
    # sequence's rows (written earlier by the interpreter's order of programs) and shows.
    check_prefill([40, 17, 64], [23, 17, 9], 2, 2, 32, 16, window=30)


@pytest.mark.parametrize(("lens", "num_splits", "window", "bad", "hq"), [
    ([70], 2, None, None, 6), ([70, 33, 0], 3, None, None, 6), ([90, 41], 5, 20, None, 6),
    ([130, 64], 7, None, 1, 6), ([50, 100, 17], 4, 30, 0, 6), ([40], 16, None, None, 6),
    ([70, 33, 0], 3, None, 1, 40),  # groups of 20: two chunks per kv head, two counters
])
def test_the_folded_merge_is_the_two_launch_merge(monkeypatch, lens, num_splits, window, bad,
                                                   hq):
    """The decode kernel's last program per (sequence, kv head, chunk) merges the splits (the
    fold) as _merge_splits does in a second launch: the same outputs and flags bit for bit (one
    helper, _merge_row, the same operations in the same order), and the counters back at zero
    after every call, so that the next call counts from zero. Several split counts (more splits
    than tiles too), windows, B > 1, an empty context, a table entry outside the pool on the
    fast path, a group cut into chunks. Under the interpreter the programs run one after
    another, so the race the fold's memory ordering guards against cannot show here: the GPU
    tests run it."""
    monkeypatch.setattr(pa, "DECODE_MAX_GROUP_ROWS", 16)  # a group of more than 16 in chunks
    hkv, d = 2, 48
    k_pool, v_pool, table, lens_t = make_cache(lens, hkv, d, 16)[2:]
    if bad is not None:  # read by sequence `bad`: flagged, its keys skipped, in both paths
        table = table.clone()
        table[bad, 1] = k_pool.shape[0]
    q = make_q(len(lens), hq, d)
    counts = pa._workspace(torch.device(DEVICE), len(lens), hq, num_splits, d,
                           len(lens) * hkv * pa.group_rows(hq // hkv)[1])[2]
    results = []
    for fold in (True, False):
        flags = torch.zeros(len(lens), dtype=torch.int32, device=DEVICE)
        for _ in range(2):  # the second call reuses the workspace and its counters
            o, lse = pa._launch_decode(
                q, k_pool, v_pool, table, lens_t, n_k=0, strides_k=k_pool.stride(),
                strides_v=v_pool.stride(), block_size=16, n_kv_heads=hkv,
                max_context_len=max(lens), num_splits=num_splits, window=window, tau=d**-0.5,
                error_flags=flags, fold_merge=fold)
            assert not counts.any()
        results.append((o, lse, flags))
    for folded, unfolded in zip(*results, strict=True):
        torch.testing.assert_close(folded, unfolded, atol=0, rtol=0)
    assert bool(results[0][2].any()) == (bad is not None)


# Compiles the folded decode kernel for an H100/H200 (sm_90) with Triton's own NVIDIA backend
# (no GPU needed) and prints its Triton IR and its PTX; run apart, since conftest's
# TRITON_INTERPRET=1 turns every kernel of this process into the interpreter's.
FOLD_PTX = """
import triton
from triton.backends.compiler import GPUTarget
from minimodel.paged_attention import _paged_decode_fwd as fn
meta = dict(D=64, HEAD_DIM=64, BLOCK_G=16, BLOCK_N=16, BLOCK_SIZE=16, PAGED=False,
            WINDOWED=False, HAS_ERR=False, DOT_PRECISION="tf32", FP8=False, FOLD=True, BLOCK_S=16,
            LONGEST_FIRST=0)
unused = dict.fromkeys(("table_ptr", "lens_ptr", "err_ptr", "ks_ptr", "vs_ptr"))
types = dict(q_ptr="*fp16", k_ptr="*fp16", v_ptr="*fp16", o_ptr="*fp32", lse_ptr="*fp32",
             fo_ptr="*fp16", flse_ptr="*fp32", count_ptr="*i32", qk_scale="fp32")
sig = {n: "constexpr" if n in meta or n in unused else types.get(n, "i32") for n in fn.arg_names}
kernel = triton.compile(triton.compiler.ASTSource(fn, sig, {**meta, **unused}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
print(kernel.asm["ttir"], "//// PTX", kernel.asm["ptx"])
"""


def test_the_fold_compiles_to_barrier_release_acquire_barrier():
    """The premises of the decode kernel's ordering argument, as Triton compiles it for sm_90.
    In its IR, the kernel's own barriers: the partials' stores, a barrier, the acquire-release
    add at GPU scope, and in the last program a barrier before the merge's first load. In the
    PTX, the lowering keeps that order (bar.sync, one thread's atom.global.gpu.acq_rel.add,
    bar.sync) and no load is ld.global.nc, which the memory model leaves out. (Triton puts a
    bar.sync before the add even without ours, for its own use of shared memory: the IR check
    is the one that would catch a missing barrier of ours.)"""
    import re
    import subprocess
    import sys

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no NVIDIA backend to compile for sm_90 with")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    ttir, ptx = subprocess.run([sys.executable, "-c", FOLD_PTX], env=env, capture_output=True,
                               text=True, check=True).stdout.split("//// PTX")
    for text, add, barrier, store, load in (
        (ttir, r"tt\.atomic_rmw add, acq_rel, gpu", "gpu.barrier", "tt.store", "tt.load"),
        (ptx, r"atom\.global\.gpu\.acq_rel\.add", "bar.sync", "st.global", "ld.global"),
    ):
        adds = [m.start() for m in re.finditer(add, text)]
        assert len(adds) == 1, add
        before, after = text[: adds[0]], text[adds[0] :]
        assert barrier in before[before.rindex(store) :]  # stores, barrier, then the add
        assert barrier in after[: after.index(load)]  # the add, barrier, then the loads
    assert "ld.global.nc" not in ptx


@pytest.mark.parametrize("window", [None, 9])
def test_attention_decodes_alike_folded_or_not(monkeypatch, window):
    # The public entry point on a contiguous cache, at its default split: the fold switched on
    # and off module-wide (FOLD_MERGE) gives the same bits.
    q, k, v = make_qkv(2, 8, 2, 1, 150, 32, device=DEVICE)
    outs = []
    for fold in (True, False):
        monkeypatch.setattr(pa, "FOLD_MERGE", fold)
        outs.append(attention(q, k, v, causal=True, window=window))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_a_decode_plan_serves_its_signature_and_follows_the_settings(monkeypatch):
    # A signature's first call leaves a mark, its second makes the plan, later calls run it on
    # their own tensors (through launch, then the C launcher bound, on a GPU); a setting of the
    # module (FOLD_MERGE here) is part of the key, so changing it starts anew.
    monkeypatch.setattr(pa, "_DECODE_PLANS", {})
    for fold in (False,) * 5 + (True,):  # 1,024 keys: split in two or more, so the merge runs
        monkeypatch.setattr(pa, "FOLD_MERGE", fold)
        q, k, v = make_qkv(2, 8, 2, 1, 1024, 32, device=DEVICE)
        want = attention_ref(q.double(), k.double(), v.double(), causal=True)
        got = attention(q, k, v, causal=True)
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)
    plans = list(pa._DECODE_PLANS.values())
    assert len(plans) == 2 and plans[0] is not kernels.SEEN and plans[1] is kernels.SEEN
    assert plans[0][0] > 1 and plans[0][4] is not None  # splits, and the merge's launch


@pytest.mark.parametrize(("fold", "lse", "flags", "fp8"), [
    (None, True, True, False), (True, False, False, True), (False, True, True, True),
    (False, False, False, False)])
def test_paged_decode_plans_compute_as_the_whole_path(monkeypatch, fold, lse, flags, fp8):
    # The paged fast path on new data at every call, planned (a mark, a plan, then the plan's
    # launches) against the same call with no plan kept: the same bits, lse and flags included.
    monkeypatch.setattr(pa, "FOLD_MERGE", fold)
    plans = {}
    for seed in range(4):
        _, _, k_pool, v_pool, table, lens = make_cache([70, 33, 120], 2, 32, 16, seed=seed)
        scales = {}
        if fp8:
            (k_pool, ks), (v_pool, vs) = pa.quantize_kv(k_pool), pa.quantize_kv(v_pool)
            scales = {"k_scale": ks, "v_scale": vs}
        q = make_q(3, 4, 32, seed=seed)
        results = []
        for kept in (plans, {}):
            monkeypatch.setattr(pa, "_DECODE_PLANS", kept)
            err = torch.zeros(3, dtype=torch.int32, device=DEVICE) if flags else None
            got = paged_decode(q, k_pool, v_pool, table, lens, max_context_len=128,
                               return_lse=lse, error_flags=err, **scales)
            results.append([*(got if lse else (got,)), *((err,) if flags else ())])
        for planned, whole in zip(*results, strict=True):
            torch.testing.assert_close(planned, whole, atol=0, rtol=0, equal_nan=True)
    assert len(plans) == 1 and next(iter(plans.values())) is not kernels.SEEN
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-tiles>>[init]
# Tiles other than the interpreter's default: each bound falls elsewhere. The longest cases
# (64-key tiles over blocks of 8 or 128) are in the slow set.
@pytest.mark.skipif(not pa.INTERPRET, reason="the GPU runs its own tiles")
@pytest.mark.parametrize(("block_n", "block_size"), [
    (32, 8), (32, 32), (32, 128), (64, 32),
    pytest.param(64, 8, marks=pytest.mark.slow), pytest.param(64, 128, marks=pytest.mark.slow)])
def test_decode_other_tiles(monkeypatch, block_n, block_size):
    monkeypatch.setattr(pa, "decode_config",
                        lambda *a: pa.DecodeConfig(block_n, 4, 1))
    lens = list(range(60, 60 + block_n + 1, 3))
    window = 45
    first_kept = [max(0, n - window) for n in lens]
    cache = make_cache(lens, 1, 32, block_size, first_kept=first_kept)
    for num_splits in (1, 2):
        check_decode(make_q(len(lens), 2, 32), cache, lens, window=window,
                     num_splits=num_splits)


@pytest.mark.skipif(not pa.INTERPRET, reason="the GPU runs its own tiles")
@pytest.mark.parametrize(("block_m", "block_n"), [(16, 32), (32, 16)])
@pytest.mark.parametrize("mask", [{}, {"window": 40}])
def test_prefill_other_tiles_across_a_whole_tile(monkeypatch, block_m, block_n, mask):
    monkeypatch.setattr(pa, "prefill_config",
                        lambda *a: pa.PrefillConfig(block_m, block_n, 4, 1))
    ctx_lens = list(range(37, 37 + block_n + 1, 2))
    check_prefill(ctx_lens, [37] * len(ctx_lens), 1, 1, 32, 16, **mask)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-switch>>[init]
@pytest.mark.skipif(not pa.INTERPRET, reason="bfloat16 is refused only under the "
                    "interpreter; on a GPU it is tested by test_gpu_*_matches_reference")
def test_bfloat16_is_refused_under_the_interpreter():
    k, v, k_pool, v_pool, table, lens = make_cache([5], 2, 32, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"bfloat16 is refused under TRITON_INTERPRET=1"):
        paged_decode(make_q(1, 4, 32, dtype=torch.bfloat16), k_pool, v_pool, table, lens)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(pa, "INTERPRET", False)
    k, v, k_pool, v_pool, table, lens = make_cache([5], 2, 32, 16, device="cpu")
    with pytest.raises(ValueError, match=r"needs CUDA tensors, got device cpu.*TRITON_INTERPRET"):
        paged_decode(make_q(1, 4, 32, device="cpu"), k_pool, v_pool, table, lens)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-gpu-safety>>[init]
# --- On the H200: past 2^31 elements, and bad data on both paths, the context still usable ---

@pytest.mark.gpu
def test_gpu_decode_past_2_31_elements():
    # The shape that exposed it: k (1, 32, 589824, 128) fp16, 2.4e9 elements: off_hkv *
    # stride_kh passes 2^31 from kv head 29 on (an illegal memory access when it was int32).
    gen = torch.Generator("cuda").manual_seed(0)
    n, d = 589824, 128
    q = torch.randn(1, 32, 1, d, generator=gen, device="cuda", dtype=torch.float16) * 4
    k = torch.randn(1, 32, n, d, generator=gen, device="cuda", dtype=torch.float16)
    v = torch.randn(1, 32, n, d, generator=gen, device="cuda", dtype=torch.float16).add_(1)
    assert k.numel() > 2**31
    with torch.no_grad():
        out, lse = attention(q, k, v, return_lse=True)
    for h in (0, 28, 29, 31):
        check_row(out[0, h : h + 1], lse[0, h : h + 1], q[:, h : h + 1], k[:, h : h + 1],
                  v[:, h : h + 1], fp16_bar=False)
    assert torch.ones(4, device="cuda").sum().item() == 4


@pytest.mark.gpu
@pytest.mark.parametrize("fold", [True, False])  # the merge folded in or launched apart
@pytest.mark.parametrize("entry", ["num_blocks", -1, 2**31 - 1, -(2**31)])
def test_gpu_bad_entries_and_lengths_leave_the_context_usable(monkeypatch, entry, fold):
    monkeypatch.setattr(pa, "FOLD_MERGE", fold)  # 19 splits on an H200: the fold takes part
    lens = [3000, 5000]
    cache = make_cache(lens, 8, 128, 16, dtype=torch.float16, device="cuda", extra_columns=0)
    k, v, k_pool, v_pool, table, lens_t = cache
    table[1, 100] = bad_value(entry, k_pool)  # keys 1600..1615 of sequence 1
    q = make_q(2, 32, 128, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError):  # the checked path refuses
        paged_decode(q, k_pool, v_pool, table, lens_t)
    with pytest.raises(ValueError):
        paged_prefill(q, k_pool, v_pool, table, lens_t, starts(0, 1, 2))
    flags = torch.zeros(2, dtype=torch.int32, device="cuda")
    fence = spare_block(cache)
    out, lse = paged_decode(q, k_pool, v_pool, fenced(table, fence), lens_t,
                            max_context_len=5000, return_lse=True, error_flags=flags)
    assert flags.tolist() == [0, BAD_ENTRY]
    check_decode_keys(out, lse, q, k, v, 0, range(3000))
    check_decode_keys(out, lse, q, k, v, 1, [*range(1600), *range(1616, 5000)])
    flags.zero_()
    out, lse = paged_prefill(q, k_pool, v_pool, fenced(table, fence), lens_t, starts(0, 1, 2),
                             max_query_len=1, return_lse=True, error_flags=flags)
    assert flags.tolist() == [0, BAD_ENTRY] and not out.isnan().any()
    # a context over capacity (the table holds 313 blocks of 16 = 5008 keys): cut to its row
    flags.zero_()
    over = torch.tensor([3000, 9000], dtype=torch.int32, device="cuda")
    out, lse = paged_decode(q, k_pool, v_pool, fenced(table, fence), over, max_context_len=5000,
                            return_lse=True, error_flags=flags)
    assert flags.tolist() == [0, BAD_LENGTH | BAD_ENTRY]  # (its row's last slots are NaN)
    check_decode_keys(out, lse, q, k, v, 0, range(3000))
    torch.cuda.synchronize()
    assert torch.ones(4, device="cuda").sum().item() == 4  # CUDA work still runs
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-hopper16-check>>[init]
# --- Large groups on Hopper: the 16-bit kernel -----------------------------------------------

@pytest.mark.parametrize(("batch", "hkv", "group", "keys", "splits"), [
    (64, 1, 32, 4096, 4), (32, 2, 32, 8192, 4), (64, 1, 64, 4096, 2), (256, 1, 64, 2048, 1),
    (8, 1, 32, 4096, 16), (8, 1, 32, 1024, 4), (1, 1, 32, 100, 1),
])
def test_the_16bit_split_rule(batch, hkv, group, keys, splits):
    """splits16 on an H200 (132 SMs): powers of two while the grid stays within two programs
    an SM, at most 16, no split shorter than eight iterations of 32 keys."""
    assert paged_attention_hopper.splits16(batch, hkv, group, keys, 132) == splits


# The 16-bit kernel, four splits, for sm90_ptx (Lab 03's 8-bit checks).
HOPPER16_PTX = """
import torch, triton
from minimodel import paged_attention_hopper as ph
b, hq, hkv, d, n, nb, splits = 4, 32, 1, 128, 256, 64, 4
q = torch.zeros(b, hq, d, dtype=torch.float16)
k, v = (torch.zeros(nb, 16, hkv, d, dtype=torch.float16) for _ in "kv")
table, lens = torch.zeros(b, n // 16, dtype=torch.int32), torch.full((b,), n, dtype=torch.int32)
o, lse = torch.empty(b, hq, splits, d), torch.empty(b, hq, splits)
out, counts = torch.empty(b, hq, d, dtype=torch.float16), torch.zeros(b, dtype=torch.int32)
kernel, _, args, meta = ph.launch_args16(
    q, k, v, table, lens, o, lse, None, out, out, counts, qk_scale=0.1, window=None,
    split_len=64, num_splits=splits, capacity=n, strides_o=o.stride(), strides_lse=lse.stride(),
    store_lse=True, with_lse=False, flags=(1, 2))
"""


def test_the_16bit_kernel_copies_by_tma_and_orders_its_merge():
    """Compiled for sm_90: two TMA copies a block (K, V), two blocks an iteration, in the
    STAGES16 iterations that fill the ring and in the loop's refill; the merge's counter added by
    one atom.acq_rel.gpu between two barriers, the second before any load of the partials (the
    order of the Triton kernel's fold, "Merging the splits")."""
    ptx = sm90_ptx(HOPPER16_PTX)
    assert ptx.count("cp.async.bulk.tensor.2d") == 4 * (paged_attention_hopper.STAGES16 + 1)
    assert "mma.sync.aligned.m16n8k16" in ptx
    lines = ptx.splitlines()
    adds = [i for i, ln in enumerate(lines) if "atom.global.gpu.acq_rel.add" in ln]
    assert len(adds) == 1
    before, after = lines[adds[0] - 12 : adds[0]], lines[adds[0] + 1 :]
    assert any("bar.sync" in ln for ln in before)
    first_load = next(i for i, ln in enumerate(after) if "ld.global" in ln)
    assert any("bar.sync" in ln for ln in after[:first_load])


@contextlib.contextmanager
def on_the_16bit_kernel():
    """Asserts that the 16-bit Hopper kernel ran the decode calls inside (a fresh plan)."""
    real = paged_attention_hopper.launch_args16
    with (mock.patch.dict(pa._DECODE_PLANS, clear=True),
          mock.patch.object(paged_attention_hopper, "launch_args16", wraps=real) as spy):
        yield
    assert spy.called


HOPPER16_LENS = [0, 1, 15, 16, 17, 31, 32, 33, 64, 65, 200, 1000]  # block and iteration edges


@pytest.fixture
def any_batch(monkeypatch):
    """The 16-bit kernel at any batch: MIN_PROGRAMS16 is a speed rule, not a limit of it."""
    monkeypatch.setattr(paged_attention_hopper, "MIN_PROGRAMS16", 1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("hq", "hkv"), [(32, 1), (24, 1), (80, 2)])
@pytest.mark.parametrize("window", [None, 5, 40])
@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_gpu_hopper16_decode_computes_attention(dtype, d, hq, hkv, window, num_splits,
                                                any_batch):
    """Ragged lengths, blocks freed behind a window (their -1 entries never read: nothing
    flagged), NaN wherever no sequence owns a slot: the reference's bar."""
    lens = HOPPER16_LENS
    first_kept = None if window is None else [max(0, n - window) for n in lens]
    cache = make_cache(lens, hkv, d, 16, dtype=dtype, device="cuda", first_kept=first_kept)
    q = make_q(len(lens), hq, d, dtype=dtype, device="cuda")
    flags = torch.zeros(len(lens), dtype=torch.int32, device="cuda")
    with on_the_16bit_kernel():
        check_decode(q, cache, lens, window=window, num_splits=num_splits,
                     max_context_len=max(lens), error_flags=flags)
    assert not flags.any()


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2])
def test_gpu_hopper16_flags_bad_entries_and_lengths(num_splits, monkeypatch, any_batch):
    """Entries -1 and num_blocks (never followed), a length past its row (cut to it): flagged as
    the Triton kernel flags them, in their sequences only; every other sequence's output as on
    the good table."""
    lens = HOPPER16_LENS
    cache = make_cache(lens, 1, 128, 16, dtype=torch.float16, device="cuda")
    k, v, k_pool, v_pool, good, good_lens = cache
    q = make_q(len(lens), 32, 128, dtype=torch.float16, device="cuda")
    table, lens_t = good.clone(), good_lens.clone()
    table[4, 1], table[10, 0] = -1, k_pool.shape[0]
    table[6] = table[6, 0]  # every entry of row 6 in the pool, and its length past the row
    lens_t[6] = table.shape[1] * 16 + 5
    table = fenced(table, k_pool.shape[0] + 7)  # past each row: an entry outside the pool
    kw = {"max_context_len": max(lens), "num_splits": num_splits}
    flags = [torch.zeros(len(lens), dtype=torch.int32, device="cuda") for _ in range(2)]
    with on_the_16bit_kernel():
        got = paged_decode(q, k_pool, v_pool, table, lens_t, error_flags=flags[0], **kw)
        want = paged_decode(q, k_pool, v_pool, good, good_lens, **kw)
    monkeypatch.setattr(pa, "HOPPER_16", False)
    paged_decode(q, k_pool, v_pool, table, lens_t, error_flags=flags[1], **kw)
    entry, length = pa.ERR_BAD_ENTRY, pa.ERR_BAD_LENGTH
    assert flags[0].tolist() == flags[1].tolist() == [0, 0, 0, 0, entry, 0, length, 0, 0, 0,
                                                      entry, 0]
    keep = [r for r in range(len(lens)) if r not in (4, 6, 10)]
    torch.testing.assert_close(got[keep], want[keep])
    assert got[[4, 10]].isfinite().all()


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 4])
def test_gpu_hopper16_without_lse_and_strided_q(num_splits, any_batch):
    """Without lse (o stands in for its pointer, the merge stores O only), and q read through
    its strides: the same O as with lse on contiguous q, bit for bit."""
    lens = [300, 4097, 1]
    cache = make_cache(lens, 1, 128, 16, dtype=torch.float16, device="cuda")
    q = make_q(3, 32, 128, dtype=torch.float16, device="cuda")
    strided = torch.empty(3, 32, 256, dtype=torch.float16, device="cuda")[..., ::2]
    strided.copy_(q)
    kw = {"max_context_len": 4097, "num_splits": num_splits}
    args = cache[2:]
    with on_the_16bit_kernel():
        with_lse, _ = paged_decode(q, *args, return_lse=True, **kw)
        torch.testing.assert_close(paged_decode(q, *args, **kw), with_lse, atol=0, rtol=0)
        torch.testing.assert_close(paged_decode(strided, *args, **kw), with_lse, atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_hopper16_split_call_replayed_from_a_graph(any_batch):
    """A split call (the last split merging) captured once and replayed on new queries: each
    replay as an eager call on the same inputs, so the counters were back at 0 every time."""
    lens = [4096] * 8
    cache = make_cache(lens, 1, 128, 16, dtype=torch.float16, device="cuda")
    q = make_q(8, 32, 128, dtype=torch.float16, device="cuda")
    kw = {"max_context_len": 4096}
    with on_the_16bit_kernel():
        paged_decode(q, *cache[2:], **kw)  # compiled before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = paged_decode(q, *cache[2:], **kw)
        for seed in range(3):
            q.copy_(make_q(8, 32, 128, dtype=torch.float16, device="cuda", seed=seed))
            graph.replay()
            torch.testing.assert_close(out, paged_decode(q, *cache[2:], **kw), atol=0, rtol=0)
    check_decode(q, cache, lens, max_context_len=4096)


@pytest.mark.gpu
def test_gpu_hopper16_takes_only_what_fits(monkeypatch):
    """fits16: the MQA case in both dtypes, and each condition broken alone (those go to the
    Triton kernel, whose checks above cover them)."""
    from minimodel.paged_attention_hopper import fits16

    cache = make_cache([64], 1, 128, 16, dtype=torch.float16, device="cuda")
    q = make_q(1, 32, 128, dtype=torch.float16, device="cuda")
    programs = paged_attention_hopper.MIN_PROGRAMS16  # B Hkv chunks16 before splitting
    assert not fits16(q, *cache[2:4])
    assert fits16(q.expand(programs, -1, -1), *cache[2:4])
    assert not fits16(q.expand(programs - 1, -1, -1), *cache[2:4])
    monkeypatch.setattr(paged_attention_hopper, "MIN_PROGRAMS16", 1)
    pools = cache[2:4]
    assert fits16(q, *pools) and fits16(q.bfloat16(), *(p.bfloat16() for p in pools))
    assert not fits16(q[:, :16], *pools)  # a group of 16: the Triton kernel
    assert not fits16(q.float(), *(p.float() for p in pools))
    wide = make_cache([64], 2, 128, 16, dtype=torch.float16, device="cuda")
    assert not fits16(make_q(1, 64, 128, dtype=torch.float16, device="cuda"),
                      wide[2][:, :, :1], wide[3][:, :, :1])  # not contiguous
    small = make_cache([64], 1, 32, 16, dtype=torch.float16, device="cuda")
    assert not fits16(make_q(1, 32, 32, dtype=torch.float16, device="cuda"), *small[2:4])
    blocks32 = make_cache([64], 1, 128, 32, dtype=torch.float16, device="cuda")
    assert not fits16(q, *blocks32[2:4])
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-check>>[init]
# --- minimodel.attention: one entry point, two kernels -------------------------------------

@pytest.mark.parametrize(("heads", "nk", "d", "mask"), [
    ((4, 4), 1, 32, {}), ((4, 2), 100, 48, {"causal": True}), ((4, 1), 77, 64, {}),
    ((6, 2), 130, 32, {"causal": True, "window": 40}), ((4, 2), 65, 16, {"scale": 0.7}),
])
def test_attention_decodes_one_token_against_the_reference(heads, nk, d, mask):
    q, k, v = make_qkv(2, *heads, 1, nk, d, seed=nk)
    out, lse = attention(q, k, v, **mask, return_lse=True)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    for seq in range(2):
        check_row(out[seq], lse[seq], q[seq : seq + 1], k[seq : seq + 1], v[seq : seq + 1],
                  **{"causal": False, **mask})


def test_attention_decode_reads_strided_caches_in_place():
    # (B, N, Hkv, d) storage read as (B, Hkv, N, d), and q one slice of a packed projection
    kv = torch.randn(2, 90, 2, 2, 32, device=DEVICE)
    k, v = (kv[:, :, i].transpose(1, 2) for i in range(2))
    q = torch.randn(2, 1, 3, 4, 32, device=DEVICE)[:, :, 0].transpose(1, 2)
    assert not k.is_contiguous() and not q.is_contiguous()
    torch.testing.assert_close(attention(q, k, v, causal=True),
                               attention_module.flash_attention(q.contiguous(), k.contiguous(),
                                                                v.contiguous(), causal=True),
                               atol=1e-5, rtol=1e-5)


def test_attention_sends_longer_queries_to_flash(monkeypatch):
    calls = []

    def flash(q, k, v, **kwargs):
        calls.append(kwargs)
        return torch.full_like(q, 7.0), torch.zeros(q.shape[:3])

    monkeypatch.setattr(attention_module, "flash_attention", flash)
    q, k, v = make_qkv(1, 2, 2, 3, 10, 32)
    assert (attention(q, k, v, causal=True, window=2) == 7.0).all()
    assert calls == [{"causal": True, "window": 2, "scale": None, "return_lse": True}]


def test_attention_sends_what_hopper_takes_to_the_hopper_kernel(monkeypatch):
    calls = []

    def hopper(q, k, v, **kwargs):
        calls.append(kwargs)
        return torch.full_like(q, 5.0), torch.zeros(q.shape[:3], device=q.device)

    monkeypatch.setattr(attention_module, "flash_attention_hopper", hopper)
    monkeypatch.setattr(attention_module, "_hopper_takes",
                        lambda q, causal: q.dtype == torch.float16)
    q, k, v = make_qkv(1, 2, 2, 3, 10, 32, dtype=torch.float16)
    assert (attention(q, k, v, causal=True) == 5.0).all()
    assert calls == [{"causal": True, "window": None, "scale": None, "return_lse": True}]


@pytest.mark.gpu
def test_gpu_hopper_takes_16_bit_inputs_up_to_d128_on_hopper():
    q = torch.empty(1, 1, 2, 128, device="cuda", dtype=torch.float16)
    on_hopper = torch.cuda.get_device_capability()[0] == 9
    for causal in (False, True):
        assert attention_module._hopper_takes(q, causal) == on_hopper
        assert attention_module._hopper_takes(q.bfloat16(), causal) == on_hopper
        assert not attention_module._hopper_takes(q.float(), causal)
        assert not attention_module._hopper_takes(torch.empty(1, 1, 2, 136, device="cuda",
                                                              dtype=torch.float16), causal)


def test_short_causal_calls_at_small_head_dims_go_to_lab02(monkeypatch):
    """SHORT_CAUSAL: a causal call of at most 512 query rows at d <= 64 runs Lab 02's kernel,
    whatever the GPU; one row longer, a head dim wider, or no mask, and the usual rule holds."""
    monkeypatch.setattr(attention_module, "capability", lambda device: (9, 0))
    monkeypatch.setattr(attention_module, "INTERPRET", False)

    def q_of(nq, d):
        q = torch.empty(1, 1, nq, d, dtype=torch.float16)
        return SimpleNamespace(shape=q.shape, dtype=q.dtype, is_cuda=True, device=q.device)

    takes = attention_module._hopper_takes
    assert not takes(q_of(512, 64), True) and not takes(q_of(2, 16), True)
    assert takes(q_of(513, 64), True) and takes(q_of(512, 72), True)
    assert takes(q_of(512, 64), False)


@pytest.mark.parametrize(("make", "kwargs", "match"), [
    (lambda: make_qkv(1, 3, 2, 1, 8, 32), {}, r"Hq=3 must be a multiple of kv heads Hkv=2"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 32), {"window": 4}, r"window=4 needs causal=True"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 257), {}, r"head_dim must be in \[1, 256\], got d=257"),
    (lambda: make_qkv(1, 2, 2, 3, 8, 257), {}, r"head_dim must be in \[1, 256\], got d=257"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 32, dtype=torch.float64), {}, r"torch.float64"),
])
def test_attention_refuses_what_the_kernels_cannot_run(make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention(*make(), **kwargs)


@pytest.mark.gpu
def test_gpu_attention_decode_allocates_nothing_like_the_cache():
    q, k, v = make_qkv(8, 32, 8, 1, 32768, 128, dtype=torch.float16, device="cuda")
    attention(q, k, v)  # compile first
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    attention(q, k, v)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra < (k.nbytes + v.nbytes) / 100, extra  # outputs and split partials only
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-check-compile>>[init]
# --- minimodel.attention as a custom op, inside torch.compile ----------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("nq", "d", "args"), [
    (1, 16, (False, None, None)), (1, 20, (True, 5, None)),  # decode; d=20 zero-padded
    (9, 16, (True, None, None)), (9, 24, (False, None, 0.3)),  # Flash
])
def test_the_op_passes_opcheck(dtype, nq, d, args):
    # PyTorch's checks of a custom op: its schema, its autograd registration, its fake
    # implementation against the real one (shapes, dtypes, strides), and a trace through
    # AOTAutograd with dynamic shapes.
    q, k, v = make_qkv(2, 4, 2, nq, 12, d, dtype=dtype)
    torch.library.opcheck(attention_op, (q, k, v, *args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("d", "mask"), [
    (1, {}), (20, {"causal": True, "window": 30}), (100, {"scale": 0.2}), (100, {}),
])
def test_attention_decodes_any_head_dim(dtype, d, mask):
    # The decode kernel takes multiples of 8 in [16, 256]; other head dims go through padded.
    q, k, v = make_qkv(2, 4, 2, 1, 50, d, dtype=dtype, seed=d)
    out, lse = attention(q, k, v, **mask, return_lse=True)
    assert out.shape == q.shape and out.is_contiguous() and lse.shape == q.shape[:3]
    for seq in range(2):
        check_row(out[seq], lse[seq], q[seq : seq + 1], k[seq : seq + 1], v[seq : seq + 1],
                  **{"causal": False, **mask})


WRONG_CALLS = [  # (q, k, v, causal, window, scale) past attention's own checks, and the refusal
    (lambda: (*make_qkv(1, 2, 2, 5, 8, 16), False, 3, None), r"window=3 needs causal=True"),
    (lambda: (*make_qkv(1, 3, 2, 1, 8, 16), False, None, None),
     r"Hq=3 must be a multiple of kv heads Hkv=2"),
    (lambda: (*make_qkv(1, 2, 2, 1, 8, 257), False, None, None),
     r"head_dim must be in \[1, 256\], got d=257"),
]


@pytest.mark.parametrize(("make", "match"), WRONG_CALLS)
def test_the_op_refuses_while_torch_compile_traces_it(make, match):
    # The fake implementation checks what the real one does: the op called directly (past
    # attention's own checks) fails eagerly with the message, and under torch.compile while
    # Dynamo traces (the backend never receives a graph), its error carrying the message.
    args = make()
    with pytest.raises(ValueError, match=match):
        attention_op(*args)
    graphs = []
    compiled = torch.compile(lambda *a: attention_op(*a)[0], fullgraph=True, dynamic=False,
                             backend=lambda gm, example: graphs.append(gm) or gm.forward)
    with pytest.raises((ValueError, RuntimeError), match=match):
        compiled(*args)
    assert graphs == []


def test_attention_refuses_grad_eagerly_and_when_compiled():
    q, k, v = make_qkv(1, 2, 2, 1, 8, 16)
    q.requires_grad_(True)
    with pytest.raises(ValueError, match=r"forward-only.*torch.no_grad\(\)"):
        attention(q, k, v)
    graphs = []
    compiled = torch.compile(attention, fullgraph=True, dynamic=False,
                             backend=lambda gm, example: graphs.append(gm) or gm.forward)
    with pytest.raises((ValueError, RuntimeError), match=r"forward-only.*torch.no_grad\(\)"):
        compiled(q, k, v)
    assert graphs == []
    with torch.no_grad():
        torch.testing.assert_close(attention(q, k, v), attention(q.detach(), k, v))


def test_the_op_alone_would_fail_only_at_backward():
    # Why attention refuses grad itself: the op, without an autograd formula, runs its forward
    # (grad mode is off inside it, so the kernels' own refusal cannot fire) and only
    # backward() fails, with PyTorch's generic message.
    q, k, v = make_qkv(1, 2, 2, 1, 8, 16)
    q.requires_grad_(True)
    o, _ = attention_op(q, k, v, False, None, None)
    assert o.requires_grad
    with pytest.raises(RuntimeError, match=r"no autograd formula"):
        o.sum().backward()


def compile_and_compare(config, n, backend, *, device=DEVICE, dtype=torch.float32):
    """MiniGPT.forward on whole sequences through `attention`, compiled with fullgraph=True (a
    graph break raises) through a backend that counts the graphs Dynamo hands it; returns the
    compiled output, the eager one, and the float32 reference (attention_ref, eager)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    model = MiniGPT(config).eval()
    reference = copy.deepcopy(model).to(device)
    model.to(device, dtype)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(model.forward, backend=counter, fullgraph=True)
    tokens = torch.randint(0, config.vocab_size, (2, n), device=device)
    with torch.no_grad():
        got, want, ref = compiled(tokens, attn=attention), model(tokens, attn=attention), \
            reference(tokens)
    assert counter.frame_count == 1  # one graph
    ops = [node for node in counter.graphs[0].graph.nodes
           if node.target in (attention_op, torch.ops.minimodel.attention,
                              torch.ops.minimodel.attention.default)]
    assert len(ops) == config.n_layers  # each layer's attention is a node of it
    return got, want, ref


SMALL = {"vocab_size": 50, "max_seq_len": 32, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
         "n_layers": 2}


@pytest.mark.parametrize(("n", "window"), [(1, None), (11, None), (11, 4)])  # decode; Flash
def test_minigpt_compiles_in_one_graph_through_attention(n, window):
    # aot_eager: Dynamo's trace (where a graph break would raise) and AOTAutograd's (the fake
    # implementation gives the shapes), then the graph run eagerly, op by op.
    config = MiniGPTConfig(**SMALL, window=window)
    got, want, ref = compile_and_compare(config, n, "aot_eager")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


CXX = shutil.which(os.environ.get("CXX", "g++"))


@pytest.mark.skipif(DEVICE != "cpu", reason="inductor's CPU code with the interpreter's kernels; "
                    "on a GPU test_gpu_minigpt_compiles_with_inductor runs")
@pytest.mark.skipif(CXX is None, reason="inductor compiles its CPU kernels with a C++ compiler "
                    "(g++ or $CXX), and none was found; the aot_eager test above still runs")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_minigpt_compiles_with_inductor_on_the_cpu():  # (the warning: inductor's own imports)
    # Inductor generates and compiles C++ for the layers around the op, which stays a call.
    # Slow the first time (tens of seconds: inductor's C++ compiles, cached on disk after).
    got, want, ref = compile_and_compare(MiniGPTConfig(**SMALL, window=4), 11, "inductor")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "window"), [(1, None), (200, None), (200, 64)])
def test_gpu_minigpt_compiles_with_inductor(n, window):
    # fp16 on the GPU: the compiled model's error against the float32 reference at most twice
    # the eager model's, plus 1e-3 of the logits' scale (inductor fuses and rounds differently).
    config = MiniGPTConfig(vocab_size=50, max_seq_len=256, d_model=128, n_heads=4, n_kv_heads=2,
                           n_layers=2, window=window)
    got, want, ref = compile_and_compare(config, n, "inductor", device="cuda",
                                         dtype=torch.float16)
    assert got.dtype == torch.float16 and not got.isnan().any()
    err_eager = (want.float() - ref).abs().max().item()
    err_compiled = (got.float() - ref).abs().max().item()
    assert err_compiled <= 2 * err_eager + 1e-3 * ref.abs().max().item(), (err_compiled,
                                                                          err_eager)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-check-minigpt>>[init]
# --- MiniGPT served through the kernels --------------------------------------------------------

class OnDevice(torch.nn.Module):
    """The model on `device`, taking the CPU tensors Lab 03's server builds."""

    def __init__(self, model: MiniGPT, device):
        super().__init__()
        self.model, self.config, self.device = model.to(device), model.config, device

    def forward(self, tokens, positions, cache=None):
        return self.model(tokens.to(self.device), positions.to(self.device), cache)


def serve_through_the_kernels(config, arrivals, steps_between, num_blocks, block_size, device):
    """Lab 03's server (tests/test_paged_kv_cache.py) on a KernelPagedKVCache in float32: each
    arrival prefilled through paged_prefill, every live sequence decoding one token per step
    through paged_decode; compared with decoding each sequence alone in float64."""
    from test_paged_kv_cache import Server, decode_alone

    torch.manual_seed(0)
    model = MiniGPT(config).eval()
    reference = copy.deepcopy(model).double()
    cache = KernelPagedKVCache(config, num_blocks, block_size, dtype=torch.float32,
                               device=device, enable_prefix_caching=config.window is None)
    server = Server(OnDevice(model, device), cache)
    released = 0  # most block-table entries the window had given back at once
    hits = []  # prompt tokens each arrival found cached (prefilled no more)
    for seq_id, (prompt, n_new) in enumerate(arrivals):
        hits.append(server.arrive(seq_id, prompt, n_new))
        for _ in range(steps_between):
            server.step()
    while server.live:
        released = max(released, *(cache.manager.block_table(s).count(-1) for s in server.live))
        server.step()
    for seq_id, s in server.done.items():
        generated, rows = decode_alone(reference, s["prompt"], s["n_new"], s["first"])
        assert s["generated"] == generated, seq_id
        for pos, row in s["logits"].items():
            torch.testing.assert_close(row.double().cpu(), rows[pos], atol=1e-4, rtol=1e-4)
    return server, released, hits


@pytest.mark.parametrize("window", [None, 6])
def test_minigpt_serves_a_batch_through_the_kernels(window):
    # Arrivals between decode steps, ragged lengths, a cached shared prefix (without a window;
    # the block manager refuses prefix caching with one), blocks released behind a window.
    from test_paged_kv_cache import LINES, TOK

    config = MiniGPTConfig(vocab_size=TOK.vocab_size, max_seq_len=128, d_model=64, n_heads=4,
                           n_kv_heads=2, n_layers=2, window=window)
    shared = LINES[12] + "\n"  # two requests share a prefix: the second one's is cached
    arrivals = [(TOK.encode(LINES[0][:13]), 8), (TOK.encode(shared + "comer pr"), 4),
                (TOK.encode(LINES[3][:22]), 5), (TOK.encode(shared + "vivir pre"), 4)]
    server, released, hits = serve_through_the_kernels(config, arrivals, 1, 80, 8, DEVICE)
    assert set(server.done) == {0, 1, 2, 3}
    if window is None:  # the fourth prompt's shared prefix came from the cache, in whole blocks
        assert hits[3] > 0 and hits[3] % 8 == 0
    else:
        assert released > 0
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-check-graphs>>[init]
# --- A step in one graph: compiled, captured, no sync ------------------------------------------

class DecodeBatch:
    """Sequences prefilled alone (eagerly, checked) into `cache`, then decoding in one batch, as
    a serving engine splits a step: `prepare` is the host's bookkeeping before it (append_slot
    for each sequence's next token, then select), the step itself is the caller's."""

    def __init__(self, model, cache, prompts, device):
        self.cache, self.ids, self.device = cache, list(prompts), device
        self.lengths, self.next = {}, {}
        for seq, prompt in prompts.items():
            cache.allocate(seq, prompt)
            logits = model(torch.tensor([prompt], device=device),
                           torch.arange(len(prompt), device=device)[None], cache.select([seq]))
            self.lengths[seq], self.next[seq] = len(prompt), int(logits[0, -1].argmax())

    def prepare(self):
        """(tokens, positions) (B, 1) on the CPU and the selected view, for the next step."""
        for seq in self.ids:
            self.cache.append_slot(seq, self.next[seq])
        tokens = torch.tensor([[self.next[seq]] for seq in self.ids])
        positions = torch.tensor([[self.lengths[seq]] for seq in self.ids])
        return tokens, positions, self.cache.select(self.ids)

    def advance(self, next_tokens):
        for seq, token in zip(self.ids, next_tokens, strict=True):
            self.lengths[seq] += 1
            self.next[seq] = token


# Three sequences of ragged lengths, each crossing a block boundary (blocks of 8) while decoding.
PROMPTS = {0: [5, 1, 7, 3, 9, 2, 8, 4, 6, 1, 3, 5, 7], 1: [2, 4, 6, 8, 1], 3: [9, 8, 7] * 7}
GRAPH_SIZES = {"vocab_size": 10, "max_seq_len": 40, "d_model": 64, "n_heads": 4,
               "n_kv_heads": 2, "n_layers": 2}


def decode_compiled(window, backend, device, steps=4):
    """PROMPTS decoding through torch.compile(model.forward, fullgraph=True) on a
    KernelPagedKVCache, the caller committing after each step, and eagerly through Lab 03's
    PagedKVCache and attention_ref (the next tokens: the reference's). Returns the largest
    difference of the logits and the compile counter."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    config = MiniGPTConfig(**GRAPH_SIZES, window=window)
    model = MiniGPT(config).eval().to(device)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(model.forward, backend=counter, fullgraph=True)
    worst = 0.0
    with torch.no_grad():
        ref = DecodeBatch(model, PagedKVCache(config, 40, 8, device=device), PROMPTS, device)
        ker = DecodeBatch(model, KernelPagedKVCache(config, 40, 8, device=device), PROMPTS,
                          device)
        ker.next = dict(ref.next)
        for _ in range(steps):
            tokens, positions, view = ref.prepare()
            want = model(tokens.to(device), positions.to(device), view, attn=attention_ref)
            tokens, positions, view = ker.prepare()
            tokens, positions = tokens.to(device), positions.to(device)
            got = compiled(tokens, positions, view)
            view.commit(positions)  # the compiled pass leaves it to the caller
            assert not view.error_flags.any()
            worst = max(worst, (got - want).abs().max().item())
            next_tokens = want[:, -1].argmax(-1).tolist()
            ref.advance(next_tokens)
            ker.advance(next_tokens)
    computed = [ker.cache.manager.num_computed_tokens(seq) for seq in PROMPTS]
    assert computed == [len(p) + steps for p in PROMPTS.values()]
    return worst, counter


@pytest.mark.parametrize("window", [None, 6])
def test_a_compiled_decode_step_through_the_kernels(window):
    # One graph for every step (new values, new views, same shapes: no recompilation), each
    # layer's cache write and attention one node of it.
    worst, counter = decode_compiled(window, "aot_eager", DEVICE)
    assert worst < 5e-5  # float32 kernels against attention_ref; logits of order 1
    assert counter.frame_count == 1
    ops = [node for node in counter.graphs[0].graph.nodes
           if "paged_cache_attend" in str(node.target)]
    assert len(ops) == GRAPH_SIZES["n_layers"]


@pytest.mark.slow  # inductor's C++ compiles: tens of seconds
@pytest.mark.skipif(DEVICE != "cpu", reason="inductor's CPU code with the interpreter's kernels; "
                    "on a GPU test_gpu_a_decode_step_compiles_with_inductor runs")
@pytest.mark.skipif(CXX is None, reason="inductor compiles its CPU kernels with a C++ compiler "
                    "(g++ or $CXX), and none was found; the aot_eager test above still runs")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_a_decode_step_compiles_with_inductor_on_the_cpu():
    worst, counter = decode_compiled(6, "inductor", DEVICE)
    assert worst < 5e-5 and counter.frame_count == 1


@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 6])
def test_gpu_a_decode_step_compiles_with_inductor(window):
    worst, counter = decode_compiled(window, "inductor", "cuda")
    assert worst < 1e-4 and counter.frame_count == 1


def test_select_fills_one_table_buffer_per_batch_size():
    config = MiniGPTConfig(**GRAPH_SIZES)
    cache = KernelPagedKVCache(config, 40, 8, device=DEVICE)
    for seq, prompt in PROMPTS.items():
        cache.allocate(seq, prompt)
    assert cache.max_blocks == 5  # ceil(40 / 8)
    both = cache.select([3, 0])
    tables = [cache.manager.block_table(s) for s in (3, 0)]
    assert both.block_tables.tolist() == [t + [-1] * (5 - len(t)) for t in tables]
    assert both.block_tables.dtype == torch.int32 and both.error_flags.tolist() == [0, 0]
    buffer = both.block_tables
    other = cache.select([1, 0])  # as many rows: the same buffer, new contents
    assert other.block_tables is buffer and buffer[0].tolist()[:1] == cache.manager.block_table(1)
    assert cache.select([1]).block_tables is not buffer  # one row: a buffer of its own
    with pytest.raises(ValueError, match=r"select needs distinct live sequence ids"):
        cache.select([0, 0])


def test_views_that_are_no_longer_current_are_refused():
    torch.manual_seed(0)
    config = MiniGPTConfig(**GRAPH_SIZES)
    model = MiniGPT(config).eval()
    cache = KernelPagedKVCache(config, 40, 8, device=DEVICE)
    for seq, prompt in PROMPTS.items():
        cache.allocate(seq, prompt)
    tokens, positions = torch.zeros(2, 3, dtype=torch.long), torch.arange(3).expand(2, 3)
    if DEVICE != "cpu":  # the view's device is checked before which view it is
        with pytest.raises(ValueError, match=r"the cache is on cuda"):
            model(tokens, positions, cache.select([0, 1]))
    model, tokens, positions = model.to(DEVICE), tokens.to(DEVICE), positions.to(DEVICE)
    first = cache.select([0, 1])
    cache.select([1, 3])  # replaces the tables of every two-row view
    with pytest.raises(ValueError, match=r"later select of 2 rows"):
        model(tokens, positions, first)
    with pytest.raises(ValueError, match=r"later select of 2 rows"):  # unchecked: attend's guard
        model(tokens, positions, first, check=False)
    one = cache.select([1])
    with torch.no_grad():
        model(tokens[:1, :2], positions[:1, :2], one)  # positions 0, 1 of its 5
        for _ in range(4):  # positions 5 ... 8: the last opens block 1, a new table entry
            cache.append_slot(1, 4)
        two = torch.tensor([[2]], device=DEVICE)
        with pytest.raises(ValueError, match=r"sequence 1's block table changed after select"):
            model(tokens[:1, :1], two, one)
        model(tokens[:1, :1], two, cache.select([1]))  # selected again: fine
    cache.allocate(9, [1] * 41)  # more tokens than max_seq_len: a table of 6 blocks
    with pytest.raises(ValueError, match=r"sequence 9 holds 6 blocks, more than the 5"):
        cache.select([9])


def test_an_unchecked_eager_step_reads_no_value(monkeypatch):
    # check=False: no value read on the host in the whole pass (on a GPU: no sync), and the
    # same logits as the checked pass.
    from test_minigpt import HostReads

    torch.manual_seed(0)
    config = MiniGPTConfig(**GRAPH_SIZES, window=6)
    model = MiniGPT(config).eval().to(DEVICE)
    out = []
    with torch.no_grad():
        for check in (None, False):
            batch = DecodeBatch(model, KernelPagedKVCache(config, 40, 8, device=DEVICE),
                                PROMPTS, DEVICE)
            tokens, positions, view = batch.prepare()
            tokens, positions = tokens.to(DEVICE), positions.to(DEVICE)  # beside the model
            with HostReads(monkeypatch) as host:
                out.append(model(tokens, positions, view, check=check))
            assert bool(host.reads) == (check is None)
            assert [batch.cache.manager.num_computed_tokens(s) for s in PROMPTS] == [
                n + 1 for n in batch.lengths.values()]  # the eager pass committed
    torch.testing.assert_close(out[1], out[0], atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_a_captured_split_decode_takes_its_own_workspace():
    # Eager calls keep their split workspace for the next call; a call captured into a CUDA graph
    # takes its own from the graph's pool, which no eager call then overwrites between replays.
    dev = torch.device("cuda")
    eager = pa._workspace(dev, 1, 8, 4, 64, 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = pa._workspace(dev, 1, 8, 4, 64, 2)
        captured[0].zero_()
    assert captured[0].data_ptr() != eager[0].data_ptr()
    assert captured[2].data_ptr() != eager[2].data_ptr()
    assert pa._workspace(dev, 1, 8, 4, 64, 2) is eager


def fold_inputs(b, n, seed):
    """Decode at the bench's shape (GQA 32/8, d = 128, fp16), contiguous: q (B, 32, 1, 128),
    k, v (B, 8, n, 128)."""
    return make_qkv(b, 32, 8, 1, n, 128, dtype=torch.float16, device="cuda", seed=seed)


def folded_and_not(q, k, v, num_splits, window=None):
    return [pa.decode_contiguous(q, k, v, window=window, tau=128**-0.5, num_splits=num_splits,
                                 fold_merge=fold) for fold in (True, False)]


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "n", "num_splits", "window"), [
    (1, 4096, None, None), (1, 32768, None, None), (1, 4096, 256, None), (4, 4096, 64, None),
    (1, 1000, 7, None), (2, 32768, None, 3000),
])
def test_gpu_the_folded_merge_holds_call_after_call(b, n, num_splits, window):
    """Many calls in a row, new values each time: the folded merge (the last split of each
    (sequence, kv head) merges, after its atomic count) against the two-launch merge. A merge
    that read a partial before its split's stores were visible would read the last call's
    value (other inputs: another output) or garbage; the fold and _merge_splits run the same
    helper, so they agree up to the rounding of its float32 operations (the compiler may
    contract them differently in the two kernels) and fp16's last bit."""
    q, k, v = fold_inputs(b, n, seed=0)
    for seed in range(1, 101):
        q.copy_(torch.randn_like(q))
        if seed % 10 == 0:
            k.copy_(torch.randn_like(k))
        (o_f, lse_f), (o_t, lse_t) = folded_and_not(q, k, v, num_splits, window)
        torch.testing.assert_close(o_f, o_t, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(lse_f, lse_t, atol=1e-5, rtol=1e-6)
    torch.cuda.synchronize()
    for _, space in pa._WORKSPACES.values():  # every counter back at zero
        assert space[2] is None or not space[2].any()


@pytest.mark.gpu
@pytest.mark.parametrize(("num_splits", "window", "hkv"),
                         [(16, None, 8), (64, 300, 8), (16, None, 1)])
def test_gpu_the_folded_paged_merge_holds_call_after_call(num_splits, window, hkv):
    """The same through a block table on the fast path, B = 3 with a table entry outside the
    pool (flagged, its keys skipped by both paths alike) and an empty context; MQA too (a
    group of 32 in chunks, a counter per chunk)."""
    lens = [4000, 0, 2500]
    k_pool, v_pool, table, lens_t = make_cache(lens, hkv, 128, 16, dtype=torch.float16,
                                               device="cuda")[2:]
    table = table.clone()
    table[2, 150] = k_pool.shape[0]  # keys 2400 to 2415: inside the window too
    q = make_q(3, 32, 128, dtype=torch.float16, device="cuda")
    for _ in range(50):
        q.copy_(torch.randn_like(q))
        got = []
        for fold in (True, False):
            flags = torch.zeros(3, dtype=torch.int32, device="cuda")
            got.append((*pa._launch_decode(
                q, k_pool, v_pool, table, lens_t, n_k=0, strides_k=k_pool.stride(),
                strides_v=v_pool.stride(), block_size=16, n_kv_heads=hkv, max_context_len=4000,
                num_splits=num_splits, window=window, tau=128**-0.5, error_flags=flags,
                fold_merge=fold), flags))
        (o_f, lse_f, flags_f), (o_t, lse_t, flags_t) = got
        torch.testing.assert_close(o_f, o_t, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(lse_f, lse_t, atol=1e-5, rtol=1e-6)
        assert flags_f.tolist() == flags_t.tolist() == [0, 0, pa.ERR_BAD_ENTRY]
    torch.cuda.synchronize()
    for _, space in pa._WORKSPACES.values():
        assert space[2] is None or not space[2].any()


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [None, 64, 256])
def test_gpu_the_folded_merge_replays_in_a_cuda_graph(num_splits):
    """The folded decode captured once and replayed with new values copied into its inputs
    between replays: each replay gives the two-launch merge's output (eager, same inputs). The
    captured call's counters come zeroed by a fill the capture recorded, and the kernel's reset
    leaves them at zero for the next replay."""
    q, k, v = fold_inputs(1, 4096, seed=0)
    tau = 128**-0.5
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compiled before the capture
        pa.decode_contiguous(q, k, v, window=None, tau=tau, num_splits=num_splits,
                             fold_merge=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = pa.decode_contiguous(q, k, v, window=None, tau=tau, num_splits=num_splits,
                                      fold_merge=True)
    for seed in range(1, 31):
        for t, new in zip((q, k, v), fold_inputs(1, 4096, seed=seed), strict=True):
            t.copy_(new)
        graph.replay()
        want_o, want_lse = pa.decode_contiguous(q, k, v, window=None, tau=tau,
                                                num_splits=num_splits, fold_merge=False)
        torch.testing.assert_close(o, want_o, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(lse, want_lse, atol=1e-5, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize(("nq", "mask"), [
    (1, {}), (1, {"causal": True, "window": 100}), (300, {"causal": True}),
    (300, {"causal": True, "window": 64}), (300, {}),
])
def test_gpu_attention_replays_in_a_cuda_graph(dtype, nq, mask):
    # minimodel.attention captured once (decode: Nq = 1; prefill: Nq = 300), replayed on new
    # values copied into the same tensors: each replay gives the eager call's output.
    shape = (2, 8, 2, nq, 700, 64)
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the kernels compiled before the capture
        attention(q, k, v, **mask)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attention(q, k, v, **mask)
    for seed in (1, 2, 3):
        for t, new in zip((q, k, v), make_qkv(*shape, dtype=dtype, device="cuda", seed=seed),
                          strict=True):
            t.copy_(new)
        graph.replay()
        torch.testing.assert_close(out, attention(q, k, v, **mask))


@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 6])
def test_gpu_a_captured_decode_step_replays_without_a_sync(window):
    # MiniGPT's decode step through a KernelPagedKVCache: step 0 eagerly (unchecked: a real
    # step, and the warm-up), step 1 captured into a CUDA graph, steps 1-5 replayed; between
    # steps only the host's bookkeeping (append_slot, select, copies into the graph's input
    # tensors, commit). Sync debug mode "error" raises at any sync, from the bookkeeping to the
    # replay; the logits are those of eager decoding through a second cache.
    torch.manual_seed(0)
    config = MiniGPTConfig(**GRAPH_SIZES, window=window)
    model = MiniGPT(config).eval().cuda()
    with torch.no_grad():
        eager = DecodeBatch(model, KernelPagedKVCache(config, 40, 8, device="cuda"), PROMPTS,
                            "cuda")
        batch = DecodeBatch(model, KernelPagedKVCache(config, 40, 8, device="cuda"), PROMPTS,
                            "cuda")
        batch.next = dict(eager.next)
        tokens = torch.zeros(len(PROMPTS), 1, dtype=torch.long, device="cuda")
        positions = torch.zeros_like(tokens)
        side, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        for step in range(6):
            host_tokens, host_positions, view = eager.prepare()
            want = model(host_tokens.cuda(), host_positions.cuda(), view)  # checked, eager
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                host_tokens, host_positions, view = batch.prepare()
                tokens.copy_(host_tokens.pin_memory(), non_blocking=True)
                positions.copy_(host_positions.pin_memory(), non_blocking=True)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    if step == 0:
                        out = model(tokens, positions, view, check=False)  # commits
                    elif step == 1:
                        graph.capture_begin()
                        out = model(tokens, positions, view)  # traced: no check, no commit
                        graph.capture_end()
                torch.cuda.current_stream().wait_stream(side)
                if step > 0:
                    graph.replay()
                    view.commit(positions)
            finally:
                torch.cuda.set_sync_debug_mode(0)
            torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
            assert not view.error_flags.any()
            next_tokens = want[:, -1].argmax(-1).tolist()
            eager.advance(next_tokens)
            batch.advance(next_tokens)
    assert [batch.cache.manager.num_computed_tokens(s) for s in PROMPTS] == [
        len(p) + 6 for p in PROMPTS.values()]
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-messages>>[init]
SOLUTION_DECODE_MESSAGES = [  # the task's tests check what a refusal names; these, its words
    (lambda: decode_args(q=make_q(2, 4, 32)[:, :, None]), {},
     r"q must have rank 3 \(B, Hq, d\), got shape \(2, 4, 1, 32\)"),
    (lambda: decode_args(v_pool=decode_args()["v_pool"][:-1]), {},
     r"k_pool and v_pool must have the same shape, got \(7, 16, 2, 32\) and \(6, 16, 2, 32\)"),
    (lambda: decode_args(q=make_q(2, 3, 32)), {},
     r"query heads Hq=3 must be a multiple of kv heads Hkv=2"),
    (lambda: decode_args(q=make_q(2, 4, 32).double()), {},
     r"dtype torch.float64 is not supported: use float16, bfloat16 or float32"),
    (lambda: decode_args(q=make_q(2, 4, 32).half()), {},
     r"q and the pools must share one dtype, got torch.float16, torch.float32, torch.float32"),
    (lambda: decode_args(q=torch.randn(2, 4, 32, device="meta")), {},
     r"q, the pools, block_tables and context_lens must be on one device, got meta, "),
    (lambda: decode_args(block_tables=decode_args()["block_tables"].long()), {},
     r"block_tables must be int32, got torch.int64"),
    (lambda: decode_args(context_lens=decode_args()["context_lens"].long()), {},
     r"context_lens must be int32, got torch.int64"),
    (lambda: decode_args(context_lens=decode_args()["context_lens"][:1]), {},
     r"batch mismatch: B=2, block_tables \(2, 5\), context_lens \(1,\)"),
    (lambda: decode_args(context_lens=starts(5, 81)), {},
     r"context_lens must lie in \[0, 80\] \(max_blocks x block_size\), got min 5, max 81"),
    (lambda: decode_args(context_lens=starts(-1, 4)), {},
     r"context_lens must lie in \[0, 80\] \(max_blocks x block_size\), got min -1, max 4"),
    (decode_args, {"max_context_len": 81}, r"max_context_len must be an int in \[0, 80\], got 81"),
    (decode_args, {"max_context_len": -1}, r"max_context_len must be an int in \[0, 80\], got -1"),
    (decode_args, {"num_splits": 0}, r"num_splits must be an int in \[1, 256\], got 0"),
    (decode_args, {"window": 0}, r"window must be >= 1 \(a query always sees itself\), got 0"),
    (decode_args, {"scale": -1.0}, r"scale must be finite and positive, got -1.0"),
    (lambda: decode_args(k_pool=torch.randn(4, 12, 2, 32, device=DEVICE),
                         v_pool=torch.randn(4, 12, 2, 32, device=DEVICE)), {},
     r"block_size must be a power of two in \[8, 128\], got 12"),
    (lambda: decode_args(q=make_q(2, 4, 32).requires_grad_()), {},
     r"paged attention is forward-only \(q or a pool requires grad\)"),
]


@pytest.mark.parametrize(("make", "kwargs", "match"), SOLUTION_DECODE_MESSAGES)
def test_the_decode_refusals_word_for_word(make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paged_decode(**make(), **kwargs)


@pytest.mark.parametrize("d", [8, 20, 264])
def test_the_head_dim_refusal_word_for_word(d):
    k, v, k_pool, v_pool, table, lens = make_cache([5, 40], 2, d, 16)
    with pytest.raises(ValueError, match=rf"head_dim must be a multiple of 8 in \[16, 256\], "
                                         rf"got d={d}"):
        paged_decode(make_q(2, 4, d), k_pool, v_pool, table, lens)


SOLUTION_PREFILL_MESSAGES = [
    (lambda: prefill_args(q=make_q(9, 4, 32)[None]), {},
     r"q must have rank 3 \(total_q, Hq, d\), got shape \(1, 9, 4, 32\)"),
    (lambda: prefill_args(query_start_loc=starts(1, 4, 9)), {},
     r"query_start_loc must rise from 0 to total_q=9, got first 1, last 9, smallest step 3"),
    (lambda: prefill_args(query_start_loc=starts(0, 4, 8)), {},
     r"query_start_loc must rise from 0 to total_q=9, got first 0, last 8, smallest step 4"),
    (lambda: prefill_args(query_start_loc=starts(0, 6, 4)), {},
     r"query_start_loc must rise from 0 to total_q=9, got first 0, last 4, smallest step -2"),
    (lambda: prefill_args(query_start_loc=starts(0, 6, 4, 9)), {}, r"batch mismatch: B=3, "),
    (lambda: prefill_args(query_start_loc=starts(0, 6, 9).long()), {},
     r"query_start_loc must be int32, got torch.int64"),
    (lambda: prefill_args(q=make_q(9, 5, 32)), {},
     r"query heads Hq=5 must be a multiple of kv heads Hkv=2"),
    (prefill_args, {"causal": False, "window": 4}, r"window=4 needs causal=True"),
    (prefill_args, {"max_query_len": 10}, r"max_query_len must be an int in \[0, 9\], got 10"),
    (lambda: prefill_args(query_start_loc=starts(0)), {},
     r"query_start_loc must hold B \+ 1 >= 2 offsets, got shape \(1,\)"),
]


@pytest.mark.parametrize(("make", "kwargs", "match"), SOLUTION_PREFILL_MESSAGES)
def test_the_prefill_refusals_word_for_word(make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paged_prefill(**make(), **kwargs)
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/theory/02-flash-attention.md#tests/test_flash_bytes.py>>[init]
"""Checks of the Flash byte model (tangled from docs/theory/02-flash-attention.md)."""

import itertools

import pytest

from minimodel.reference import visible_mask
from minimodel.roofline import attention_flops, attention_min_bytes, flash_attention_bytes


# ~/~ begin <<docs/theory/02-flash-attention.md#flash-bytes-check-tiles>>[init]
def kv_rows_by_brute_force(nq, nk, block_m, block_n, causal, window):
    """Key rows one head loads, from the reference mask: a key tile is loaded iff it holds a
    visible pair for some row of the query tile; asserts that this is the kernel's [lo, hi)."""
    mask = visible_mask(nq, nk, causal=causal, window=window)
    rows = 0
    for i0 in range(0, nq, block_m):
        tile = mask[i0 : i0 + block_m]
        visited = [j0 for j0 in range(0, nk, block_n) if tile[:, j0 : j0 + block_n].any()]
        if causal:
            pos_first, pos_last = i0 + nk - nq, i0 + block_m - 1 + nk - nq
            first_key = 0 if window is None else max(0, pos_first - window + 1)
            last_key = min(nk - 1, pos_last)
            rule = list(range(first_key // block_n * block_n, last_key + 1, block_n))
            assert visited == rule, (i0, visited, rule)
        rows += sum(min(block_n, nk - j0) for j0 in visited)
    return rows


LENGTHS = [(1, 1), (7, 7), (63, 97), (97, 63), (113, 113), (1, 1023), (1023, 1023), (300, 113),
           (100, 30)]
MASKS = [(False, None), (True, None), (True, 1), (True, 24), (True, 200)]
TILES = [(32, 16), (64, 64), (128, 64), (16, 32)]
GRID = [(nq, nk, *TILES[i % len(TILES)], *mask)
        for i, ((nq, nk), mask) in enumerate(itertools.product(LENGTHS, MASKS))]


@pytest.mark.parametrize(("nq", "nk", "block_m", "block_n", "causal", "window"), GRID)
def test_bytes_match_a_brute_force_tile_count(nq, nk, block_m, block_n, causal, window):
    b, hq, hkv, d = 2, 4, 2, 48
    rows = kv_rows_by_brute_force(nq, nk, block_m, block_n, causal, window)
    expected = 2 * b * hq * (2 * nq * d + 2 * rows * d)
    got = flash_attention_bytes(b, hq, hkv, nq, nk, d, block_m=block_m, block_n=block_n,
                                causal=causal, window=window, lse=False)
    assert got == expected
# ~/~ end


# ~/~ begin <<docs/theory/02-flash-attention.md#flash-bytes-check-dense>>[init]
@pytest.mark.parametrize(("nq", "nk"), [(1, 1), (1, 1023), (63, 97), (128, 128), (97, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_one_query_tile_reads_the_compulsory_bytes(nq, nk, causal):
    got = flash_attention_bytes(2, 3, 3, nq, nk, 80, block_m=128, block_n=64, causal=causal,
                                lse=False)
    assert got == attention_min_bytes(2, 3, 3, nq, nk, 80)


@pytest.mark.parametrize(("n", "block_m"), [(1024, 64), (4096, 128), (1000, 128)])
def test_each_query_tile_rereads_k_and_v(n, block_m, d=64):
    tiles = -(-n // block_m)
    reread = (tiles - 1) * 2 * n * d * 2  # K and V, fp16, per head
    got = flash_attention_bytes(1, 1, 1, n, n, d, block_m=block_m, lse=False)
    assert got == attention_min_bytes(1, 1, 1, n, n, d) + reread
    assert got == flash_attention_bytes(1, 1, 1, n, n, d, block_m=block_m, block_n=16, lse=False)


def test_no_reuse_intensity_approaches_the_tile_height():
    n, d = 1 << 15, 128
    for block_m in (64, 128):
        flops = attention_flops(1, 1, n, n, d)
        intensity = flops / flash_attention_bytes(1, 1, 1, n, n, d, block_m=block_m, lse=False)
        assert intensity == pytest.approx(2 * n / (2 * (1 + n / block_m)))  # 2N / (E (1 + T_q))
        assert 0.99 * block_m < intensity < block_m  # -> 2 B_M / E = B_M in fp16


def test_lse_adds_four_bytes_per_query_row():
    kw = {"block_m": 64, "block_n": 32, "causal": True}
    with_lse = flash_attention_bytes(2, 4, 1, 100, 300, 64, **kw)
    without = flash_attention_bytes(2, 4, 1, 100, 300, 64, **kw, lse=False)
    assert with_lse - without == 4 * 2 * 4 * 100  # float32, B * Hq * Nq rows
# ~/~ end


# ~/~ begin <<docs/theory/02-flash-attention.md#flash-bytes-check-masks>>[init]
def _kv_bytes(n, d, **kw):
    """The K/V part: everything but the Q read and the O write (no lse)."""
    return flash_attention_bytes(1, 1, 1, n, n, d, lse=False, **kw) - 2 * 2 * n * d


def test_causal_skips_whole_tiles_and_halves_the_work():
    n, d, block_m, block_n = 8192, 128, 128, 64
    t = n // block_m
    causal = _kv_bytes(n, d, block_m=block_m, block_n=block_n, causal=True)
    dense = _kv_bytes(n, d, block_m=block_m, block_n=block_n)
    assert causal * 2 * t == dense * (t + 1)  # (T_q + 1) / (2 T_q), exactly
    flops = attention_flops(1, 1, n, n, d, causal=True)
    assert flops * 2 * n == attention_flops(1, 1, n, n, d) * (n + 1)
    kw = {"block_m": block_m, "block_n": block_n, "lse": False}
    i_causal = flops / flash_attention_bytes(1, 1, 1, n, n, d, causal=True, **kw)
    i_dense = attention_flops(1, 1, n, n, d) / flash_attention_bytes(1, 1, 1, n, n, d, **kw)
    assert 0.95 * i_dense < i_causal < i_dense  # both halved; the diagonal and Q, O are not


def test_window_traffic_is_linear_in_n():
    d, w, block_m, block_n = 64, 1024, 128, 64
    kw = {"block_m": block_m, "block_n": block_n, "causal": True, "window": w}
    f = {n: _kv_bytes(n, d, **kw) for n in (8192, 16384, 32768)}
    assert f[32768] - f[16384] == 2 * (f[16384] - f[8192])  # affine once N >> W
    n = 32768
    max_tiles = -(-(w + block_m - 1) // block_n) + 1  # per query tile, whatever N
    assert f[n] <= (n // block_m) * max_tiles * block_n * 2 * d * 2
    assert f[n] < _kv_bytes(n, d, block_m=block_m, block_n=block_n, causal=True) / 10


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_changes_the_floor_not_the_no_reuse_count(causal):
    hq, nq, nk, d = 32, 100, 4096, 128
    kw = {"block_m": 128, "block_n": 64, "causal": causal, "lse": False}
    counts = {hkv: flash_attention_bytes(1, hq, hkv, nq, nk, d, **kw) for hkv in (32, 8, 1)}
    assert counts[32] == counts[8] == counts[1]
    for hkv in (8, 1):  # one query tile per head: the excess is the (g - 1) re-reads per group
        floor = attention_min_bytes(1, hq, hkv, nq, nk, d)
        assert counts[hkv] - floor == 2 * (hq - hkv) * 2 * nk * d
# ~/~ end


# ~/~ begin <<docs/theory/02-flash-attention.md#flash-bytes-check-errors>>[init]
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_m": 0}, r"block_m must be an int >= 1, got 0"),
        ({"block_m": True}, r"block_m must be an int >= 1, got True"),
        ({"block_m": 64, "block_n": 0, "causal": True}, r"block_n must be an int >= 1, got 0"),
        ({"block_m": 64, "causal": True}, r"causal=True needs block_n"),
        ({"block_m": 64, "window": 4}, r"window=4 needs causal=True"),
        ({"block_m": 64, "block_n": 64, "causal": True, "window": 0}, r"window must be >= 1"),
        ({"block_m": 64, "lse": 1}, r"lse must be a bool, got 1"),
        ({"block_m": 64, "elem_bytes": 0}, r"elem_bytes must be an int >= 1"),
    ],
)
def test_bad_input_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        flash_attention_bytes(1, 4, 2, 16, 16, 64, **kwargs)


@pytest.mark.parametrize(
    ("args", "match"),
    [((1, 3, 2, 16, 16, 64), r"Hq=3 must be a multiple of kv heads Hkv=2"),
     ((1, 4, 2, 0, 16, 64), r"nq must be an int >= 1, got 0"),
     ((1, 4, 2, 16, 16, 64.0), r"d must be an int >= 1, got 64.0")],
)
def test_bad_shape_raises(args, match):
    with pytest.raises(ValueError, match=match):
        flash_attention_bytes(*args, block_m=64)
# ~/~ end
# ~/~ end

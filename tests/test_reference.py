# ~/~ begin <<docs/foundations.md#tests/test_reference.py>>[init]
"""Checks of the reference attention (tangled from docs/foundations.md)."""

import math

import pytest
import torch
import torch.nn.functional as F

from minimodel.reference import attention_ref, visible_mask


# ~/~ begin <<docs/foundations.md#reference-check-sdpa>>[init]
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 8), (2, 3, 17, 16), (1, 4, 64, 64), (2, 2, 97, 48)])
def test_matches_sdpa_where_semantics_agree(shape, causal):
    b, h, n, d = shape
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(attention_ref(q, k, v, causal=causal), expected)


def test_gqa_matches_sdpa_enable_gqa():
    q = torch.randn(2, 8, 33, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 33, 16, dtype=torch.float64) for _ in range(2))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(attention_ref(q, k, v, causal=True), expected)


def test_custom_scale_matches_sdpa():
    q, k, v = (torch.randn(1, 2, 9, 8, dtype=torch.float64) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(attention_ref(q, k, v, scale=0.3), expected)
# ~/~ end


# ~/~ begin <<docs/foundations.md#reference-check-by-hand>>[init]
def _values(nk):
    """v[j] = j in every coordinate, so an output equal to c means 'mean of visible j is c'."""
    return torch.arange(nk, dtype=torch.float64).view(1, 1, nk, 1).expand(1, 1, nk, 2)


def test_bottom_right_causal_by_hand():
    # Nq=2, Nk=4: query 0 stands at key 2 (sees 0, 1, 2), query 1 at key 3 (sees all four).
    q = torch.zeros(1, 1, 2, 2, dtype=torch.float64)
    k = torch.randn(1, 1, 4, 2, dtype=torch.float64)
    out = attention_ref(q, k, _values(4), causal=True)
    torch.testing.assert_close(out[0, 0, :, 0], torch.tensor([1.0, 1.5], dtype=torch.float64))


def test_decode_step_sees_every_key():
    q = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 10, 8, dtype=torch.float64) for _ in range(2))
    torch.testing.assert_close(attention_ref(q, k, v, causal=True), attention_ref(q, k, v))


def test_window_by_hand():
    # Nq=Nk=5, W=2: query i sees keys i-1 and i (query 0 only itself).
    q = torch.zeros(1, 1, 5, 2, dtype=torch.float64)
    k = torch.randn(1, 1, 5, 2, dtype=torch.float64)
    out = attention_ref(q, k, _values(5), causal=True, window=2)
    expected = torch.tensor([0.0, 0.5, 1.5, 2.5, 3.5], dtype=torch.float64)
    torch.testing.assert_close(out[0, 0, :, 0], expected)


def test_window_of_one_returns_own_value():
    q, k, v = (torch.randn(2, 2, 7, 4, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(attention_ref(q, k, v, causal=True, window=1), v)


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    # Nq=4 > Nk=2: query i stands at key i-2, so queries 0 and 1 see nothing.
    q = torch.randn(1, 3, 4, 8)
    k, v = (torch.randn(1, 3, 2, 8) for _ in range(2))
    out, lse = attention_ref(q, k, v, causal=True, return_lse=True)
    assert not out.isnan().any()
    assert (out[:, :, :2] == 0).all()
    assert (lse[:, :, :2] == float("-inf")).all()
    assert lse[:, :, 2:].isfinite().all()


def test_gqa_head_mapping_by_hand():
    # Hq=4, Hkv=2: heads 0,1 read kv head 0 and heads 2,3 read kv head 1.
    q = torch.zeros(1, 4, 1, 2, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 2, dtype=torch.float64)
    v = torch.stack([torch.full((3, 2), 10.0), torch.full((3, 2), 20.0)])[None].double()
    out = attention_ref(q, k, v)
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([10.0, 10.0, 20.0, 20.0]).double())


def test_lse_by_hand():
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    v = torch.randn(1, 1, 2, 2, dtype=torch.float64)
    _, lse = attention_ref(q, k, v, scale=1.0, return_lse=True)
    torch.testing.assert_close(lse[0, 0, 0], torch.tensor(math.log(math.e + 1.0)).double())


def test_nan_and_overflow_propagate_instead_of_vanishing():
    q, k, v = (torch.randn(1, 1, 4, 8) for _ in range(3))
    q[0, 0, 1, 0] = float("nan")
    out = attention_ref(q, k, v)
    assert out[0, 0, 1].isnan().all() and not out[0, 0, [0, 2, 3]].isnan().any()
    k[0, 0, 0] = q[0, 0, 0]  # q.k_0 = |q|^2 > 0: its score overflows to +inf, whatever the draw
    assert attention_ref(q[:, :, :1], k, v, scale=1e39).isnan().all()  # float32 scores overflow


def test_computes_in_float32_for_half_inputs():
    q, k, v = (torch.randn(1, 1, 4, 8, dtype=torch.float16) for _ in range(3))
    assert attention_ref(q, k, v).dtype == torch.float32
# ~/~ end


# ~/~ begin <<docs/foundations.md#reference-check-errors>>[init]
def _qkv(q_shape=(1, 2, 4, 8), kv_shape=(1, 2, 4, 8)):
    return torch.randn(q_shape), torch.randn(kv_shape), torch.randn(kv_shape)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((torch.randn(2, 4, 8), *_qkv()[1:]), {}, r"q must have rank 4.*\(2, 4, 8\)"),
        (_qkv(kv_shape=(2, 2, 4, 8)), {}, r"batch mismatch.*B=1.*B=2"),
        (_qkv(kv_shape=(1, 2, 4, 16)), {}, r"head_dim mismatch.*d=8.*d=16"),
        (_qkv(q_shape=(1, 3, 4, 8)), {}, r"Hq=3 must be a multiple of kv heads Hkv=2"),
        (_qkv(), {"window": 3}, r"window=3 needs causal=True"),
        (_qkv(), {"causal": True, "window": 0}, r"window must be >= 1.*got 0"),
        (_qkv(), {"causal": True, "window": 2.5}, r"window must be an int"),
        (_qkv(), {"scale": float("nan")}, r"scale must be finite and positive, got nan"),
        (_qkv(), {"scale": -0.5}, r"scale must be finite and positive, got -0.5"),
        (_qkv(), {"scale": 0.0}, r"scale must be finite and positive, got 0.0"),
        (_qkv(), {"causal": 1}, r"causal must be a bool, got 1"),
        ((torch.ones(1, 2, 4, 8, dtype=torch.int32), *_qkv()[1:]), {},
         r"q must be a floating-point tensor, got dtype torch.int32"),
        (_qkv(q_shape=(1, 2, 0, 8)), {}, r"q must not be empty"),
    ],
)
def test_bad_input_raises_with_the_offending_value(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_ref(*args, **kwargs)


@pytest.mark.parametrize(("nq", "nk"), [(0, 4), (4, 0)])
def test_visible_mask_refuses_empty_lengths(nq, nk):
    with pytest.raises(ValueError, match=rf"nq and nk must be >= 1, got nq={nq}, nk={nk}"):
        visible_mask(nq, nk, causal=True)


def test_mixed_dtypes_raise():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"share one dtype.*float16"):
        attention_ref(q, k.half(), v)


def test_k_v_shape_mismatch_raises():
    q, k, _ = _qkv()
    with pytest.raises(ValueError, match=r"k and v must have the same shape"):
        attention_ref(q, k, torch.randn(1, 2, 5, 8))
# ~/~ end
# ~/~ end

# ~/~ begin <<docs/lab/03b-paged-kernels.md#tests/test_paged_attention_solution.py>>[init]
"""Checks of this page's solution itself, beyond the task's interface: the split choice, the
tiles, the rows each kernel writes, other tile shapes, the interpreter switch, and the public
entry point minimodel.attention (tangled from docs/lab/03b-paged-kernels.md; not run by
`make check-mine`)."""

import copy

import pytest
import torch
import triton
from test_attention_flash import make_qkv
from test_paged_attention import (
    DEVICE,
    check_decode,
    check_prefill,
    check_row,
    make_cache,
    make_q,
)

from minimodel import attention as attention_module
from minimodel import paged_attention as pa  # its internals are looked up when a test runs:
from minimodel.attention import KernelPagedKVCache, attention  # a learner's module has none
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.paged_attention import paged_decode

# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-split>>[init]
H200_SMS = 132


@pytest.mark.parametrize(("batch", "hkv", "context"), [
    (1, 8, 131072), (1, 8, 32768), (64, 8, 4096), (256, 8, 512), (64, 1, 4096), (64, 32, 4096),
    (1, 8, 100), (3, 2, 10**7), (1, 1, 64),
])
def test_split_fills_the_gpu_without_short_splits(batch, hkv, context):
    block_n = 64
    splits = pa.choose_num_splits(batch, hkv, context, block_n, H200_SMS)
    tiles = triton.cdiv(context, block_n)
    assert 1 <= splits <= pa.MAX_SPLITS
    target = pa.PROGRAMS_PER_SM * H200_SMS
    if batch * hkv >= target:  # the batch alone fills the GPU: no split, no merge
        assert splits == 1
    else:  # enough programs, unless the context is too short (or the cap is reached)
        short = max(1, tiles // pa.MIN_TILES_PER_SPLIT)
        assert batch * hkv * splits >= target or splits in (short, pa.MAX_SPLITS)
    assert splits == 1 or tiles // splits >= pa.MIN_TILES_PER_SPLIT


def test_the_issue_shapes_split_as_intended():
    # B=1 at 128k splits into hundreds of programs; B=256 at 512 does not split at all
    target = pa.PROGRAMS_PER_SM * H200_SMS
    assert pa.choose_num_splits(1, 8, 131072, 64, H200_SMS) * 8 >= target
    assert pa.choose_num_splits(256, 8, 512, 64, H200_SMS) == 1


def test_the_cpu_tests_split_by_default():
    # Under the interpreter the split is chosen as for a 4-SM GPU, so the default path splits
    # the small contexts of the CPU tests too (and the merge runs).
    if pa.INTERPRET:
        assert pa._num_sms(torch.device("cpu")) == 4
    assert pa.choose_num_splits(5, 2, 130, 16, 4) > 1  # test_decode_windows' batch


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("elem", [2, 4])
def test_decode_tiles_are_16_kib_powers_of_two(monkeypatch, head_dim, elem):
    monkeypatch.setattr(pa, "INTERPRET", False)
    cfg = pa.decode_config(head_dim, elem)
    assert cfg.block_n in (16, 32, 64, 128)
    assert cfg.block_n * head_dim * elem <= pa.DECODE_TILE_BYTES or cfg.block_n == 16
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-rows>>[init]
def test_a_short_max_context_len_costs_speed_not_correctness():
    # The last split runs to the end of each context whatever max_context_len said.
    lens = [90, 41]
    check_decode(make_q(2, 4, 32), make_cache(lens, 2, 32, 16), lens, max_context_len=1,
                 num_splits=3)


@pytest.mark.parametrize(("num_splits", "window"), [(1, None), (3, None), (5, 20)])
def test_the_kernels_write_only_their_own_rows(num_splits, window):
    # Outputs and the split workspace as views into NaN-filled buffers with gaps around every
    # row: a store that strays (a padded query head, a column past d, a split) shows as a
    # non-NaN gap, a row not written as a NaN inside.
    lens, hq, hkv, d = [7, 50, 33], 6, 2, 48
    k, v, k_pool, v_pool, table, lens_t = make_cache(lens, hkv, d, 16)
    q = make_q(3, hq, d)
    nan = float("nan")
    o_buf = torch.full((3, hq + 2, d + 8), nan, device=DEVICE)
    lse_buf = torch.full((3, hq + 2), nan, device=DEVICE)
    w_buf = torch.full((3, hq + 1, num_splits + 1, d + 8), nan, device=DEVICE)
    wl_buf = torch.full((3, hq + 1, num_splits + 1), nan, device=DEVICE)
    out = (o_buf[:, 1 : hq + 1, 4 : d + 4], lse_buf[:, 1 : hq + 1])
    workspace = (w_buf[:, :hq, :num_splits, :d], wl_buf[:, :hq, :num_splits])
    pa._decode(
        q, k_pool, v_pool, table, lens_t, paged=True, n_k=0, strides_k=k_pool.stride(),
        strides_v=v_pool.stride(), block_size=16, n_kv_heads=hkv, max_context_len=max(lens),
        num_splits=num_splits, window=window, tau=d**-0.5, out=out, workspace=workspace)
    assert not out[0].isnan().any() and not out[1].isnan().any()
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


def test_the_prefill_writes_only_its_own_rows():
    # Sequences packed back to back: a stray store past a sequence's last row lands in the next
    # sequence's rows (written earlier by the interpreter's order of programs) and shows.
    check_prefill([40, 17, 64], [23, 17, 9], 2, 2, 32, 16, window=30)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#paged-check-solution-tiles>>[init]
# Tiles other than the interpreter's default: each bound falls elsewhere.
@pytest.mark.skipif(not pa.INTERPRET, reason="the GPU runs its own tiles")
@pytest.mark.parametrize("block_n", [32, 64])
@pytest.mark.parametrize("block_size", [8, 32, 128])
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
    monkeypatch.setattr(attention_module, "flash_attention",
                        lambda *a, **kw: calls.append(kw) or "flash")
    q, k, v = make_qkv(1, 2, 2, 3, 10, 32)
    assert attention(q, k, v, causal=True, window=2) == "flash"
    assert calls == [{"causal": True, "window": 2, "scale": None, "return_lse": False}]


@pytest.mark.parametrize(("make", "kwargs", "match"), [
    (lambda: make_qkv(1, 3, 2, 1, 8, 32), {}, r"Hq=3 must be a multiple of kv heads Hkv=2"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 32), {"window": 4}, r"window=4 needs causal=True"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 20), {}, r"head_dim must be a multiple of 8 .* d=20"),
    (lambda: make_qkv(1, 2, 2, 1, 8, 32, dtype=torch.float64), {}, r"torch.float64"),
])
def test_attention_refuses_what_flash_refuses(make, kwargs, match):
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
# ~/~ end

# ~/~ begin <<docs/lab/03b-paged-kernels.md#src/minimodel/attention.py>>[init]
"""minimodel's public attention entry point: one call on contiguous tensors that picks the kernel
(one query token: the decode kernel reading the cache in place; more: Lab 02's Flash kernels),
registered as the custom op torch.ops.minimodel.attention so that torch.compile keeps a model
that calls it in one graph; the paged calls, and a paged KV cache for MiniGPT that attends
through them.

Tangled from docs/lab/03b-paged-kernels.md; edit the page, not this file.
"""

from collections.abc import Sequence

import torch

from minimodel import paged_attention
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import MAX_HEAD_DIM as HOPPER_MAX_HEAD_DIM
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.kernels import INTERPRET, SUPPORTED_DTYPES, capability, check_forward_only
from minimodel.minigpt import AttentionFn, MiniGPTConfig
from minimodel.paged_attention import (
    FP8_DTYPE,
    dequantize_kv,
    paged_decode,
    paged_prefill,
    quantize_kv,
)
from minimodel.paged_kv_cache import PagedKVCache
from minimodel.reference import (
    attention_ref,
    check_attention_inputs,
    check_mask_args,
    resolve_scale,
)

__all__ = ["KernelPagedKVCache", "attention", "attention_op", "paged_decode", "paged_prefill"]


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-checks>>[init]
MAX_HEAD_DIM = 256


def _check_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                window: int | None, scale: float | None) -> None:
    """Every refusal that shapes, dtypes and arguments decide (no data is read): run by
    `attention`, by the op and by its fake implementation, so that a wrong call fails with the
    same message eagerly and while torch.compile traces it."""
    d = check_attention_inputs(q, k, v)[-1]
    check_mask_args(causal, window)
    resolve_scale(scale, d)  # a scale that is not a finite positive number is refused
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported: use float16, bfloat16 or float32")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [1, {MAX_HEAD_DIM}], got d={d} "
                         f"(q {tuple(q.shape)})")
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-dispatch>>[init]
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             window: int | None, scale: float | None,
             with_lse: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The kernel for one call, chosen here and nowhere else; (O, lse) for checked inputs.
    with_lse=False: a decode step computes no lse and gives None (a prefill computes it anyway)."""
    if q.shape[2] == 1:
        return _forward_decode(q, k, v, window, resolve_scale(scale, q.shape[-1]), with_lse)
    if _hopper_takes(q, causal):  # Lab 02 part 2's schedule where it runs and is faster
        return flash_attention_hopper(q, k, v, causal=causal, window=window, scale=scale,
                                      return_lse=True)
    return flash_attention(q, k, v, causal=causal, window=window, scale=scale, return_lse=True)


# Short causal prefill at small head dims goes to Lab 02's kernel: under graph replay it beat the
# Hopper kernel there (N = 512, d = 64, causal: data/flash-hopper-ablation-d64-h200.json, and
# data/prefill-grid-h200.json in fp16 and bf16), and the Hopper kernel was ahead at every other
# point measured
SHORT_CAUSAL = (512, 64)  # (Nq, d) at or below which a causal call runs Lab 02's kernel


def _hopper_takes(q: torch.Tensor, causal: bool) -> bool:
    """Whether flash_attention_hopper runs this call: a Hopper GPU (compute capability 9.x, not
    the interpreter), float16 or bfloat16, head_dim <= 128, and not a short causal call at a
    small head dim (SHORT_CAUSAL)."""
    if causal and q.shape[2] <= SHORT_CAUSAL[0] and q.shape[-1] <= SHORT_CAUSAL[1]:
        return False
    return (not INTERPRET and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and q.shape[-1] <= HOPPER_MAX_HEAD_DIM
            and capability(q.device)[0] == 9)


def _forward_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None,
                    tau: float, with_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One query row per (sequence, head): the decode kernel on the cache (B, Hkv, Nk, d) in
    place. A head dim the kernel does not take (it takes multiples of 8 in [16, 256]) is
    zero-padded up to one, which copies q, k and v."""
    d = q.shape[-1]
    width = max(16, -(-d // 8) * 8)  # the next head dim the kernel takes
    if width != d:  # a zero column adds nothing to q.k; its output column is zero, dropped
        q, k, v = (torch.nn.functional.pad(t, (0, width - d)) for t in (q, k, v))
    # One query at key position nk - 1 sees every key with or without `causal`; a window still
    # needs causal=True (checked by _check_call), as in the reference. q stays (B, Hq, 1, d) and
    # O comes back so: no view on the host path of a decode step.
    o, lse = paged_attention.decode_contiguous(q, k, v, window=window, tau=tau,
                                               with_lse=with_lse)
    return (o, lse) if width == d else (o[..., :d], lse)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-custom-op>>[init]
@torch.library.custom_op("minimodel::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 window: int | None, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.ops.minimodel.attention: `attention` as one operator, which torch.compile records
    whole. Always returns (O (B, Hq, Nq, d), lse (B, Hq, Nq) float32), both contiguous. No
    autograd formula: call it through `attention`, which refuses inputs that require grad."""
    _check_call(q, k, v, causal, window, scale)
    o, lse = _forward(q, k, v, causal, window, scale)
    return o.contiguous(), lse.contiguous()  # the layout the fake implementation promises


@attention_op.register_fake
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    window: int | None,
                    scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """What the op returns, without running it: the shapes torch.compile traces with."""
    _check_call(q, k, v, causal, window, scale)
    b, hq, nq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, hq, nq), dtype=torch.float32)
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-entry-point>>[init]
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention as `attention_ref` specifies it, on contiguous (or strided) tensors.

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d), Hq % Hkv == 0; float16 / bfloat16 / float32 (no
    bfloat16 under the interpreter); any d from 1 to 256. Nq == 1 (a decode step) runs the
    paged decode kernel on the cache in place, split across programs when the batch is small
    (a d that is not a multiple of 8 in [16, 256] is zero-padded, which copies the cache);
    Nq > 1 runs Lab 02 part 2's Hopper kernel where it applies (float16 / bfloat16 on a Hopper
    GPU, d <= 128, not a short causal call at d <= 64: SHORT_CAUSAL), else Lab 02's
    `flash_attention`. causal aligns bottom-right; window=W (causal only) keeps the W latest keys.

    Returns O: (B, Hq, Nq, d) in q's dtype and, with return_lse, the natural-log log-sum-exp
    (B, Hq, Nq) in float32. Forward only: inputs that require grad are refused (call it under
    torch.no_grad()). Under torch.compile it calls the custom op torch.ops.minimodel.attention,
    so a model that uses it compiles with torch.compile(fullgraph=True); eagerly it runs the
    same checks and kernels without the op's dispatch.
    """
    _check_call(q, k, v, causal, window, scale)
    check_forward_only("minimodel.attention", q, k, v, why="its kernels have no backward pass")
    # The op's schema types window as an int64 (and would turn a bool into an int): the bool is
    # refused above, and a window past any key count, which changes nothing, is cut to 2^62 (a
    # host int, not Nk: under torch.compile Nk may be symbolic; the kernels cut it to Nk).
    window = None if window is None else min(window, 2**62)
    scale = None if scale is None else float(scale)
    if torch.compiler.is_compiling():  # torch.compile records the op as one node
        o, lse = attention_op(q, k, v, causal, window, scale)
    else:  # eagerly the op's dispatch alone costs more host time than a decode step's kernels
        o, lse = _forward(q, k, v, causal, window, scale, with_lse=return_lse)
        o = o.contiguous()  # what the op returns
        lse = lse.contiguous() if return_lse else None
    return (o, lse) if return_lse else o
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-paged-kv-cache>>[init]
class KernelPagedKVCache(PagedKVCache):
    """Lab 03's PagedKVCache, attending through the paged kernels on its pools in place: a chunk
    of new tokens per row through `paged_prefill`, one token per row through `paged_decode`.

    A step is split as a serving engine splits it. Host bookkeeping between steps: `allocate`,
    `append_slot`, then `select(seq_ids)`, which copies the rows' block tables into a device
    buffer kept per batch size (the persistent input a CUDA graph reads at every replay). The
    step itself, `attend` in every layer: device work only, on the pools, that buffer, and the
    positions (a write at the slots they name, then the kernels' fast path, sized by shapes
    alone), so MiniGPT's forward through it compiles in one graph and captures into a CUDA
    graph. After a compiled or captured step the caller runs `commit(positions)`.

    The kernels are the attention: MiniGPT's `attn` argument must be left at its default.
    With kv_dtype=torch.float8_e4m3fn the pools hold K and V in 8 bits, each token and kv head
    quantised once as it is written, its float32 scales in `k_scale` and `v_scale`.
    """

    graph_safe = True  # attend reads no value on the host: MiniGPT.forward may be traced

    def __init__(self, config: MiniGPTConfig, num_blocks: int, block_size: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 watermark: float = 0.01, enable_prefix_caching: bool = False,
                 kv_dtype: torch.dtype | None = None) -> None:
        """As PagedKVCache; block tables get max_blocks = ceil(max_seq_len / block_size)
        columns, enough for any sequence the model can feed. kv_dtype: the pools' dtype, `dtype`
        (the model's) if omitted; torch.float8_e4m3fn adds k_scale and v_scale, (n_layers,
        num_blocks, block_size, Hkv) float32."""
        if kv_dtype not in (None, dtype, FP8_DTYPE):
            raise ValueError(f"kv_dtype must be the model's dtype {dtype} or {FP8_DTYPE}, got "
                             f"{kv_dtype}")
        fp8 = kv_dtype == FP8_DTYPE
        super().__init__(config, num_blocks, block_size, dtype=kv_dtype if fp8 else dtype,
                         device=device, watermark=watermark,
                         enable_prefix_caching=enable_prefix_caching)
        self.dtype = dtype  # the model's: what gather returns
        self.k_scale = self.v_scale = None  # 8-bit pools only: one float32 per slot and kv head
        if fp8:
            self.k_scale, self.v_scale = (_scale_pools(config, num_blocks, block_size, device)
                                          for _ in "kv")
        self.max_blocks = -(-config.max_seq_len // block_size)
        self._buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # B: (tables, flags)
        self._owner: dict[int, KernelPagedKVCache] = {}  # B: the view whose tables they hold
        self._tables: list[list[int]] = []  # this view's tables, as selected
        self.block_tables: torch.Tensor | None = None  # a view's (B, max_blocks) int32
        self.error_flags: torch.Tensor | None = None  # a view's (B,) int32 kernel error bits

    def select(self, seq_ids: Sequence[int]) -> "KernelPagedKVCache":
        """PagedKVCache.select, with the rows' block tables copied into the device buffer for
        len(seq_ids) rows: view.block_tables (B, max_blocks) int32, -1 past each table, and
        view.error_flags (B,) int32 zeroed. Every selection of B rows reuses that buffer, so a
        view serves until the next selection of as many rows; select after the step's
        allocate and append_slot calls. On a GPU the copy is from pinned memory, asynchronous:
        no sync. Raises ValueError as PagedKVCache.select does, and for a table longer than
        max_blocks."""
        view = super().select(seq_ids)
        tables = [self.manager.block_table(seq) for seq in view.rows]
        for seq, table in zip(view.rows, tables, strict=True):
            if len(table) > self.max_blocks:
                raise ValueError(f"sequence {seq} holds {len(table)} blocks, more than the "
                                 f"{self.max_blocks} that max_seq_len={self.config.max_seq_len} "
                                 "allows")
        b = len(tables)
        if b not in self._buffers:
            self._buffers[b] = (
                torch.full((b, self.max_blocks), -1, dtype=torch.int32, device=self.k.device),
                torch.zeros(b, dtype=torch.int32, device=self.k.device))
        view.block_tables, view.error_flags = self._buffers[b]
        host = torch.tensor([t + [-1] * (self.max_blocks - len(t)) for t in tables],
                            dtype=torch.int32)
        if view.block_tables.is_cuda:  # from pageable memory the copy would wait for the GPU
            host = host.pin_memory()
        view.block_tables.copy_(host, non_blocking=True)
        view.error_flags.zero_()
        view._tables = tables
        self._owner[b] = view
        return view

    def check_positions(self, positions: torch.Tensor) -> None:
        """PagedKVCache's checks, and that this view's tables are current: still in the buffer
        (no later selection of as many rows) and still the manager's (no append_slot, fork or
        free since the selection). Reads positions on the host: eager only."""
        super().check_positions(positions)
        if self._owner.get(len(self.rows)) is not self:
            raise ValueError(f"a later select of {len(self.rows)} rows has replaced this view's "
                             "block tables: select again")
        for seq, table in zip(self.rows, self._tables, strict=True):
            if self.manager.block_table(seq) != table:
                raise ValueError(f"sequence {seq}'s block table changed after select: select "
                                 "after the step's allocate and append_slot calls")

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, attn: AttentionFn = attention_ref) -> torch.Tensor:
        """Write k, v: (B, Hkv, n, d) at the slots that positions (B, n) name through the
        view's block tables, then attend q: (B, Hq, n, d) over each row's keys through the
        kernels' fast path; returns (B, Hq, n, d). Reads no value on the host. The positions
        are trusted (MiniGPT.forward checks them eagerly); what the kernels still catch (an
        entry outside the pool, a length past the table) sets the row's error_flags bits."""
        if attn is not attention_ref:
            raise ValueError("KernelPagedKVCache attends with the paged kernels: pass no attn "
                             f"to the model (got {getattr(attn, '__name__', attn)!r})")
        if self.block_tables is None:
            raise ValueError("no sequences selected: pass cache.select(seq_ids) to the model")
        b, n = self.block_tables.shape[0], q.shape[2] if q.dim() == 4 else -1
        c = self.config
        kv = (b, c.n_kv_heads, n, c.head_dim)
        if (q.dim() != 4 or q.shape[0] != b or k.shape != kv or v.shape != kv
                or positions.shape != (b, n)):
            raise ValueError(f"for {b} selected rows q must be (B, Hq, n, d), k and v {kv} "
                             f"and positions {(b, n)}, got q {tuple(q.shape)}, k "
                             f"{tuple(k.shape)}, v {tuple(v.shape)}, positions "
                             f"{tuple(positions.shape)}")
        if any(t.device != self.k.device for t in (q, k, v, positions)):
            raise ValueError(f"the cache is on {self.k.device}: q, k, v and positions must be "
                             f"too, got {q.device}, {k.device}, {v.device} and {positions.device}"
                             " (the model and its inputs on the cache's device)")
        args = (q, k, v, self.k, self.v, layer, positions, self.block_tables, self.error_flags,
                c.window)
        if torch.compiler.is_compiling():  # one node that writes the pools in place
            o = (_paged_cache_attend_op(*args) if self.k_scale is None
                 else _paged_cache_attend_fp8_op(*args, self.k_scale, self.v_scale))
        else:
            if self._owner.get(b) is not self:  # host objects: no sync (not traced: a guard)
                raise ValueError(f"a later select of {b} rows has replaced this view's block "
                                 "tables: select again")
            o = _paged_cache_attend(*args, self.k_scale, self.v_scale)
        return o.transpose(1, 2)

    def commit(self, positions: torch.Tensor) -> None:
        """Each selected sequence has computed n = positions.shape[1] more tokens
        (`manager.mark_computed`): host bookkeeping from the manager's counts and the shape,
        no value of positions read. An eager MiniGPT pass calls it; after a compiled or
        captured step the caller does, once."""
        n = positions.shape[1]
        for seq in self.rows:
            self.manager.mark_computed(seq, self.manager.num_computed_tokens(seq) + n)

    # ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-paged-kv-cache-fp8>>[init]
    def append_slot(self, seq_id: int, token: int) -> None:
        """PagedKVCache.append_slot; with 8-bit pools a copy-on-write copies the block's scales too
        (the one table entry the copy replaced)."""
        before = self.manager.block_table(seq_id) if self.k_scale is not None else None
        super().append_slot(seq_id, token)
        if before is None:
            return
        # the table may have grown by a block; an entry that changed from one block to another is
        # the copy (an entry the window released became -1)
        for src, dst in zip(before, self.manager.block_table(seq_id), strict=False):
            if src != dst and src >= 0 and dst >= 0:
                self.k_scale[:, dst] = self.k_scale[:, src]
                self.v_scale[:, dst] = self.v_scale[:, src]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """PagedKVCache.write; 8-bit pools store each token and kv head quantised, its scale
        beside."""
        if self.k_scale is None:
            return super().write(layer, k, v, positions)
        for r, seq in enumerate(self.rows):
            slots = torch.tensor(self.manager.slot_mapping(seq, positions[r].tolist()),
                                 device=self.k.device)
            _store_fp8(self.k[layer], self.k_scale[layer], slots, k[r].transpose(0, 1))
            _store_fp8(self.v[layer], self.v_scale[layer], slots, v[r].transpose(0, 1))

    def gather(self, layer: int, seq: int, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """PagedKVCache.gather; 8-bit pools give the values they stand for (dequantize_kv), in the
        model's dtype."""
        k, v = super().gather(layer, seq, lo, hi)
        if self.k_scale is None:
            return k, v
        index = torch.tensor(self.manager.slot_mapping(seq, range(lo, hi)), device=self.k.device)
        return tuple(dequantize_kv(x8, s[layer].flatten(0, 1)[index].transpose(0, 1)[None],
                                   self.dtype) for x8, s in ((k, self.k_scale), (v, self.v_scale)))
    # ~/~ end


def _paged_cache_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                        v_cache: torch.Tensor, layer: int, positions: torch.Tensor,
                        block_tables: torch.Tensor, error_flags: torch.Tensor,
                        window: int | None, k_scale_cache: torch.Tensor | None = None,
                        v_scale_cache: torch.Tensor | None = None) -> torch.Tensor:
    """One layer of a KernelPagedKVCache step, device work only: store k, v at their slots
    (block_tables[b, p // block_size] * block_size + p % block_size), then paged_decode (n = 1)
    or paged_prefill on the fast path, its host ints from shapes: the context bound is the
    table's capacity, the chunk length n. With 8-bit pools, k_scale_cache and v_scale_cache
    (L, num_blocks, block_size, Hkv) receive each new token's scales. Returns (B, n, Hq, d)."""
    b, hq, n, d = q.shape
    k_pool, v_pool = k_cache[layer], v_cache[layer]  # (num_blocks, block_size, Hkv, d)
    block_size = k_pool.shape[1]
    blocks = block_tables.gather(1, positions // block_size).long()
    slots = (blocks * block_size + positions % block_size).flatten()  # (B * n,)
    fp8 = {} if k_scale_cache is None else {"k_scale": k_scale_cache[layer],
                                             "v_scale": v_scale_cache[layer]}
    for i, (pool, new) in enumerate(((k_pool, k), (v_pool, v))):
        new = new.transpose(1, 2).flatten(0, 1)  # the rows' keys, token-major: (B * n, Hkv, d)
        if fp8:
            _store_fp8(pool, fp8["kv"[i] + "_scale"], slots, new)
        else:
            pool.flatten(0, 1).index_copy_(0, slots, new.to(pool.dtype))
    lens = (positions[:, -1] + 1).to(torch.int32)  # each row's context, its new keys included
    capacity = block_tables.shape[1] * block_size  # >= every length: no max() read on the host
    if n == 1:
        o = paged_decode(q[:, :, 0], k_pool, v_pool, block_tables, lens,
                         max_context_len=capacity, window=window, error_flags=error_flags, **fp8)
        return o.view(b, 1, hq, d)
    starts = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device=q.device)
    o = paged_prefill(q.transpose(1, 2).reshape(b * n, hq, d), k_pool, v_pool, block_tables,
                      lens, starts, max_query_len=n, window=window, error_flags=error_flags,
                      **fp8)
    return o.view(b, n, hq, d)


# Two operators, not one with optional scales: an optional tensor among the mutated arguments,
# passed as None, fails torch 2.11's fake-tensor run of the op (seen on the H200).
@torch.library.custom_op("minimodel::paged_cache_attend",
                         mutates_args=("k_cache", "v_cache", "error_flags"))
def _paged_cache_attend_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           k_cache: torch.Tensor, v_cache: torch.Tensor, layer: int,
                           positions: torch.Tensor, block_tables: torch.Tensor,
                           error_flags: torch.Tensor, window: int | None) -> torch.Tensor:
    """torch.ops.minimodel.paged_cache_attend: one layer of a KernelPagedKVCache step as one
    operator that writes the pools (all layers', (L, num_blocks, block_size, Hkv, d)) and ORs
    the error flags in place, so torch.compile records it whole. Returns (B, n, Hq, d)."""
    return _paged_cache_attend(q, k, v, k_cache, v_cache, layer, positions, block_tables,
                               error_flags, window)


@torch.library.custom_op("minimodel::paged_cache_attend_fp8",
                         mutates_args=("k_cache", "v_cache", "error_flags", "k_scale_cache",
                                       "v_scale_cache"))
def _paged_cache_attend_fp8_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               k_cache: torch.Tensor, v_cache: torch.Tensor, layer: int,
                               positions: torch.Tensor, block_tables: torch.Tensor,
                               error_flags: torch.Tensor, window: int | None,
                               k_scale_cache: torch.Tensor,
                               v_scale_cache: torch.Tensor) -> torch.Tensor:
    """torch.ops.minimodel.paged_cache_attend_fp8: paged_cache_attend on 8-bit pools, which
    also writes the new tokens' scales."""
    return _paged_cache_attend(q, k, v, k_cache, v_cache, layer, positions, block_tables,
                               error_flags, window, k_scale_cache, v_scale_cache)


@_paged_cache_attend_op.register_fake
def _paged_cache_attend_fake(q, k, v, k_cache, v_cache, layer, positions, block_tables,
                             error_flags, window):
    b, hq, n, d = q.shape
    return q.new_empty((b, n, hq, d))


@_paged_cache_attend_fp8_op.register_fake
def _paged_cache_attend_fp8_fake(q, k, v, k_cache, v_cache, layer, positions, block_tables,
                                 error_flags, window, k_scale_cache, v_scale_cache):
    b, hq, n, d = q.shape
    return q.new_empty((b, n, hq, d))
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-paged-kv-cache-fp8-store>>[init]
def _scale_pools(config: MiniGPTConfig, num_blocks: int, block_size: int,
                 device: torch.device | str | None) -> torch.Tensor:
    """One float32 scale per slot and kv head of every layer's pool: (L, num_blocks, block_size,
    Hkv), stored head-major in each block so that a tile's scales of one kv head are
    contiguous; ones until a token's own are written (a slot is never read before)."""
    shape = (config.n_layers, num_blocks, config.n_kv_heads, block_size)
    return torch.ones(shape, dtype=torch.float32, device=device).transpose(2, 3)


def _store_fp8(pool: torch.Tensor, scale: torch.Tensor, slots: torch.Tensor,
               new: torch.Tensor) -> None:
    """Quantise new (n, Hkv, d) per token and kv head and store it at the flat slots (n,) of
    pool (num_blocks, block_size, Hkv, d) float8_e4m3fn, its scales (n, Hkv) at the same slots
    of scale (num_blocks, block_size, Hkv), in place."""
    x8, s = quantize_kv(new)
    # index_copy_ has no float8 kernel on the CPU: the same bytes, copied as uint8
    pool.flatten(0, 1).view(torch.uint8).index_copy_(0, slots, x8.view(torch.uint8))
    block_size = pool.shape[1]
    scale[slots // block_size, slots % block_size] = s  # a strided view: indexed in place
# ~/~ end
# ~/~ end

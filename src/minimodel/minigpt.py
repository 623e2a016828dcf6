# ~/~ begin <<docs/foundations.md#src/minimodel/minigpt.py>>[init]
"""MiniGPT: the small decoder whose attention this phase replaces, the cache interface it
decodes through, and the contiguous KV cache.

Tangled from docs/foundations.md; edit the page, not this file.
"""

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from minimodel.checks import check_int
from minimodel.reference import attention_ref

__all__ = ["AttentionFn", "Block", "Cache", "CausalSelfAttention", "KVCache", "MiniGPT",
           "MiniGPTConfig"]

# ~/~ begin <<docs/foundations.md#minigpt-config>>[init]
@dataclass(frozen=True)
class MiniGPTConfig:
    """Every size of the model in one place."""

    vocab_size: int
    max_seq_len: int = 128
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int = 4
    n_layers: int = 2
    mlp_ratio: int = 4
    window: int | None = None  # W: each query sees its W most recent keys, itself included

    def __post_init__(self):
        for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_kv_heads", "n_layers",
                     "mlp_ratio"):
            check_int(f"MiniGPTConfig.{name}", getattr(self, name), 1)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.window is not None:
            check_int("MiniGPTConfig.window", self.window, 1)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-cache-interface>>[init]
AttentionFn = Callable[..., torch.Tensor]


class Cache(Protocol):
    """What MiniGPT asks of a KV cache. Row r of a forward pass feeds sequence `rows[r]`."""

    config: MiniGPTConfig  # the model's config: sizes, and the window W
    rows: tuple[int, ...]  # which sequences the next forward pass feeds, one per row of tokens

    def check_positions(self, positions: torch.Tensor) -> None:
        """Raise ValueError unless positions (B, n) are the next n of each row's sequence."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, attn: AttentionFn) -> torch.Tensor:
        """Store the new k, v: (B, Hkv, n, d) of `layer` at `positions`; return, for
        q: (B, Hq, n, d), `attn` over each row's keys so far (causal, the config's window):
        (B, Hq, n, d)."""

    def commit(self, positions: torch.Tensor) -> None:
        """Every layer has stored these positions: each row's sequence now holds them."""

    # Optional: a class attribute `graph_safe = True` says that attend reads no tensor value on
    # the host and runs no host bookkeeping, so a forward pass through the cache can run under
    # torch.compile or CUDA-graph capture (MiniGPT.forward refuses any other cache there).
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-kv-cache>>[init]
class KVCache:
    """Contiguous cache: per-layer K and V buffers (B, Hkv, max_seq_len, d); row b holds one
    sequence, filled left to right, with its own length."""

    def __init__(self, config: MiniGPTConfig, batch: int, *, dtype=torch.float32, device=None):
        check_int("batch", batch, 1)
        self.config = config
        shape = (config.n_layers, batch, config.n_kv_heads, config.max_seq_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = [0] * batch  # tokens stored in each row (shared by every selection)
        self.rows = tuple(range(batch))

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def select(self, rows: Sequence[int]) -> "KVCache":
        """The same cache (buffers and lengths shared), feeding only `rows` in the next pass."""
        rows = tuple(rows)
        batch = len(self.lengths)
        for r in rows:
            check_int(f"each of rows {rows}", r, 0, batch - 1)
        if not rows or len(set(rows)) != len(rows):
            raise ValueError(f"rows must be distinct ints in [0, {batch}), got {rows}")
        view = copy.copy(self)
        view.rows = rows
        return view

    def check_positions(self, positions: torch.Tensor) -> None:
        if positions.shape[0] != len(self.rows):
            raise ValueError(f"{positions.shape[0]} rows of tokens for {len(self.rows)} cache "
                             f"rows {self.rows}")
        for row, first, last in zip(self.rows, positions[:, 0].tolist(),
                                    positions[:, -1].tolist(), strict=True):
            if first != self.lengths[row]:
                raise ValueError(f"cache row {row} holds {self.lengths[row]} tokens: its next "
                                 f"position is {self.lengths[row]}, got {first}")
            if last >= self.capacity:
                raise ValueError(f"KV cache overflow: row {row} would hold {last + 1} tokens > "
                                 f"max_seq_len={self.capacity}")

    def attend(self, layer, q, k, v, positions, attn: AttentionFn = attention_ref):
        n, w = q.shape[2], self.config.window
        expected = (len(self.rows), self.k.shape[2], n, self.k.shape[4])
        if k.shape != expected or v.shape != k.shape:
            raise ValueError(f"k, v must have shape (B, Hkv, n, d) = {expected}, "
                             f"got {tuple(k.shape)} and {tuple(v.shape)}")
        starts = positions[:, 0].tolist()
        for r, (row, s) in enumerate(zip(self.rows, starts, strict=True)):
            self.k[layer, row, :, s : s + n] = k[r]
            self.v[layer, row, :, s : s + n] = v[r]
        out = []
        for r, (row, s) in enumerate(zip(self.rows, starts, strict=True)):
            lo = 0 if w is None else max(0, s - w + 1)  # older keys: out of every query's view
            k_row = self.k[layer, row : row + 1, :, lo : s + n]
            v_row = self.v[layer, row : row + 1, :, lo : s + n]
            out.append(attn(q[r : r + 1], k_row, v_row, causal=True, window=w))
        return torch.cat(out)

    def commit(self, positions: torch.Tensor) -> None:
        for row, last in zip(self.rows, positions[:, -1].tolist(), strict=True):
            self.lengths[row] = last + 1

    def nbytes(self, tokens: int | None = None) -> int:
        """Bytes that `tokens` tokens in every row occupy (default: the tokens stored now)."""
        if tokens is not None:
            check_int("tokens", tokens, 0)
        stored = sum(self.lengths) if tokens is None else tokens * len(self.lengths)
        per_token = 2 * self.k.shape[0] * self.k.shape[2] * self.k.shape[4]  # 2 L Hkv d
        return per_token * stored * self.k.element_size()
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-attention>>[init]
class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention, through a KV cache or not."""

    def __init__(self, config: MiniGPTConfig, layer: int):
        super().__init__()
        self.config, self.layer = config, layer
        d, h, hkv = config.head_dim, config.n_heads, config.n_kv_heads
        self.wq = nn.Linear(config.d_model, h * d, bias=False)
        self.wkv = nn.Linear(config.d_model, 2 * hkv * d, bias=False)
        self.wo = nn.Linear(h * d, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Cache | None = None,
                attn: AttentionFn = attention_ref) -> torch.Tensor:
        """x: (B, n, d_model) new tokens at `positions` (B, n) -> (B, n, d_model)."""
        b, n, _ = x.shape
        c = self.config
        q = self.wq(x).view(b, n, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, n, 2, c.n_kv_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        if cache is None:  # whole sequences: the new tokens are all the keys there are
            o = attn(q, k, v, causal=True, window=c.window)
        else:  # the cache stores k, v and attends over everything each row's sequence holds
            o = cache.attend(self.layer, q, k, v, positions, attn)
        return self.wo(o.to(x.dtype).transpose(1, 2).reshape(b, n, c.n_heads * c.head_dim))
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-model>>[init]
class Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: MiniGPTConfig, layer: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config, layer)
        self.norm2 = nn.LayerNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, hidden), nn.GELU(), nn.Linear(hidden, config.d_model)
        )

    def forward(self, x, positions, cache=None, attn: AttentionFn = attention_ref):
        x = x + self.attn(self.norm1(x), positions, cache, attn)
        return x + self.mlp(self.norm2(x))


class MiniGPT(nn.Module):
    """Token + position embeddings, `n_layers` blocks, a tied output head."""

    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: Cache | None = None,
        *,
        attn: AttentionFn = attention_ref,
        check: bool | None = None,
    ) -> torch.Tensor:
        """tokens: (B, n) int64 at positions (B, n) int64 -> logits (B, n, vocab).

        Without a cache each row is a whole sequence, positions 0 ... n-1 (the default). With a
        cache, row r continues sequence `cache.rows[r]`: its positions are required, and are the
        next n positions of that sequence; the tokens' keys and values are stored in the cache.

        check: whether to check the values of tokens and positions (ids in [0, vocab_size),
        positions counting up by one below max_seq_len, and `cache.check_positions`), which
        reads them on the host: a device sync. None (the default) checks eagerly and not under
        torch.compile or CUDA-graph capture, where no value can be read; False leaves them to
        the caller, True there is refused. Under compile or capture the cache must be graph-safe
        (`graph_safe = True`, e.g. KernelPagedKVCache) and this pass does not commit: the
        Python around a compiled or captured step does not run at each call, so the caller
        calls `cache.commit(positions)` after it. Eagerly the pass commits, as always.
        """
        c = self.config
        for name, t in (("tokens", tokens), ("positions", positions)):
            if not (isinstance(t, torch.Tensor) or (name == "positions" and t is None)):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if check is not None and not isinstance(check, bool):
            raise TypeError(f"check must be None, True or False, got {type(check).__name__}")
        traced = _traced(tokens)
        if check and traced:
            raise ValueError("check=True reads tokens and positions on the host, which torch."
                             "compile and CUDA-graph capture cannot: check them eagerly")
        check = not traced if check is None else check
        if traced and cache is not None and not getattr(cache, "graph_safe", False):
            raise ValueError(f"{type(cache).__name__} is not graph-safe (it reads positions on "
                             "the host): under torch.compile or CUDA-graph capture use a cache "
                             "with graph_safe = True, such as KernelPagedKVCache")
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be (B, n) int64, got shape {tuple(tokens.shape)} {tokens.dtype}"
            )
        if tokens.numel() == 0:  # no row, or rows of no token: nothing to predict from
            raise ValueError(f"tokens must be (B, n) with B >= 1 and n >= 1, got shape "
                             f"{tuple(tokens.shape)}")
        if check and (tokens.min() < 0 or tokens.max() >= c.vocab_size):
            raise ValueError(f"token ids must lie in [0, {c.vocab_size})")
        b, n = tokens.shape
        if positions is None:
            if cache is not None:
                raise ValueError("with a cache, give the positions (B, n) of the new tokens")
            positions = torch.arange(n, device=tokens.device).expand(b, n)
        if positions.shape != tokens.shape or positions.dtype != torch.long:
            raise ValueError(f"positions must be int64 of the tokens' shape {(b, n)}, got "
                             f"{tuple(positions.shape)} {positions.dtype}")
        if check:
            _check_positions(positions, c.max_seq_len, first_is_zero=cache is None)
        if cache is not None:
            if cache.config != c:
                raise ValueError(f"the cache was built for {cache.config}, not for {c}")
            if check:
                cache.check_positions(positions)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, positions, cache, attn)
        if cache is not None and not traced:
            cache.commit(positions)
        return self.norm(x) @ self.tok.weight.T


def _traced(t: torch.Tensor) -> bool:
    """Whether this call is being traced by torch.compile or captured into a CUDA graph: no
    tensor value can be read on the host, and the Python runs once, not at every call."""
    return torch.compiler.is_compiling() or (
        t.is_cuda and torch.cuda.is_current_stream_capturing())


def _check_positions(positions: torch.Tensor, max_seq_len: int, first_is_zero: bool) -> None:
    """The checks of positions' values (B, n), read on the host."""
    if (positions[:, 0] < 0).any() or (positions.diff(dim=1) != 1).any():
        raise ValueError("positions must count up by one from a start >= 0 in every row")
    if positions[:, -1].max() >= max_seq_len:
        raise ValueError(f"position {positions[:, -1].max().item()} is past "
                         f"max_seq_len={max_seq_len}")
    if first_is_zero and (positions[:, 0] != 0).any():
        raise ValueError("without a cache there are no earlier keys: positions start at 0")
# ~/~ end
# ~/~ end

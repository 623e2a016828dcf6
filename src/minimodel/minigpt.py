# ~/~ begin <<docs/foundations.md#src/minimodel/minigpt.py>>[init]
"""MiniGPT: the small decoder whose attention this phase replaces, with a contiguous KV cache.

Tangled from docs/foundations.md; edit the page, not this file.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from minimodel.reference import attention_ref

__all__ = ["Block", "CausalSelfAttention", "KVCache", "MiniGPT", "MiniGPTConfig"]

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

    def __post_init__(self):
        for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_kv_heads", "n_layers",
                     "mlp_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MiniGPTConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-kv-cache>>[init]
class KVCache:
    """Per-layer K and V buffers of shape (B, Hkv, max_seq_len, d), filled left to right."""

    def __init__(self, config: MiniGPTConfig, batch: int, *, dtype=torch.float32, device=None):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        shape = (config.n_layers, batch, config.n_kv_heads, config.max_seq_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # tokens stored, the same for every layer once a forward pass ends

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def append(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store `k, v: (B, Hkv, n, d)` after the cached tokens; return all of them so far."""
        start, n = self.length, k.shape[2]
        if start + n > self.capacity:
            raise ValueError(
                f"KV cache overflow: {start} cached + {n} new tokens > max_seq_len={self.capacity}"
            )
        expected = (self.k.shape[1], self.k.shape[2], n, self.k.shape[4])
        if k.shape != expected or v.shape != k.shape:
            raise ValueError(
                f"k, v must have shape (B, Hkv, n, d) = {expected}, "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        self.k[layer, :, :, start : start + n] = k
        self.v[layer, :, :, start : start + n] = v
        return self.k[layer, :, :, : start + n], self.v[layer, :, :, : start + n]

    def advance(self, n: int) -> None:
        """Commit n new tokens once every layer has appended them."""
        free = self.capacity - self.length
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= free:
            raise ValueError(f"advance needs 0 <= n <= {free} (free slots), got {n!r}")
        self.length += n

    def nbytes(self, tokens: int | None = None) -> int:
        """Bytes that `tokens` cached tokens occupy (default: those stored now)."""
        tokens = self.length if tokens is None else tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be a non-negative int, got {tokens!r}")
        per_token = 2 * self.k.shape[0] * self.k.shape[1] * self.k.shape[2] * self.k.shape[4]
        return per_token * tokens * self.k.element_size()
# ~/~ end


# ~/~ begin <<docs/foundations.md#minigpt-attention>>[init]
AttentionFn = Callable[..., torch.Tensor]


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention over a KV cache."""

    def __init__(self, config: MiniGPTConfig, layer: int):
        super().__init__()
        self.config, self.layer = config, layer
        d, h, hkv = config.head_dim, config.n_heads, config.n_kv_heads
        self.wq = nn.Linear(config.d_model, h * d, bias=False)
        self.wkv = nn.Linear(config.d_model, 2 * hkv * d, bias=False)
        self.wo = nn.Linear(h * d, config.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, attn: AttentionFn = attention_ref
    ) -> torch.Tensor:
        """x: (B, n, d_model) new tokens -> (B, n, d_model)."""
        b, n, _ = x.shape
        c = self.config
        q = self.wq(x).view(b, n, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, n, 2, c.n_kv_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)  # all cached tokens plus the new ones
        o = attn(q, k, v, causal=True).to(x.dtype)  # bottom-right: new tokens see the cache
        return self.wo(o.transpose(1, 2).reshape(b, n, c.n_heads * c.head_dim))
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

    def forward(self, x, cache=None, attn: AttentionFn = attention_ref):
        x = x + self.attn(self.norm1(x), cache, attn)
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
        self, tokens: torch.Tensor, cache: KVCache | None = None, attn: AttentionFn = attention_ref
    ) -> torch.Tensor:
        """tokens: (B, n) int64 -> logits (B, n, vocab). With a cache, `tokens` are the next n."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be (B, n) int64, got shape {tuple(tokens.shape)} {tokens.dtype}"
            )
        start = 0 if cache is None else cache.length
        n = tokens.shape[1]
        if start + n > self.config.max_seq_len:
            raise ValueError(
                f"sequence of {start + n} tokens exceeds max_seq_len={self.config.max_seq_len}"
            )
        if tokens.min() < 0 or tokens.max() >= self.config.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size})")
        x = self.tok(tokens) + self.pos(torch.arange(start, start + n, device=tokens.device))
        for block in self.blocks:
            x = block(x, cache, attn)
        if cache is not None:
            cache.advance(n)
        return self.norm(x) @ self.tok.weight.T
# ~/~ end
# ~/~ end

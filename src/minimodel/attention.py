# ~/~ begin <<docs/lab/03b-paged-kernels.md#src/minimodel/attention.py>>[init]
"""minimodel's public attention entry point: one call on contiguous tensors that picks the kernel
(one query token: the decode kernel reading the cache in place; more: Lab 02's Flash kernel),
the paged calls, and a paged KV cache for MiniGPT that attends through them.

Tangled from docs/lab/03b-paged-kernels.md; edit the page, not this file.
"""

import torch

from minimodel import paged_attention
from minimodel.attention_flash import flash_attention
from minimodel.minigpt import AttentionFn
from minimodel.paged_attention import paged_decode, paged_prefill
from minimodel.paged_kv_cache import PagedKVCache
from minimodel.reference import (
    attention_ref,
    check_attention_inputs,
    check_mask_args,
    resolve_scale,
)

__all__ = ["KernelPagedKVCache", "attention", "paged_decode", "paged_prefill"]


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

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d). Nq == 1 (a decode step) runs the paged decode
    kernel on the cache in place, split across programs when the batch is small; Nq > 1 runs
    Lab 02's `flash_attention`. Same arguments, returns and refusals as `flash_attention`.
    """
    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)
    if nq > 1:
        return flash_attention(q, k, v, causal=causal, window=window, scale=scale,
                               return_lse=return_lse)
    # One query at key position nk - 1 sees every key with or without `causal`; a window still
    # needs causal=True (checked above), as in the reference.
    o, lse = paged_attention.decode_contiguous(q[:, :, 0], k, v, window=window, tau=tau)
    o, lse = o[:, :, None], lse[:, :, None]
    return (o, lse) if return_lse else o
# ~/~ end


# ~/~ begin <<docs/lab/03b-paged-kernels.md#attention-paged-kv-cache>>[init]
class KernelPagedKVCache(PagedKVCache):
    """Lab 03's PagedKVCache, attending through the paged kernels on its pools in place: a chunk
    of new tokens per row through `paged_prefill`, one token per row through `paged_decode`.

    The kernels are the attention: MiniGPT's `attn` argument must be left at its default.
    """

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, attn: AttentionFn = attention_ref) -> torch.Tensor:
        """Write k, v: (B, Hkv, n, d) at the rows' slots, then attend q: (B, Hq, n, d) over
        each row's keys through its block table; returns (B, Hq, n, d)."""
        if attn is not attention_ref:
            raise ValueError("KernelPagedKVCache attends with the paged kernels: pass no attn "
                             f"to the model (got {getattr(attn, '__name__', attn)!r})")
        self.write(layer, k, v, positions)  # every row first, as the kernels read all of them
        b, hq, n, d = q.shape
        tables = [self.manager.block_table(seq) for seq in self.rows]
        width = max(len(t) for t in tables)
        table = torch.tensor([t + [-1] * (width - len(t)) for t in tables], dtype=torch.int32,
                             device=q.device)
        ends = positions[:, -1] + 1  # each row's context: its keys so far, the new ones included
        lens = ends.to(device=q.device, dtype=torch.int32)
        k_pool, v_pool, w = self.k[layer], self.v[layer], self.config.window
        if n == 1:
            o = paged_decode(q[:, :, 0], k_pool, v_pool, table, lens,
                             max_context_len=int(ends.max()), window=w)
            return o[:, :, None]
        starts = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device=q.device)
        o = paged_prefill(q.transpose(1, 2).reshape(b * n, hq, d), k_pool, v_pool, table, lens,
                          starts, max_query_len=n, window=w)
        return o.view(b, n, hq, d).transpose(1, 2)
# ~/~ end
# ~/~ end

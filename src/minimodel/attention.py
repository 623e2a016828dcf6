# ~/~ begin <<docs/lab/03b-paged-kernels.md#src/minimodel/attention.py>>[init]
"""minimodel's public attention entry point: one call on contiguous tensors that picks the kernel
(one query token: the decode kernel reading the cache in place; more: Lab 02's Flash kernel),
registered as the custom op torch.ops.minimodel.attention so that torch.compile keeps a model
that calls it in one graph; the paged calls, and a paged KV cache for MiniGPT that attends
through them.

Tangled from docs/lab/03b-paged-kernels.md; edit the page, not this file.
"""

import torch

from minimodel import paged_attention
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import MAX_HEAD_DIM as HOPPER_MAX_HEAD_DIM
from minimodel.attention_flash_hopper import flash_attention_hopper
from minimodel.kernels import INTERPRET, SUPPORTED_DTYPES, check_forward_only
from minimodel.minigpt import AttentionFn
from minimodel.paged_attention import paged_decode, paged_prefill
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
             window: int | None, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel for one call, chosen here and nowhere else; (O, lse) for checked inputs."""
    if q.shape[2] == 1:
        return _forward_decode(q, k, v, window, resolve_scale(scale, q.shape[-1]))
    if _hopper_takes(q):  # Lab 02 part 2's schedule where it runs; Lab 02's kernel elsewhere
        return flash_attention_hopper(q, k, v, causal=causal, window=window, scale=scale,
                                      return_lse=True)
    return flash_attention(q, k, v, causal=causal, window=window, scale=scale, return_lse=True)


def _hopper_takes(q: torch.Tensor) -> bool:
    """Whether flash_attention_hopper runs this call: a Hopper GPU (compute capability 9.x, not
    the interpreter), float16 or bfloat16, head_dim <= 128."""
    return (not INTERPRET and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and q.shape[-1] <= HOPPER_MAX_HEAD_DIM
            and torch.cuda.get_device_capability(q.device)[0] == 9)


def _forward_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None,
                    tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One query row per (sequence, head): the decode kernel on the cache (B, Hkv, Nk, d) in
    place. A head dim the kernel does not take (it takes multiples of 8 in [16, 256]) is
    zero-padded up to one, which copies q, k and v."""
    d = q.shape[-1]
    width = max(16, -(-d // 8) * 8)  # the next head dim the kernel takes
    if width != d:  # a zero column adds nothing to q.k; its output column is zero, dropped
        q, k, v = (torch.nn.functional.pad(t, (0, width - d)) for t in (q, k, v))
    # One query at key position nk - 1 sees every key with or without `causal`; a window still
    # needs causal=True (checked by _check_call), as in the reference.
    o, lse = paged_attention.decode_contiguous(q[:, :, 0], k, v, window=window, tau=tau)
    return o[:, :, None, :d], lse[:, :, None]
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
    Nq > 1 runs Lab 02's `flash_attention`. causal aligns bottom-right; window=W (causal only)
    keeps the W latest keys.

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
        o, lse = _forward(q, k, v, causal, window, scale)
        o, lse = o.contiguous(), lse.contiguous()  # what the op returns
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

# ~/~ begin <<docs/lab/04-mqa-gqa.md#src/minimodel/attention_mqa_gqa.py>>[init]
"""MQA and GQA for MiniGPT: grouped attention that never repeats a kv head, the variants of a
configuration, the mean-pooling conversion of a trained model, and the KV cache measured from
its tensors.

Tangled from docs/lab/04-mqa-gqa.md; edit the page, not this file.
"""

import dataclasses
from dataclasses import dataclass

import torch

from minimodel.checks import check_int
from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig
from minimodel.reference import check_attention_inputs, check_mask_args, resolve_scale, visible_mask
from minimodel.verbs import tokenizer

__all__ = ["CacheBytes", "VERB_MODEL_HEADS", "VERB_MODEL_MAX_LEN", "blank_kv_cache",
           "cache_bytes", "grouped_attention", "mean_pool_kv", "verb_model_config",
           "with_kv_heads"]


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-grouped-attention>>[init]
# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-grouped-attention-interface>>[init]
def grouped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Grouped-query attention that reads each kv head once and never repeats it.

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d) with Hq a multiple of Hkv. Query head h reads kv
    head h // g, g = Hq // Hkv. The same function as `attention_ref` (bottom-right causal,
    window=W for causal only, scale defaulting to d ** -0.5, a row with no visible key gives
    zeros), returned in float32 (float64 for float64 inputs): O of shape (B, Hq, Nq, d).
    No tensor holding Hq heads of keys or values is ever created: the g query heads of a group
    are stacked as rows of one matrix instead, (B, Hkv, g * Nq, d), which meets K and V as they
    are. Raises ValueError on the inputs `attention_ref` refuses, naming what its messages name
    (Hq and Hkv when they do not divide; `window` and `causal` for a window without causal).
    """
# ~/~ end
    b, hq, hkv, nq, nk, d = check_attention_inputs(q, k, v)
    check_mask_args(causal, window)
    tau = resolve_scale(scale, d)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    g = hq // hkv  # query heads per kv head: head h = j g + i reads kv head j
    q_groups = q.to(compute).reshape(b, hkv, g * nq, d)  # Q_j: the g heads of group j, stacked
    k_, v_ = k.to(compute), v.to(compute)  # still Hkv heads: nothing repeated
    s = tau * (q_groups @ k_.transpose(-1, -2))  # S_j: (B, Hkv, g Nq, Nk)
    mask = visible_mask(nq, nk, causal=causal, window=window, device=q.device)
    s = s.view(b, hkv, g, nq, nk).masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.where(lse == float("-inf"), 0.0, torch.exp(s - lse))  # rows that see nothing: 0
    o = p.view(b, hkv, g * nq, nk) @ v_  # O_j = P_j V_j: (B, Hkv, g Nq, d)
    return o.view(b, hq, nq, d)
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-with-kv-heads>>[init]
# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-with-kv-heads-interface>>[init]
def with_kv_heads(config: MiniGPTConfig, n_kv_heads: int) -> MiniGPTConfig:
    """The same configuration with `n_kv_heads` kv heads: config.n_heads is MHA, 1 is MQA, any
    other divisor of n_heads is GQA. Every other field is unchanged.

    Raises ValueError naming both numbers when n_kv_heads does not divide n_heads, and on an
    n_kv_heads that is not a positive int (naming `n_kv_heads` and the value given).
    """
# ~/~ end
    check_int("n_kv_heads", n_kv_heads, 1)
    h = config.n_heads
    if h % n_kv_heads:
        divisors = [n for n in range(h, 0, -1) if h % n == 0]
        raise ValueError(
            f"n_kv_heads={n_kv_heads} does not divide n_heads={h}: each kv head must serve a "
            f"whole group of query heads; choose one of {divisors} ({h} is MHA, 1 is MQA)"
        )
    return dataclasses.replace(config, n_kv_heads=n_kv_heads)
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-mean-pool>>[init]
# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-mean-pool-interface>>[init]
def mean_pool_kv(model: MiniGPT, n_kv_heads: int) -> MiniGPT:
    """A new MiniGPT with `n_kv_heads` kv heads, converted from `model` as the GQA paper does:
    in every layer, new kv head j's key projection is the mean of the key projections of the
    old kv heads it replaces (the j-th group of model.config.n_kv_heads // n_kv_heads
    consecutive heads), and likewise its value projection. Every other weight is copied.

    `model` is left untouched and shares no tensor with the result, which has its dtype, device
    and train/eval mode. Pooling MHA into MHA is exact. Raises ValueError when n_kv_heads is not
    a valid variant of the model's configuration (with_kv_heads' message) or does not divide
    the model's own n_kv_heads (naming both numbers), and when `model` is not a MiniGPT
    (naming `model`).
    """
# ~/~ end
    if not isinstance(model, MiniGPT):
        raise ValueError(f"model must be a MiniGPT, got {type(model).__name__}")
    old = model.config
    config = with_kv_heads(old, n_kv_heads)
    if old.n_kv_heads % n_kv_heads:
        raise ValueError(
            f"cannot mean-pool {old.n_kv_heads} kv heads into {n_kv_heads}: each new kv head "
            f"must average a whole group of old ones, so {n_kv_heads} must divide "
            f"{old.n_kv_heads}"
        )
    r, d = old.n_kv_heads // n_kv_heads, old.head_dim  # old heads per new head
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    for layer in range(old.n_layers):
        name = f"blocks.{layer}.attn.wkv.weight"
        w = state[name].view(2, n_kv_heads, r, d, old.d_model)  # (K|V, new head, member, ...)
        state[name] = w.mean(dim=2).reshape(2 * n_kv_heads * d, old.d_model)
    like = next(model.parameters())
    with torch.device("meta"):
        new = MiniGPT(config)
    new = new.to_empty(device=like.device).to(like.dtype)
    new.load_state_dict(state)
    return new.train(model.training)
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-cache-bytes-type>>[init]
@dataclass(frozen=True)
class CacheBytes:
    """A KV cache's bytes, measured from its tensors."""

    allocated: int  # the bytes of the storages behind its K and V buffers, each counted once
    filled: int  # the bytes of the elements that have been written: every slot not NaN
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-blank-cache>>[init]
# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-blank-cache-interface>>[init]
def blank_kv_cache(
    config: MiniGPTConfig, batch: int, *, dtype: torch.dtype = torch.float32, device=None
) -> KVCache:
    """A KVCache (config, batch, dtype, device) whose K and V buffers hold NaN in every slot,
    so that the slots a run has written can be counted afterwards. Raises ValueError on a
    dtype that is not floating point (NaN needs one; naming `dtype`), and on what KVCache
    refuses (a batch that is not a positive int: naming `batch` and the value).
    """
# ~/~ end
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype (NaN marks the slots "
                         f"not written yet), got {dtype!r}")
    cache = KVCache(config, batch, dtype=dtype, device=device)
    cache.k.fill_(float("nan"))
    cache.v.fill_(float("nan"))
    return cache
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-cache-bytes>>[init]
# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-cache-bytes-interface>>[init]
def cache_bytes(cache: KVCache) -> CacheBytes:
    """Measure a KVCache from its tensors: `allocated` sums the nbytes of the distinct untyped
    storages behind cache.k and cache.v (a view still holds its whole storage); `filled`
    counts the elements of k and v that are not NaN, times their element size, which for a
    cache made by `blank_kv_cache` is what has been written. Raises ValueError, naming
    `cache`, when `cache` is not a KVCache.
    """
# ~/~ end
    if not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache, got {type(cache).__name__}")
    tensors = (cache.k, cache.v)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    written = sum(int((~t.isnan()).sum()) * t.element_size() for t in tensors)
    return CacheBytes(allocated=sum(storages.values()), filled=written)
# ~/~ end


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-verb-model>>[init]
VERB_MODEL_HEADS = 8  # query heads: kv8 is MHA, kv4 and kv2 are GQA, kv1 is MQA
VERB_MODEL_MAX_LEN = 136  # the longest line of the verb corpus, in characters


def verb_model_config(n_kv_heads: int = VERB_MODEL_HEADS) -> MiniGPTConfig:
    """The lab's MiniGPT: 8 query heads of d = 8, 2 layers, the verb corpus's vocabulary."""
    base = MiniGPTConfig(vocab_size=tokenizer().vocab_size, max_seq_len=VERB_MODEL_MAX_LEN,
                         d_model=64, n_heads=VERB_MODEL_HEADS, n_kv_heads=VERB_MODEL_HEADS,
                         n_layers=2)
    return with_kv_heads(base, n_kv_heads)
# ~/~ end
# ~/~ end

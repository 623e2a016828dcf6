# ~/~ begin <<docs/lab/04-mqa-gqa.md#exercises/lab04/attention_mqa_gqa.py>>[init]
"""Lab 04: MQA and GQA in MiniGPT. Fill in every body that raises NotImplementedError.

Skeleton tangled from docs/lab/04-mqa-gqa.md (`make exercise LAB=04` copies it to mywork/);
check it with `make check-mine LAB=04`. The reference's checks and mask are in
minimodel.reference (check_attention_inputs, check_mask_args, resolve_scale, visible_mask).
"""

from dataclasses import dataclass

import torch

from minimodel.minigpt import KVCache, MiniGPT, MiniGPTConfig


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
    raise NotImplementedError(
        "not written yet: grouped_attention: reshape q to (B, Hkv, g * Nq, d), score it against "
        "k as it is, mask, softmax, multiply by v"
    )


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-with-kv-heads-interface>>[init]
def with_kv_heads(config: MiniGPTConfig, n_kv_heads: int) -> MiniGPTConfig:
    """The same configuration with `n_kv_heads` kv heads: config.n_heads is MHA, 1 is MQA, any
    other divisor of n_heads is GQA. Every other field is unchanged.

    Raises ValueError naming both numbers when n_kv_heads does not divide n_heads, and on an
    n_kv_heads that is not a positive int (naming `n_kv_heads` and the value given).
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: with_kv_heads: check that n_kv_heads divides n_heads, then "
        "dataclasses.replace"
    )


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
    raise NotImplementedError(
        "not written yet: mean_pool_kv: average each group of rows of every attn.wkv weight, "
        "load the result into a new MiniGPT"
    )


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-cache-bytes-type>>[init]
@dataclass(frozen=True)
class CacheBytes:
    """A KV cache's bytes, measured from its tensors."""

    allocated: int  # the bytes of the storages behind its K and V buffers, each counted once
    filled: int  # the bytes of the elements that have been written: every slot not NaN
# ~/~ end


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
    raise NotImplementedError(
        "not written yet: blank_kv_cache: a KVCache with its k and v buffers filled with NaN"
    )


# ~/~ begin <<docs/lab/04-mqa-gqa.md#mqa-gqa-cache-bytes-interface>>[init]
def cache_bytes(cache: KVCache) -> CacheBytes:
    """Measure a KVCache from its tensors: `allocated` sums the nbytes of the distinct untyped
    storages behind cache.k and cache.v (a view still holds its whole storage); `filled`
    counts the elements of k and v that are not NaN, times their element size, which for a
    cache made by `blank_kv_cache` is what has been written. Raises ValueError, naming
    `cache`, when `cache` is not a KVCache.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: cache_bytes: storage bytes of k and v, and their elements that are "
        "not NaN times the element size"
    )
# ~/~ end

# ~/~ begin <<docs/lab/02-flash-triton.md#exercises/lab02/attention_flash.py>>[init]
"""Lab 02: FlashAttention forward in Triton. Write the kernel and fill in `flash_attention`.

Skeleton tangled from docs/lab/02-flash-triton.md (`make exercise LAB=02` copies it to mywork/);
check it with `make check-mine LAB=02`. Set TRITON_INTERPRET=1 before importing triton to run
the kernel on a CPU (the tests do).
"""

import torch
import triton  # noqa: F401  (your kernel: @triton.jit)
import triton.language as tl  # noqa: F401

from minimodel.reference import check_attention_inputs, check_mask_args, resolve_scale  # noqa: F401


# ~/~ begin <<docs/lab/02-flash-triton.md#flash-fwd-interface>>[init]
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward: the function `attention_ref` specifies, in one Triton kernel.

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d), Hq % Hkv == 0 (GQA/MQA read the shared kv head in
    place). float16 / bfloat16 / float32 (no bfloat16 under the interpreter); d a multiple of 8
    in [16, 256]. causal aligns bottom-right; window=W (causal only) keeps the W latest keys.

    Returns O: (B, Hq, Nq, d) in q's dtype and, with return_lse, the natural-log log-sum-exp
    (B, Hq, Nq) in float32. A row with no visible key gives zeros and lse = -inf.
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: flash_attention: validate, allocate O and lse, launch your kernel"
    )
# ~/~ end

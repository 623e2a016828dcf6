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
    place). float16 / bfloat16 / float32 (no bfloat16 under the interpreter); any d in [1, 256].
    causal aligns bottom-right; window=W (causal only) keeps the W latest keys; the default scale
    is 1/sqrt(d).

    Any strides are accepted. The solution reads its tiles through the TMA: a view whose
    head_dim has unit stride, whose other strides are multiples of 16 bytes and whose start is
    16-byte aligned (a transposed (B, N, H, d) layout, one head of a packed QKV tensor) is read
    in place, and any other input costs one copy into a contiguous buffer whose rows are padded
    with zeros to a multiple of 16 bytes: a strided head_dim, an odd stride, an unaligned start,
    and so a contiguous input whose d is not a multiple of 8 (16-bit) or 4 (float32).

    Returns O: (B, Hq, Nq, d) in q's dtype (the solution's O is contiguous when a row of d
    elements is a multiple of 16 bytes, else a view of the first d columns of such a padded
    buffer: call .contiguous() for a copy) and, with return_lse, the natural-log log-sum-exp
    (B, Hq, Nq) in float32. A row with no visible key gives zeros and lse = -inf.

    Raises ValueError for d outside [1, 256], float64, inputs that require grad, a device the
    kernel cannot run on, B * Hq above 65,535 (one program per pair on a grid axis), and the
    reference's own checks (ranks, shapes, masks, scale).
    """
# ~/~ end
    raise NotImplementedError(
        "not written yet: flash_attention: validate, allocate O and lse, launch your kernel"
    )
# ~/~ end

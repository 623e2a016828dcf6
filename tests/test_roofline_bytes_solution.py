# ~/~ begin <<docs/lab/01-flash-bytes.md#tests/test_roofline_bytes_solution.py>>[init]
"""The solution's own error messages for Lab 01, word for word (tangled from
docs/lab/01-flash-bytes.md; not run by `make check-mine`: a learner's wording may differ)."""

import pytest

from minimodel.roofline import (
    decode_bytes,
    flash_forward_bytes,
    naive_attention_bytes_per_kernel,
    paged_decode_bytes,
)


# ~/~ begin <<docs/lab/01-flash-bytes.md#bytes-check-solution-messages>>[init]
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: naive_attention_bytes_per_kernel(1, 4, 3, 8, 8, 16), r"Hq=4 .* Hkv=3"),
        (lambda: naive_attention_bytes_per_kernel(0, 4, 4, 8, 8, 16), r"b must be an int >= 1"),
        (lambda: naive_attention_bytes_per_kernel(1, 4, 4, 8, 8, 16, window=3),
         r"window=3 needs causal=True"),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8, 16, block_m=16, causal=True),
         r"needs block_n"),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8.0, 16, block_m=16), r"nk must be an int >= 1"),
        (lambda: flash_forward_bytes(1, 4, 4, 8, 8, 16, block_m=16, block_n=16, causal=True,
                                     window=0), r"window must be >= 1"),
        (lambda: decode_bytes(1, 4, 4, 0, 16), r"context must be an int >= 1, got 0"),
        (lambda: decode_bytes(1, 6, 4, 8, 16), r"Hq=6 .* Hkv=4"),
        (lambda: decode_bytes(1, 4, 4, 8, 16, num_splits=0), r"num_splits must be an int >= 1"),
        (lambda: decode_bytes(1, 4, 4, 8, True), r"d must be an int >= 1, got True"),
        (lambda: paged_decode_bytes(1, 4, 4, 8, 16, block_size=0, block_n=16),
         r"block_size must be an int >= 1"),
        (lambda: paged_decode_bytes(1, 4, 4, 8, 16, block_size=16, block_n=16, window=-1),
         r"window must be >= 1"),
    ],
)
def test_the_solutions_messages(call, match):
    with pytest.raises(ValueError, match=match):
        call()
# ~/~ end
# ~/~ end

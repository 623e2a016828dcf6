"""What Nsight Compute profiles for Lab 03 part 2's 8-bit cache ("The measurement"): one decode
step at bench.fp8_decode's shape through the 8-bit pools, then the 16-bit ones, each called twice
(the first call compiles; -c 4 keeps the 8-bit call's second decode and merge). On the H200:

    PYTHONPATH=src:. ncu --clock-control none --set full \\
        -k regex:"_paged_decode_fwd|_merge_splits" -c 4 -o $OUT/fp8 python3 -m bench.ncu_fp8
    ncu --import $OUT/fp8.ncu-rep --page details > data/ncu-fp8-decode-h200.txt
"""

import torch

from bench.fp8_decode import N, cache
from minimodel.paged_attention import paged_decode


def main() -> None:
    c = cache()
    table = {"block_tables": c.table, "context_lens": c.lens_t, "max_context_len": N}
    pools8 = {"k_pool": c.k_pool8, "v_pool": c.v_pool8, "k_scale": c.k_scale, "v_scale": c.v_scale}
    for pools in (pools8, {"k_pool": c.k_pool16, "v_pool": c.v_pool16}):
        for _ in range(2):
            paged_decode(c.q, **table, **pools)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

"""The target Nsight Compute profiles for the 8-bit cache's speed (data/ncu-fp8-decode-h200.txt):
one decode step at bench.fp8_decode's shape through the 8-bit pools, then through the 16-bit
ones, each called twice (the first call compiles). On the H200:

    PYTHONPATH=src:. ncu --clock-control none --set full \\
        -k regex:"_paged_decode_fwd|_merge_splits" -c 4 -o $OUT/fp8 python3 -m bench.ncu_fp8
    ncu --import $OUT/fp8.ncu-rep --page details > data/ncu-fp8-decode-h200.txt

-c 4 keeps the 8-bit call's two decode and two merge launches.
"""

import torch

from bench.core import in_blocks
from bench.fp8_decode import BLOCK_SIZE, HKV, HQ, B, D, N, pools
from minimodel.paged_attention import paged_decode, quantize_kv


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, HQ, D, device="cuda", generator=gen).half()
    k32, v32 = (torch.randn(B, HKV, N, D, device="cuda", generator=gen) for _ in range(2))
    lens = [N] * B
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    (k8, ks), (v8, vs) = quantize_kv(k32), quantize_kv(v32)
    (kp8, k_scale, table), (vp8, v_scale, _) = pools(k8, ks, lens), pools(v8, vs, lens)
    kp16, vp16 = (in_blocks(x.half(), lens, BLOCK_SIZE)[0] for x in (k32, v32))
    for pools_kw in (
        {"k_pool": kp8, "v_pool": vp8, "k_scale": k_scale, "v_scale": v_scale},
        {"k_pool": kp16, "v_pool": vp16},
    ):
        for _ in range(2):
            paged_decode(q, block_tables=table, context_lens=lens_t, max_context_len=N, **pools_kw)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

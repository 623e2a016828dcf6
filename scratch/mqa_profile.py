"""Issue 23 study: where MQA decode's GPU time goes, kernel by kernel, at the issue's shape
(B = 64, 4,096 keys, 32 query heads, one kv head, d = 128, fp16, blocks of 16 in random order).
Each configuration is called once to compile, then once inside a profiler range, so that Nsight
Compute sees one decode launch and one merge launch per configuration, and cuDNN's kernels:

    PYTHONPATH=src:. ncu --profile-from-start off --section SpeedOfLight --section LaunchStats \\
        --section Occupancy --section WarpStateStats python scratch/mqa_profile.py

Configurations (G_max, BLOCK_N, warps, stages, splits; None: the default split), from
scratch/mqa_probe.py's run (data/mqa-probe-h200.log): the shipped one, the fastest (128-key
tiles, 2 stages), 16-row chunks, and a forced split of 4. Not a timing: ncu serialises launches,
and the calls are eager, so our decode kernels fold the merge (no capture: FOLD_MERGE's rule).
Run at 1b6495c (data/ncu-mqa-h200.txt), with the call as bench.paged_decode.sdpa_fn was then;
mended for its new form since, not re-run.
"""

import torch

from bench import core
from bench.mqa_decode import BLOCK_SIZE, HKV, D
from bench.paged_decode import sdpa_fn
from scratch.mqa_probe import HQ, B, N, variant

CONFIGS = [(64, 64, 4, 3, None), (64, 128, 4, 2, None), (16, 64, 4, 2, None),
           (64, 128, 4, 2, 4)]


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = core.randn(B, HQ, D, generator=gen)
    k, v = (core.randn(B, HKV, N, D, generator=gen) for _ in "kv")
    kp, vp, table, lens = core.paged_cache(k, v, [N] * B, BLOCK_SIZE)
    fns = [variant(cfg, (q, kp, vp, table, lens)) for cfg in CONFIGS]
    sdpa, _ = sdpa_fn(q[:, :, None], k, v)

    def cudnn():
        with core.sdpa("sdpa_cudnn"):  # the backend, as bench.core.in_turns picks it by name
            return sdpa()

    fns.append(cudnn)
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for cfg, fn in zip(CONFIGS + ["cudnn"], fns, strict=True):
        torch.cuda.nvtx.range_push(str(cfg))
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()

"""Issue 23 study: where the Hopper kernel's time goes at the prefill point that misses its bar
(causal, N = 512, d = 128, fp16, B = 32, 16 heads: bench.prefill_grid's shape) against cuDNN, and
at causal N = 1024 (B = 16), where the two are level. Each call runs once to compile, then once
inside the profiler's range, so Nsight Compute sees one launch per kernel and shape:

    PYTHONPATH=src:. ncu --clock-control none --set full --profile-from-start off \\
        -o /tmp/prefill python3 scratch/prefill_profile.py
    ncu --import /tmp/prefill.ncu-rep --page details > data/ncu-prefill-h200.txt

Not a timing (ncu serialises launches and replays each kernel): the counters are what it is for.
Run at 2a2e205 (data/ncu-prefill-h200.txt; data/ncu-prefill-ops-h200.txt from a second run with
--metrics sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum; and, with
-k regex:_attn_fwd_ws -c 1 --section WarpStateStats --section SourceCounters --import-source yes,
`ncu --page source --print-source sass --csv`, its address, SASS, sample and stall columns kept
in data/ncu-prefill-stalls-h200.csv). Stated in Lab 02 part 2, "Where it falls short".
"""

import torch
import torch.nn.functional as F

from bench import core
from minimodel.attention_flash_hopper import flash_attention_hopper


def main() -> None:
    calls = []
    for n in (512, 1024):
        b, h, d = 16384 // n, 2048 // 128, 128
        q, k, v = core.qkv(b, h, h, n, d, nq=n, dtype=torch.float16, seed=n + d + True)

        def cudnn(q=q, k=k, v=v):
            with core.sdpa("sdpa_cudnn"):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        calls += [(f"hopper N={n}", lambda q=q, k=k, v=v: flash_attention_hopper(
            q, k, v, causal=True)), (f"cudnn N={n}", cudnn)]
    for _, fn in calls:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in calls:
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()

"""Issue 23: where the 16-bit Hopper decode's time goes at MQA (B = 64, 4,096 keys, 32 query heads
on one kv head, d = 128): --ncu runs one call for Nsight Compute; --time graph-times the shipped
call beside the same call on a workspace made before the capture (no zero-fill of the counters in
the graph), and cuDNN.

    PYTHONPATH=src:. python scratch/h16_probe.py --time --out $OUT/h16-probe-h200.json
    PYTHONPATH=src:. ncu --kernel-name regex:hopper16 --launch-skip 3 --launch-count 1 \
        --section WarpStateStats --section SpeedOfLight python scratch/h16_probe.py --ncu
"""

import argparse
from pathlib import Path

import torch

from bench import core
from minimodel import paged_attention as pa
from minimodel import paged_attention_hopper as ph
from minimodel.paged_attention import paged_decode

B, N, HQ, HKV, D, BS = 64, 4096, 32, 1, 128, 16


def main(args):
    q, k, v = core.qkv(B, HQ, HKV, N, D)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [N] * B, BS)
    shipped = lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=N)  # noqa
    if args.ncu:
        for _ in range(5):
            shipped()
        torch.cuda.synchronize()
        return
    splits = ph.splits16(B, HKV, HQ // HKV, N, torch.cuda.get_device_properties(0).multi_processor_count)
    space = pa._workspace(q.device, B, HQ, splits, D, B * HKV, True)
    kept = tuple(t.clone() for t in space)

    def on_kept():
        o, _ = pa._launch_decode(q, k_pool, v_pool, table, lens_t, n_k=0,
                                 strides_k=k_pool.stride(), strides_v=v_pool.stride(),
                                 block_size=BS, n_kv_heads=HKV, max_context_len=N,
                                 num_splits=None, window=None, tau=D**-0.5, workspace=kept,
                                 with_lse=False)
        return o
    fns = {"shipped": shipped, "kept_counters": on_kept,
           "cudnn": lambda: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0]}
    base = fns["cudnn"]().float()
    recs = {}
    for name, fn in fns.items():
        diff = (fn().float() - base).abs().max().item()
        print(name, diff, flush=True)
        recs[name] = {"impl": name, "max_diff_vs_cudnn": diff}
    core.in_turns(recs, fns, 5, must_capture=True)
    core.save(Path(args.out), {"environment": core.environment(), "splits": splits,
                               "records": list(recs.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", default="h16-probe.json")
    main(ap.parse_args())

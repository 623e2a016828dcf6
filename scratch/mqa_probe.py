"""Issue 23 study: where MQA decode's time goes at
the issue's shape (B = 64, 4,096 keys, 32 query heads, one kv head, d = 128, fp16, blocks of 16
in random order): the decode kernel's tile (BLOCK_N, warps, stages), the group's chunking
(DECODE_MAX_GROUP_ROWS) and the split count, each against SDPA-cuDNN in one run, CUDA-graph
replays in turns, every output checked first (bench.core.checked).

    PYTHONPATH=src:. python scratch/mqa_probe.py --out $OUT/mqa-probe-h200.json   # ~2 min

Shipped today (data/mqa-decode-h200.json): G_max 64 (one chunk of 32 rows), 64-key tiles, 4
warps, 3 stages, the default split: 0.69x cuDNN; G_max 16: 0.79x.

Run at f7debc4 (data/mqa-probe-h200.log; the JSON was lost to a save bug, mended since): cuDNN
~44 us; the shipped configuration 63.1 us (0.70x); the fastest 55.2-55.8 us (0.79-0.80x):
128-key tiles, 4 warps, 2 or 3 stages, G_max 32 or 64, and 16-row chunks with 64-key tiles
(55.2-56.0 us): the best of 44 configurations cluster at 56 us whatever the tile, so the tile is
not what is left.
Forced splits of 2, 4, 8 and 16: 58.4 us at best. scratch/mqa_profile.py looks kernel by kernel.
"""

import argparse
import itertools
from pathlib import Path
from unittest import mock

import torch

from bench import core
from bench.mqa_decode import BLOCK_SIZE, HKV, D, launch_shape
from bench.paged_decode import sdpa_fn
from minimodel import paged_attention as pa
from minimodel.roofline import kv_cache_bytes

B, N, HQ = 64, 4096, 32
# (G_max, BLOCK_N, warps, stages, splits or None for the default)
CONFIGS = [(64, 64, 4, 3, None), (16, 64, 4, 3, None)]
CONFIGS += [(g, n, w, s, None) for g, n, w, s in itertools.product(
    (16, 32, 64), (32, 64, 128), (4, 8), (2, 3)) if (g, n, w, s) not in [c[:4] for c in CONFIGS]]
CONFIGS += [(g, 64, 4, 3, splits) for g in (16, 64) for splits in (2, 4, 8, 16)]


def variant(cfg, args):
    g_max, block_n, warps, stages, splits = cfg

    def fn():
        with mock.patch.object(pa, "DECODE_MAX_GROUP_ROWS", g_max), mock.patch.object(
                pa, "decode_config", lambda *a: pa.DecodeConfig(block_n, warps, stages)):
            return pa.paged_decode(*args, max_context_len=N, num_splits=splits)
    return fn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    a = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = core.randn(B, HQ, D, generator=gen)
    k, v = (core.randn(B, HKV, N, D, generator=gen) for _ in "kv")
    kp, vp, table, lens = core.paged_cache(k, v, [N] * B, BLOCK_SIZE)
    nbytes = kv_cache_bytes(1, HKV, D, N, batch=B)
    refs, budget = core.reference(q, k, v, (0, B - 1)), core.pytorch_error(q, k, v, (0, B - 1))
    fns, recs = {}, {}
    for cfg in CONFIGS:
        name = "g{}_n{}_w{}_s{}_splits{}".format(*cfg)
        fn = variant(cfg, (q, kp, vp, table, lens))
        try:
            err = core.checked(name, fn, refs, budget, "")
        except Exception as e:  # a tile that does not compile: dropped, said
            print(name, "failed:", type(e).__name__, str(e)[:160], flush=True)
            continue
        fns[name] = fn
        recs[name] = {"impl": name, "max_err": err, **launch_shape(B, N, HQ, cfg[0])}
        recs[name] |= {"block_n": cfg[1], "warps": cfg[2], "stages": cfg[3],
                       "splits": cfg[4] or recs[name]["splits"]}
    cudnn, _ = sdpa_fn(q[:, :, None], k, v)
    fns["sdpa_cudnn"], recs["sdpa_cudnn"] = cudnn, {"impl": "sdpa_cudnn"}
    core.in_turns(recs, fns, a.rounds, must_capture=True)
    cudnn_ms = recs["sdpa_cudnn"]["graph_ms"]
    for rec in sorted(recs.values(), key=lambda r: r["graph_ms"]):
        core.rates(rec, nbytes)["vs_cudnn"] = cudnn_ms / rec["graph_ms"]
        print(f"{rec['impl']:32s} {rec['graph_ms'] * 1e3:7.1f} us {rec['vs_cudnn']:.2f}x cuDNN",
              flush=True)
    if a.out:
        core.save(a.out, {"environment": core.environment(), "timing": core.GRAPH_TIMING,
                          "records": list(recs.values())})


if __name__ == "__main__":
    main()

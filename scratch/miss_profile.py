"""Issue 22: cProfile of attention decode calls that miss their plan (a new cache length at
every call), against calls that hit it. PYTHONPATH=src:. python scratch/miss_profile.py"""
import cProfile
import itertools
import pstats
import time

import torch

from minimodel.attention import attention
from minimodel.kernels import MAX_PLANS

q = torch.randn(1, 32, 1, 128, dtype=torch.float16, device="cuda")
k, v = (torch.randn(1, 8, 4096, 128, dtype=torch.float16, device="cuda") for _ in "kv")
views = itertools.cycle([(k[:, :, : 4096 - i], v[:, :, : 4096 - i]) for i in range(MAX_PLANS + 1)])
miss = lambda: attention(q, *next(views))  # noqa: E731
hit = lambda: attention(q, k, v)  # noqa: E731
for name, fn in (("hit", hit), ("miss", miss)):
    for _ in range(600):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        fn()
    wall = (time.perf_counter() - t) / 2000 * 1e6
    torch.cuda.synchronize()
    print(f"{name}: {wall:.1f} us per call (wall, eager, no profiler)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)

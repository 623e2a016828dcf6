"""Decode study: does loading the next tile's table entries one iteration ahead let Triton's
pipeliner keep more K/V tiles in flight? The shipped loop loads a tile's entries and then its
keys in the same iteration, so the pipeliner puts the entries in one stage and the tile in the
next (Lab 03 part 2, "Tiles and the pipeline"). The variant carries the next tile's entries in
the loop state. Written out as a copy of minimodel.paged_attention with the loop's entry load
replaced (scratch/_pa_prefetch.py, made at run time), both timed on the same inputs: MQA
(B = 64, 4k keys, 32 query heads, one kv head), GQA 32/8 at B = 64, 4k, the ragged batch, and
B = 1, 32k; cuDNN beside where it runs. CUDA-graph replays in turns, outputs checked first.

    PYTHONPATH=src:. python scratch/prefetch_probe.py
"""

import importlib
import sys
from pathlib import Path

from bench import core
from bench.paged_decode import Decode, inputs, kv_bytes, sdpa_fn
from minimodel import paged_attention as pa

OLD = """                blk = start_n // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
                entry = tl.load(table + blk * stride_tc, mask=blk * BLOCK_SIZE < end, other=0)
"""
NEW = """                entry = entry_next
                blk = (start_n + BLOCK_N) // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
                entry_next = tl.load(table + blk * stride_tc, mask=blk * BLOCK_SIZE < end,
                                     other=0)
"""
LOOP = """    for start_n in tl.range(start, end, BLOCK_N):
        j = start_n + offs_n  # key positions of this tile
"""
PRE = (
    """    if PAGED:
        if BLOCK_SIZE < BLOCK_N:
            blk0 = start // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
            entry_next = tl.load(table_ptr + b64 * stride_tb + blk0 * stride_tc,
                                 mask=blk0 * BLOCK_SIZE < end, other=0)
"""
    + LOOP
)


def variant():
    src = Path(pa.__file__).read_text()
    assert src.count(OLD) == 1 and src.count(LOOP) == 1
    path = Path(__file__).with_name("_pa_prefetch.py")
    path.write_text(src.replace(OLD, NEW).replace(LOOP, PRE))
    sys.path.insert(0, str(path.parent))
    return importlib.import_module("_pa_prefetch")


def main() -> None:
    pf = variant()
    cases = [
        Decode("heads", 64, 4096, hkv=1),
        Decode("b64", 64, 4096),
        Decode("mixed", 64, 8192),
        Decode("b1", 1, 32768),
    ]
    fns, recs, impls = {}, {}, {}
    copy = core.copy_rate()
    for case in cases:
        q, k, v, lens = inputs(case)
        kp, vp, table, lens_t = core.paged_cache(k, v, lens, 16)
        refs = core.reference(q, k, v, (0, case.b - 1), lens)
        nb = kv_bytes(case, lens)
        name = f"{case.group}{case.b}_{case.ctx}_hkv{case.hkv}"
        for tag, mod in (("shipped", pa), ("prefetch", pf)):

            def fn(m=mod, a=(q, kp, vp, table, lens_t), n=max(lens)):  # noqa: B008
                return m.paged_decode(*a, max_context_len=n)

            err = core.max_error(fn(), refs)
            assert err < 1e-2, (name, tag, err)
            fns[f"{name}_{tag}"] = fn
            recs[f"{name}_{tag}"] = {"impl": f"{name}_{tag}", "nb": nb}
        if len(set(lens)) == 1:
            fns[f"{name}_sdpa_cudnn"] = sdpa_fn(q[:, :, None], k, v)[0]
            recs[f"{name}_sdpa_cudnn"] = {"impl": f"{name}_sdpa_cudnn", "nb": nb}
            impls[f"{name}_sdpa_cudnn"] = "sdpa_cudnn"
    core.in_turns(recs, fns, 3, impls=impls, must_capture=True)
    for name, rec in recs.items():
        rate = rec["nb"] / rec["graph_ms"] / 1e6 * 1e9 / copy
        print(f"{name:34s} {rec['graph_ms'] * 1e3:7.1f} us {rate:6.1%} of copy")


if __name__ == "__main__":
    main()

"""Decode study: what the longest-first order costs where it cannot help. The bench.paged_decode
run at b1914c4 found the B = 16 rows (uniform lengths, 5 splits) 18-21% slower through blocks
of 16 than before the order, while B = 64 rows were not. Variants, each a copy of
minimodel.paged_attention written out at run time (scratch/_pa_<name>.py): the shipped sort
(tl.sort over max(16, 2^ceil(log2 B)) entries), no order, the sort over at least 64 entries,
and a rank by counting (a BLOCK_B x BLOCK_B comparison, no tl.sort). CUDA-graph replays in
turns, outputs checked first.

    PYTHONPATH=src:. python scratch/sort_probe.py
"""

import importlib
import sys
from pathlib import Path

from bench import core
from bench.paged_decode import Decode, inputs, kv_bytes
from minimodel import paged_attention as pa

WIDTH = "    longest_first = (max(16, next_power_of_2(b))\n"
SORT = """    key = tl.sort(tl.where(ib < batch, key, -1), descending=True)
    mine = tl.max(tl.where(ib == rank, key, -1), 0)  # rank < batch: a real sequence's key
    return BLOCK_B - 1 - mine % BLOCK_B
"""
COUNT = """    key = tl.where(ib < batch, key, -1)
    above = tl.sum((key[None, :] > key[:, None]).to(tl.int32), 1)  # keys above each key
    return tl.max(tl.where(above == rank, ib, -1), 0)
"""
VARIANTS = {
    "nosort": [(WIDTH, "    longest_first = (0 * max(16, next_power_of_2(b))\n")],
    "sort64": [(WIDTH, "    longest_first = (max(64, next_power_of_2(b))\n")],
    "count": [(SORT, COUNT)],
    "count64": [(SORT, COUNT), (WIDTH, "    longest_first = (max(64, next_power_of_2(b))\n")],
}


def variant(name):
    src = Path(pa.__file__).read_text()
    for old, new in VARIANTS[name]:
        assert src.count(old) == 1, (name, old)
        src = src.replace(old, new)
    path = Path(__file__).with_name(f"_pa_{name}.py")
    path.write_text(src)
    sys.path.insert(0, str(path.parent))
    return importlib.import_module(f"_pa_{name}")


def main() -> None:
    mods = {"shipped": pa, **{n: variant(n) for n in VARIANTS}}
    cases = [
        Decode("window", 16, 32768, window=4096),
        Decode("window", 16, 32768),
        Decode("window", 16, 4096),
        Decode("mixed", 64, 8192),
        Decode("b64", 64, 4096),
    ]
    fns, recs = {}, {}
    copy = core.copy_rate()
    for case in cases:
        q, k, v, lens = inputs(case)
        kp, vp, table, lens_t = core.paged_cache(k, v, lens, 16)
        refs = core.reference(q, k, v, (0, case.b - 1), lens, case.window)
        nb = kv_bytes(case, lens)
        for tag, mod in mods.items():
            name = f"{case.group}{case.b}_{case.ctx}_w{case.window}_{tag}"

            def fn(m=mod, a=(q, kp, vp, table, lens_t), n=max(lens), w=case.window):  # noqa: B008
                return m.paged_decode(*a, max_context_len=n, window=w)

            err = core.max_error(fn(), refs)
            assert err < 1e-2, (name, err)
            fns[name], recs[name] = fn, {"impl": name, "nb": nb}
    core.in_turns(recs, fns, 3, must_capture=True)
    for name, rec in recs.items():
        rate = rec["nb"] / rec["graph_ms"] / 1e6 * 1e9 / copy
        print(f"{name:34s} {rec['graph_ms'] * 1e3:7.1f} us {rate:6.1%} of copy")


if __name__ == "__main__":
    main()

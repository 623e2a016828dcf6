"""Ragged decode study: does the order in which a ragged batch's programs start decide its
tail? B = 64, lengths 1..8,192 (and 1..16,384) as bench.paged_decode draws them, GQA 32/8,
d = 128, fp16, blocks of 16 in random order; the batch as drawn, sorted longest first and
shortest first, at forced split counts; uniform 4k at 1 and 2 splits beside. CUDA-graph
replays in turns, every output checked first; rates against the copy rate.

    PYTHONPATH=src:. python scratch/ragged_probe.py --out $OUT/ragged-probe-h200.json

Run at f04159c (before the kernel started programs longest first; data/ragged-probe-h200.log, the
round lines as printed: the run ended on a KeyError before its table and JSON, mended since).
Since the kernel sorts (LONGEST_FIRST), the three orders of a split call run alike.
"""

import argparse
import json
from pathlib import Path

import torch

from bench import core
from bench.paged_decode import Decode, inputs, kv_bytes
from minimodel import paged_attention as pa


def variants(case: Decode, orders: tuple[str, ...], splits: list[int]) -> list[tuple]:
    q, k, v, lens = inputs(case)
    out = []
    for order in orders:
        idx = list(range(case.b))
        if order == "desc":
            idx.sort(key=lambda i: -lens[i])
        elif order == "asc":
            idx.sort(key=lambda i: lens[i])
        sel = torch.tensor(idx, device="cuda")
        q2, k2, v2, lens2 = q[sel], k[sel], v[sel], [lens[i] for i in idx]
        kp, vp, table, lens_t = core.paged_cache(k2, v2, lens2, 16)
        refs = core.reference(q2, k2, v2, (0, case.b - 1), lens2)
        for s in splits:
            name = f"{case.group}{case.ctx}_{order}_splits{s}"

            def fn(a=(q2, kp, vp, table, lens_t), s=s, m=max(lens2)):  # noqa: B008
                return pa.paged_decode(*a, max_context_len=m, num_splits=s)

            out.append((name, fn, refs, kv_bytes(case, lens2), order, s, case))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    todo = variants(Decode("mixed", 64, 8192), ("drawn", "desc", "asc"), [1, 2, 3, 4, 6, 8, 12, 16])
    todo += variants(Decode("mixed", 64, 16384), ("drawn", "desc"), [1, 2, 4, 8, 16])
    todo += variants(Decode("b64", 64, 4096), ("drawn",), [1, 2, 4])
    fns, recs, nb = {}, {}, {}
    for name, fn, refs, nbytes, order, s, case in todo:
        err = core.max_error(fn(), refs)
        assert err < 1e-2, (name, err)
        fns[name], nb[name] = fn, nbytes
        recs[name] = {
            "impl": name,
            "order": order,
            "splits": s,
            "ctx": case.ctx,
            "group": case.group,
            "max_err": err,
            "kv_bytes": nbytes,
        }
    copy = core.copy_rate()
    core.in_turns(recs, fns, a.rounds, must_capture=True)
    for name, rec in recs.items():
        if "graph_ms" not in rec:
            print("no graph time:", rec)
            continue
        core.rates(rec, nb[name])
        rec["of_copy"] = rec["graph_gb_per_s"] * 1e9 / copy
        print(f"{name:28s} {rec['graph_ms'] * 1e3:7.1f} us  {rec['of_copy']:.3f} of copy")
    if a.out:
        a.out.write_text(
            json.dumps(
                {
                    "environment": core.environment(),
                    "copy_bytes_per_s": copy,
                    "records": list(recs.values()),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()

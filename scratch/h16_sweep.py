"""Issue 23: the shipped 16-bit Hopper decode (paged_attention_hopper, "Large groups on Hopper")
at MQA B = 64, 4,096 keys, 32 query heads on one kv head, d = 128, across stages and split counts,
beside cuDNN and the Triton kernel; graph-timed in turns. A probe of settings, not shipped.

    PYTHONPATH=src:. python scratch/h16_sweep.py --out $OUT/h16-sweep-h200.json
"""

import argparse
from pathlib import Path
from unittest import mock

from bench import core
from minimodel import paged_attention as pa
from minimodel import paged_attention_hopper as ph
from minimodel.paged_attention import paged_decode

B, N, HQ, HKV, D, BS = 64, 4096, 32, 1, 128, 16


def main(out: str, stages=(2, 3), splits=(None, 2, 4, 8), shapes=((64, 4096, 32),)):
    records, fns = {}, {}
    for b, n, hq in shapes:
        q, k, v = core.qkv(b, hq, HKV, n, D)
        k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [n] * b, BS)
        tag = f"b{b}_n{n}_hq{hq}"

        def call(st=None, sp=None, hopper=True, q=q, k_pool=k_pool, v_pool=v_pool, table=table,
                 lens_t=lens_t, n=n):
            pa._DECODE_PLANS.clear()
            with (mock.patch.object(ph, "STAGES16", st or ph.STAGES16),
                  mock.patch.object(pa, "HOPPER_16", hopper)):
                return paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=n,
                                    num_splits=sp)
        fns[f"{tag}_triton"] = lambda call=call: call(hopper=False)
        fns[f"{tag}_cudnn"] = lambda q=q, k=k, v=v: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0]
        for st in stages:
            for sp in splits:
                fns[f"{tag}_h16_s{st}_split{sp or 'rule'}"] = (
                    lambda st=st, sp=sp, call=call: call(st, sp))
        base = fns[f"{tag}_cudnn"]().float()
        for name, fn in list(fns.items()):
            if not name.startswith(tag):
                continue
            diff = (fn().float() - base).abs().max().item()
            print(f"{name}: max diff vs cuDNN {diff:.2e}", flush=True)
            records[name] = {"impl": name, "b": b, "ctx": n, "hq": hq, "max_diff_vs_cudnn": diff}
            if diff > 1e-2:
                del fns[name]
    core.in_turns({k: records[k] for k in fns}, fns, 3, must_capture=True)
    for r in records.values():
        if "graph_ms" in r:
            print(f"{r['impl']}: {r['graph_ms'] * 1e3:.1f} us", flush=True)
    core.save(Path(out), {"environment": core.environment(), "copy_bytes_per_s": core.copy_rate(),
                          "records": list(records.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h16-sweep.json")
    ap.add_argument("--stages", default="2,3")
    ap.add_argument("--splits", default="0,2,4,8", help="0: the rule's")
    ap.add_argument("--shapes", default="64x4096x32,256x2048x64", help="B x keys x Hq, ...")
    a = ap.parse_args()
    main(a.out, tuple(int(x) for x in a.stages.split(",")),
         tuple(int(x) or None for x in a.splits.split(",")),
         tuple(tuple(int(x) for x in sh.split("x")) for sh in a.shapes.split(",")))

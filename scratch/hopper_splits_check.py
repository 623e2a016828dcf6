"""Issue 27: the shipped Hopper kernel's split rule (paged_attention_hopper.hopper_splits) checked
end to end on the H200, at the shapes of data/gluon-paged-sweep-h200.json's sweep (GQA 32/8, d = 128,
blocks of 16, q float16): paged_decode's fast path with the rule's split count against the same
call forced to 1, 2, 4 and 8 splits, and the Triton kernel (HOPPER_FP8 off); CUDA-graph replays
in turns, each output checked first against the rule's.

    PYTHONPATH=src:scratch:. python scratch/hopper_splits_check.py --out $OUT/x.json

--bf16: at bench.fp8_decode's shape, the 8-bit cache read with q in bfloat16 (the Hopper kernel,
and the Triton kernel) beside q in float16, and the 16-bit step on bfloat16 pools; each output's
largest difference from the float16-q Hopper call's recorded, not asserted (a bfloat16 q and O
round at 2^-9).
"""

import argparse
from pathlib import Path
from unittest import mock

import torch

import bench.fp8_decode as fd
from bench import core
from minimodel import paged_attention as pa
from minimodel import paged_attention_hopper as ph
from minimodel.kernels import num_sms


def main(out_path):
    cases = []
    for b, n in ((8, 4096), (8, 32768), (64, 1024), (64, 4096), (64, 16384), (256, 4096)):
        fd.B, fd.N = b, n
        c = fd.cache()
        assert ph.fits(c.q, c.k_pool8, c.v_pool8, c.k_scale, c.v_scale)
        rule = ph.hopper_splits(b, fd.HKV, n, num_sms(c.q.device))
        call = lambda c=c, n=n, s=None: pa.paged_decode(
            c.q, c.k_pool8, c.v_pool8, c.table, c.lens_t, max_context_len=n, num_splits=s,
            k_scale=c.k_scale, v_scale=c.v_scale)
        fns = {"rule": call, **{f"splits{s}": (lambda s=s, call=call: call(s=s))
                                for s in (1, 2, 4, 8)}}
        fns["triton"] = mock.patch.object(pa, "HOPPER_FP8", False)(call)
        base = call()
        records = {}
        for name, fn in fns.items():
            diff = (fn().float() - base.float()).abs().max().item()
            records[name] = {"impl": name, "max_diff_vs_rule": diff}
        core.in_turns(records, fns, 2, must_capture=True)
        us = {k: round(r["graph_ms"] * 1e3, 1) for k, r in records.items()}
        print(f"B={b} N={n} rule={rule}: {us}", flush=True)
        cases.append({"batch": b, "keys": n, "rule_splits": rule,
                      "records": list(records.values())})
        del c, fns, base
        torch.cuda.empty_cache()
    core.save(Path(out_path), {"environment": core.environment(),
                               "copy_bytes_per_s": core.copy_rate(), "cases": cases})


def bf16(out_path):
    c = fd.cache()
    s8 = {"k_scale": c.k_scale, "v_scale": c.v_scale}
    qb = c.q.bfloat16()
    kb, vb = c.k_pool16.bfloat16(), c.v_pool16.bfloat16()
    fast = {"max_context_len": fd.N}
    assert ph.fits(qb, c.k_pool8, c.v_pool8, c.k_scale, c.v_scale)
    fp8 = lambda q: pa.paged_decode(q, c.k_pool8, c.v_pool8, c.table, c.lens_t, **fast, **s8)
    fns = {
        "hopper_fp16q": lambda: fp8(c.q),
        "hopper_bf16q": lambda: fp8(qb),
        "triton_bf16q": mock.patch.object(pa, "HOPPER_FP8", False)(lambda: fp8(qb)),
        "bf16_paged": lambda: pa.paged_decode(qb, kb, vb, c.table, c.lens_t, **fast),
        "fp16_paged": lambda: pa.paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t,
                                              **fast),
    }
    base = fns["hopper_fp16q"]()
    records = {}
    for name, fn in fns.items():
        diff = (fn().float() - base.float()).abs().max().item()
        records[name] = {"impl": name, "max_diff_vs_hopper_fp16q": diff}
    core.in_turns(records, fns, 3, must_capture=True)
    print({k: round(r["graph_ms"] * 1e3, 1) for k, r in records.items()}, flush=True)
    core.save(Path(out_path), {"environment": core.environment(), "batch": fd.B, "keys": fd.N,
                               "copy_bytes_per_s": core.copy_rate(),
                               "records": list(records.values())})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="hopper-splits.json")
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    bf16(a.out) if a.bf16 else main(a.out)

"""Issue 27: the shipped Hopper kernel's split rule (paged_attention_hopper.hopper_splits) checked
end to end on the H200, at the shapes of scratch/gluon_paged.py's sweep (GQA 32/8, d = 128,
blocks of 16, q float16): paged_decode's fast path with the rule's split count against the same
call forced to 1, 2, 4 and 8 splits, and the Triton kernel (HOPPER_FP8 off); CUDA-graph replays
in turns, each output checked first against the rule's.

    PYTHONPATH=src:scratch:. python scratch/hopper_splits_check.py --out $OUT/x.json
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="hopper-splits.json")
    main(ap.parse_args().out)

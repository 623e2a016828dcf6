"""Issues 23 and 27 study: the shipped decode kernel with one or two warps a program.

scratch/tma_decode.py's probe ran fastest with one warp a program (tma-probe-h200.json: the
8-bit step 174.5 us at one warp, 240 at two, 332 at four): with BLOCK_G = 16 query rows, every
warp of a 4-warp program repeats the tile's per-key work, so the instructions a key fall with
the warps. data/fp8-sweep-h200.json never tried the shipped kernel with one warp, nor two
warps with tiles past 16 keys. This sweeps decode_config (tile, warps, stages) and
PROGRAMS_PER_SM on the shipped kernel at bench.fp8_decode's shape (8- and 16-bit) and at
issue 23's MQA shape, graph replays in turns, each output checked against the shipped
config's.

    PYTHONPATH=src:scratch:. python scratch/warps_probe.py --out $OUT/warps-probe-h200.json  # GPU
"""

import argparse
from pathlib import Path
from unittest import mock

from bench import core
from bench.fp8_decode import cache
from minimodel import paged_attention as pa
from minimodel.paged_attention import paged_decode

B, N, HQ, D, BS = 64, 4096, 32, 128, 16


def with_config(fn, cfg, pps=None, g_max=None):
    """fn run with decode_config returning cfg (and PROGRAMS_PER_SM, DECODE_MAX_GROUP_ROWS)."""

    def call():
        patches = [mock.patch.object(pa, "decode_config", lambda *a: pa.DecodeConfig(*cfg))]
        if pps:
            patches.append(mock.patch.object(pa, "PROGRAMS_PER_SM", pps))
        if g_max:
            patches.append(mock.patch.object(pa, "DECODE_MAX_GROUP_ROWS", g_max))
        for p in patches:
            p.start()
        try:
            return fn()
        finally:
            for p in patches:
                p.stop()

    return call


def main(out):
    c = cache()
    fp8 = lambda: paged_decode(
        c.q,
        c.k_pool8,
        c.v_pool8,
        c.table,
        c.lens_t,
        max_context_len=N,
        k_scale=c.k_scale,
        v_scale=c.v_scale,
    )
    fp16 = lambda: paged_decode(c.q, c.k_pool16, c.v_pool16, c.table, c.lens_t, max_context_len=N)
    q, k, v = core.qkv(B, HQ, 1, N, D)
    k_pool, v_pool, table, lens_t = core.paged_cache(k, v, [N] * B, BS)
    mqa = lambda: paged_decode(q, k_pool, v_pool, table, lens_t, max_context_len=N)
    fns = {
        "fp8 shipped": fp8,
        "fp16 shipped": fp16,
        "mqa shipped": mqa,
        "mqa sdpa_cudnn": lambda: core.sdpa_cudnn(q[:, :, None], k, v)[:, :, 0],
    }
    for bn in (32, 64, 128):
        for w in (1, 2):
            for st in (2, 3):
                fns[f"fp8 {bn}/{w}/{st}"] = with_config(fp8, (bn, w, st))
    for pps in (8, 16):
        fns[f"fp8 64/1/3 pps{pps}"] = with_config(fp8, (64, 1, 3), pps)
        fns[f"fp8 128/1/3 pps{pps}"] = with_config(fp8, (128, 1, 3), pps)
    for bn in (32, 64):
        for w in (1, 2):
            for st in (2, 3):
                fns[f"fp16 {bn}/{w}/{st}"] = with_config(fp16, (bn, w, st))
    for bn in (32, 64):
        for st in (2, 3):
            fns[f"mqa {bn}/2/{st}"] = with_config(mqa, (bn, 2, st))
            fns[f"mqa {bn}/1/{st} g16"] = with_config(mqa, (bn, 1, st), g_max=16)
            fns[f"mqa {bn}/2/{st} g16"] = with_config(mqa, (bn, 2, st), g_max=16)
    base = {k: fns[f"{k} shipped"]() for k in ("fp8", "fp16", "mqa")}
    records = {}
    for name, fn in list(fns.items()):
        try:
            diff = (fn().float() - base[name.split()[0]].float()).abs().max().item()
        except Exception as e:  # a config that fails to compile or launch is reported, not timed
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            del fns[name]
            continue
        records[name] = {"impl": name, "max_diff_vs_shipped": diff}
    core.in_turns(records, fns, 2, must_capture=True)  # graph_ms: the median of the rounds
    for r in records.values():
        print(
            f"{r['impl']:24s} {r['graph_ms'] * 1e3:7.1f} us  diff {r['max_diff_vs_shipped']:.1e}",
            flush=True,
        )
    copy = core.copy_rate()
    print(f"copy {copy / 1e9:.0f} GB/s", flush=True)
    core.save(
        Path(out),
        {
            "environment": core.environment(),
            "copy_bytes_per_s": copy,
            "records": list(records.values()),
        },
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="warps-probe.json")
    main(ap.parse_args().out)

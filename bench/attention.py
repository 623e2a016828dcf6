"""The forward grid (Results, "FlashAttention forward on the H200"): minimodel's two Flash kernels
(Lab 02's, `minimodel`, and the Hopper kernel, `minimodel_hopper`) against SDPA's backends,
FlexAttention under torch.compile and naive attention, in one process on the same inputs; groups
`fa2` (FlashAttention-2's grid), `d256`, `gqa`, `window`. figures/bench.py reads the file.

    python -m bench.attention --out data/bench-attention-h200.json     # every group
    python -m bench.attention --out /tmp/x.json --quick     # a few shapes, for a smoke run

    # the same data in two calls of under 6 minutes each, the second merging into the first's
    # file: every case's records still come from one process and one set of inputs
    python -m bench.attention --out /tmp/a.json --groups fa2
    python -m bench.attention --out data/bench-attention-h200.json \\
        --groups d256,gqa,window --merge /tmp/a.json
"""

import dataclasses
import functools
import json
import math
import multiprocessing as mp
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from bench import core
from bench.core import DATA, SDPA, arguments, environment, error, save, sdpa
from minimodel.attention_flash import flash_attention
from minimodel.attention_flash_hopper import MAX_HEAD_DIM, flash_attention_hopper
from minimodel.reference import visible_mask
from minimodel.roofline import attention_flops

OURS = ("minimodel", "minimodel_hopper")  # an error of these fails the run
IMPLS = [*OURS, *SDPA, "flex", "naive"]
GROUPS = ["fa2", "d256", "gqa", "window"]
WORKERS, ROUNDS = 12, 2  # compiling processes; timing rounds over all implementations of a case


@dataclasses.dataclass(frozen=True)
class Case:
    group: str  # "fa2" (FlashAttention-2's grid), "gqa", "window"
    dtype: str
    b: int
    hq: int
    hkv: int
    n: int
    d: int
    causal: bool
    window: int | None = None

    @property
    def flops(self) -> int:
        return attention_flops(
            self.b, self.hq, self.n, self.n, self.d, causal=self.causal, window=self.window
        )


def cases(quick: bool, groups: list[str] = GROUPS) -> list[Case]:
    lengths = [2048] if quick else [512, 1024, 2048, 4096, 8192, 16384]
    dims = [d for g, d in (("fa2", 64), ("fa2", 128), ("d256", 256)) if g in groups]
    out = [
        Case("fa2", dt, 16384 // n, 2048 // d, 2048 // d, n, d, causal)
        for dt in (["float16"] if quick else ["float16", "bfloat16"])
        for d in dims
        for causal in (False, True)
        for n in lengths
    ]
    if "gqa" in groups:
        out += [
            Case("gqa", "float16", 16384 // n, 32, hkv, n, 128, causal)
            for n in (2048, 8192)
            for causal in (False, True)
            for hkv in (32, 8)
        ]
    if "window" in groups:
        out += [Case("window", "float16", 1, 16, 16, 16384, 128, True, w) for w in (None, 4096)]
    return out


def case_key(rec: dict) -> tuple:
    """What identifies a case in a record (every field of Case)."""
    return tuple(rec[f.name] for f in dataclasses.fields(Case))


def inputs(case: Case):
    g, dt = torch.Generator(device="cuda").manual_seed(0), getattr(torch, case.dtype)
    shapes = [(case.b, h, case.n, case.d) for h in (case.hq, case.hkv, case.hkv)]
    return [torch.randn(s, device="cuda", generator=g, dtype=dt) for s in shapes]


@functools.cache
def compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def make_fn(impl: str, case: Case, q, k, v):
    """A no-argument callable running `impl` on (q, k, v), or raise if it does not apply."""
    gqa, w = case.hkv != case.hq, case.window
    if impl in OURS:
        kernel = flash_attention if impl == "minimodel" else flash_attention_hopper
        return functools.partial(kernel, q, k, v, causal=case.causal, window=w)
    if impl in SDPA:
        if w is not None:
            raise NotImplementedError("SDPA has no sliding-window argument")
        sdpa_call = F.scaled_dot_product_attention
        return functools.partial(sdpa_call, q, k, v, is_causal=case.causal, enable_gqa=gqa)
    if impl == "flex":
        mask_mod = None
        if case.causal and w is None:
            mask_mod = lambda b, h, qi, ki: qi >= ki
        elif case.causal:
            mask_mod = lambda b, h, qi, ki: (qi >= ki) & (qi - ki < w)
        block_mask = mask_mod and create_block_mask(
            mask_mod, None, None, case.n, case.n, device="cuda"
        )
        return functools.partial(compiled_flex(), q, k, v, block_mask=block_mask, enable_gqa=gqa)
    if impl == "naive":
        mask = case.causal and visible_mask(case.n, case.n, causal=True, window=w, device="cuda")

        def naive():
            g = case.hq // case.hkv
            kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            s = (q @ kk.transpose(-1, -2)) * case.d**-0.5
            if case.causal:
                s = s.masked_fill(~mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ vv

        return naive
    raise ValueError(f"unknown implementation {impl!r}")


def run_once(impl: str, case: Case, q, k, v):
    """(fn, fn()): SDPA under its backend, with the reasons SDPA gives as warnings when it
    refuses a case added to the error ("No available kernel" alone does not say why)."""
    fn = make_fn(impl, case, q, k, v)
    with warnings.catch_warnings(record=True) as caught, sdpa(impl):
        warnings.simplefilter("always")
        try:
            return fn, fn()
        except Exception as e:
            reasons = [str(w.message).strip() for w in caught if str(w.message).strip()]
            if impl in SDPA and reasons:
                why = " | ".join(dict.fromkeys(r.splitlines()[0] for r in reasons))
                raise RuntimeError(f"{error(e, 10**6)} [{why}]") from e
            raise


def warm(case: Case, impls: tuple[str, ...] = ("minimodel", "flex")) -> str:
    """Worker: compile our kernels (all autotune configs) and Flex's kernels for one case."""
    torch._dynamo.config.recompile_limit = 10_000
    q, k, v = inputs(case)
    errors = []
    for impl in impls:
        try:
            run_once(impl, case, q, k, v)
        except Exception as e:  # noqa: BLE001 - the timing phase records it
            errors.append(f"{impl}: {type(e).__name__}")
    torch.cuda.synchronize()
    return "; ".join(errors) or "ok"


def measure(case: Case, impls: list[str], run: int) -> list[dict]:
    """Every implementation at one case: each output against the float32 reference first, then
    ROUNDS eager timing rounds, all implementations in turn in each."""
    q, k, v = inputs(case)
    recs, fns = {}, {}
    for impl in impls:
        rec = recs[impl] = {**dataclasses.asdict(case), "impl": impl, "flops": case.flops}
        rec |= {"run": run, "ms_runs": []}
        if impl == "minimodel_hopper" and case.d > MAX_HEAD_DIM:  # not run: the contract says
            rec["error"] = f"outside the kernel's contract: d={case.d} > {MAX_HEAD_DIM}"
            rec["outside_contract"] = True
            continue
        try:
            fns[impl], out = run_once(impl, case, q, k, v)
            mask = {"causal": case.causal, "window": case.window}  # the first two kv heads' groups
            rec["max_err"] = core.group_error(out, q, k, v, min(case.hkv, 2), **mask)
            del out
        except Exception as e:  # noqa: BLE001 - unsupported combinations are data too
            rec["error"] = error(e, 400)
        torch.cuda.empty_cache()
    core.in_turns(recs, fns, ROUNDS, eager=True, graph=False)
    return [core.rates(rec, flops=case.flops) for rec in recs.values()]


def main() -> None:
    parser = arguments(__doc__, quick="a few shapes, for a smoke run")
    for name, known in (("impls", IMPLS), ("groups", GROUPS)):
        parser.add_argument(
            f"--{name}", default=",".join(known), help=f"comma-separated, from {','.join(known)}"
        )
    merge = "start from this data file: its records of the cases measured now are replaced, "
    merge += "the others kept"
    parser.add_argument("--merge", type=Path, metavar="JSON", help=merge)
    args = parser.parse_args()
    impls, groups = args.impls.split(","), args.groups.split(",")
    for name, given, known in (("--impls", impls, IMPLS), ("--groups", groups, GROUPS)):
        if unknown := [x for x in given if x not in known]:
            parser.error(f"{name}: unknown {unknown}; choose from {','.join(known)}")
    if args.merge and not args.merge.exists():
        parser.error(f"--merge: no file {args.merge}")
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA explains every refusal
    torch._dynamo.config.recompile_limit = 10_000  # else Flex silently runs unfused past 8 shapes
    grid = cases(args.quick, groups)

    t0 = time.time()
    compiled = tuple(i for i in ("minimodel", "minimodel_hopper", "flex") if i in impls)
    with mp.get_context("spawn").Pool(WORKERS) as pool:
        warmed = pool.map(functools.partial(warm, impls=compiled), grid)
    t_compile = time.time() - t0
    failing = sum(w != "ok" for w in warmed)
    print(f"compiled {len(grid)} cases in {t_compile:.0f} s ({failing} with errors)", flush=True)

    old = json.loads(args.merge.read_text()) if args.merge else {"runs": [], "records": []}
    run = len(old["runs"])
    records = []
    for i, case in enumerate(grid):
        records += (recs := measure(case, impls, run))
        said = ", ".join(f"{r['impl']} {r.get('tflops', math.nan):.0f}" for r in recs)
        print(f"[{i + 1}/{len(grid)}, {time.time() - t0:.0f} s] {case}: {said}", flush=True)

    env = environment()
    this_run = {"environment": env, "cudnn": torch.backends.cudnn.version(), "groups": groups}
    this_run |= {"impls": impls, "quick": args.quick, "cases": len(grid)}
    this_run |= {"compile_s": round(t_compile), "total_s": round(time.time() - t0)}
    if args.merge:
        measured = {case_key(dataclasses.asdict(c)) for c in grid}
        kept = [r for r in old["records"] if case_key(r) not in measured]
        replaced = len(old["records"]) - len(kept)
        print(f"merged: kept {len(kept)} records of {args.merge}, replaced {replaced}")
        records = kept + records
    ceilings = DATA / "ceilings-h200.json"
    timing = "triton.testing.do_bench median per round, L2 flushed between runs; ms is "
    record = {"environment": env, "runs": [*old["runs"], this_run]}
    record["timing"] = timing + "the median over rounds (ms_runs)"
    record["flops"] = "minimodel.roofline.attention_flops (4 * B * Hq * d * visible pairs)"
    record["ceilings"] = json.loads(ceilings.read_text())["ceilings"] if ceilings.exists() else None
    save(args.out, record | {"records": records})
    assert not any(math.isnan(r.get("tflops", 0.0)) for r in records)
    ours = [r for r in records if r["impl"] in OURS and r.get("run") == run]
    failed = [r for r in ours if "error" in r and not r.get("outside_contract")]
    if failed:
        said = "\n".join(f"{r['impl']} at {case_key(r)}: {r['error']}" for r in failed)
        raise SystemExit(
            f"{len(failed)} runs of our kernels failed (recorded in {args.out}):\n{said}"
        )


if __name__ == "__main__":
    main()

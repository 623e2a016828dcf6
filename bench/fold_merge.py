"""The split decode's merge folded into the decode kernel (one launch a call) against the
two-launch merge, and SDPA-cuDNN, on the same inputs (Lab 03 part 2, "Merging the splits"):
host, GPU (graph replay) and eager time per call (bench.core.call_costs, in turns) of
`minimodel.attention` by its default rule and with the fold on and off, and `decode_contiguous`
with the fold on and off, at bench.host_path's decode shape with 4k, 32k
and 128k keys (FOLD_MAX_KV_BYTES lies between the last two); first, the largest differences of
the two merges over 20 fresh inputs.

    MINIMODEL_COMMIT=<hash> python -m bench.fold_merge --out data/fold-merge-h200.json
"""

import torch

from bench.core import arguments, call_costs, environment, save, sdpa_cudnn
from minimodel import paged_attention as pa
from minimodel.attention import attention
from minimodel.kernels import num_sms
from minimodel.timing import host_time_us

FOLDS = {"attention_folded": True, "attention_two_launches": False}


def with_fold(fn, fold: bool | None):
    """fn with FOLD_MERGE set to `fold` for its call (None: the default rule), as it is
    captured and called; the module's setting restored after. Two assignments, not
    mock.patch, whose own cost would join the host time measured."""

    def call():
        before, pa.FOLD_MERGE = pa.FOLD_MERGE, fold
        try:
            return fn()
        finally:
            pa.FOLD_MERGE = before

    return call


def agreement(q, k, v, tau: float) -> dict:
    """The largest |folded - two launches| over 20 calls on fresh q (and, every fifth, fresh
    k and v), output and lse: 0 or the merge's rounding; anything more is a bug (a partial read
    before its split's stores were visible would give the previous call's values)."""
    worst_o = worst_lse = 0.0
    for i in range(20):
        q.copy_(torch.randn_like(q))
        if i % 5 == 4:
            k.copy_(torch.randn_like(k))
            v.copy_(torch.randn_like(v))
        (o_f, l_f), (o_t, l_t) = (
            pa.decode_contiguous(q, k, v, window=None, tau=tau, fold_merge=fold)
            for fold in (True, False)
        )
        worst_o = max(worst_o, (o_f.float() - o_t.float()).abs().max().item())
        worst_lse = max(worst_lse, (l_f - l_t).abs().max().item())
    return {"max_abs_diff_o": worst_o, "max_abs_diff_lse": worst_lse}


def case(n: int, b: int = 1, hq: int = 32, hkv: int = 8, d: int = 128) -> dict:
    torch.manual_seed(0)
    q = torch.randn(b, hq, 1, d, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(b, hkv, n, d, dtype=torch.float16, device="cuda") for _ in "kv")
    tau = d**-0.5
    block_g, chunks = pa.group_rows(hq // hkv)
    cfg = pa.decode_config(d, 2, block_g)
    splits = pa.choose_num_splits(b, hkv, n, cfg.block_n, num_sms(q.device), chunks)  # default
    print(f"decode B={b} {hq}/{hkv} d={d} N={n}: {splits} splits", flush=True)
    agree = agreement(q, k, v, tau)
    print(f"  agreement {agree}", flush=True)
    fns = {"sdpa_cudnn": lambda: sdpa_cudnn(q, k, v)}
    for name, fold in {"attention": None, **FOLDS}.items():  # None: the default rule
        fns[name] = with_fold(lambda: attention(q, k, v), fold)
    for name, fold in FOLDS.items():
        fns[name.replace("attention", "decode_contiguous")] = lambda fold=fold: (
            pa.decode_contiguous(q, k, v, window=None, tau=tau, fold_merge=fold)
        )
    recs = call_costs(fns)
    for rec in recs:
        rec["gpu_us"] = 1000 * rec.pop("gpu_ms")
    shape = {"b": b, "hq": hq, "hkv": hkv, "d": d, "keys": n, "dtype": "float16"}
    return shape | {"num_splits": splits, "agreement": agree, "records": recs}


def warm_up() -> None:
    """Compile both paths and start SDPA once, untimed: the first shape's numbers are then not
    the process's lazy initialisation."""
    q = torch.randn(1, 32, 1, 128, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(1, 8, 4096, 128, dtype=torch.float16, device="cuda") for _ in "kv")
    agreement(q, k, v, 128**-0.5)
    sdpa_cudnn(q, k, v)
    host_time_us(lambda: attention(q, k, v), calls=50, rounds=1)
    torch.cuda.synchronize()


def main() -> None:
    args = arguments(__doc__).parse_args()
    warm_up()
    cases = [case(n) for n in (4096, 32768, 131072)]
    save(args.out, {"environment": environment(), "cases": cases})


if __name__ == "__main__":
    main()

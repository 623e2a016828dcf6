"""Decode study (written at 34fef71, run at 2b6ea15: data/next-probe-h200.log, stated in Lab 03
part 2): two questions in one graph-timed run, outputs checked first.

1. An order built outside the decode kernel. The in-kernel sort costs the kernel registers (96 ->
   112 at 64 entries, scratch/sort_sass.txt) and with them programs per SM. Emulated here without
   a second kernel in the module: the decode with the sort switched off (LONGEST_FIRST_BATCH
   emptied) on the batch already sorted longest first, plus a torch.argsort of the lengths in
   the same timed call (what a separate order launch would cost at least). Ragged B = 64 (1..8k),
   uniform B = 64 4k and B = 16 32k rows, against the shipped kernel.
2. MQA (B = 64, 4k keys, 32 query heads on one kv head): 128-key tiles and the next tile's table
   entries loaded one iteration ahead (scratch/prefetch_probe.py's change), apart and together,
   against the shipped kernel and cuDNN.

    PYTHONPATH=src:. python scratch/next_probe.py      # ~1.5 min on the H200
"""

from unittest import mock

import torch
from prefetch_probe import variant as prefetch_module  # the prefetched-entries copy

from bench import core
from bench.paged_decode import Decode, inputs, kv_bytes, sdpa_fn
from minimodel import paged_attention as pa


def main() -> None:
    fns, recs, impls = {}, {}, {}
    copy = core.copy_rate()

    def add(name, fn, refs, nbytes, impl=None):
        err = core.max_error(fn(), refs)
        assert err < 1e-2, (name, err)
        fns[name], recs[name] = fn, {"impl": name, "nb": nbytes}
        if impl:
            impls[name] = impl

    for case in (Decode("mixed", 64, 8192), Decode("b64", 64, 4096), Decode("window", 16, 32768)):
        q, k, v, lens = inputs(case)
        order = sorted(range(case.b), key=lambda i: (-lens[i], i))
        sel = torch.tensor(order, device="cuda")
        q2, k2, v2, lens2 = q[sel], k[sel], v[sel], [lens[i] for i in order]
        nb, m = kv_bytes(case, lens), max(lens)
        shipped = (q, *core.paged_cache(k, v, lens, 16))
        pre = (q2, *core.paged_cache(k2, v2, lens2, 16))
        refs = core.reference(q, k, v, (0, case.b - 1), lens)
        refs2 = core.reference(q2, k2, v2, (0, case.b - 1), lens2)
        name = f"{case.group}{case.b}_{case.ctx}"
        add(
            f"{name}_shipped",
            lambda a=shipped, m=m: pa.paged_decode(*a, max_context_len=m),
            refs,
            nb,
        )

        def outside(a=pre, m=m):
            torch.argsort(a[4], descending=True, stable=True)  # the order's own launch
            with mock.patch.object(pa, "LONGEST_FIRST_BATCH", (1, 0)):
                return pa.paged_decode(*a, max_context_len=m)

        add(f"{name}_order_outside", outside, refs2, nb)

    case = Decode("heads", 64, 4096, hkv=1)
    q, k, v, lens = inputs(case)
    args, nb = (q, *core.paged_cache(k, v, lens, 16)), kv_bytes(case, lens)
    refs = core.reference(q, k, v, (0, case.b - 1), lens)
    pf = prefetch_module()
    for tag, module, n in (
        ("shipped", pa, None),
        ("tiles128", pa, 128),
        ("prefetch", pf, None),
        ("prefetch_tiles128", pf, 128),
    ):

        def fn(module=module, n=n):
            if n is None:
                return module.paged_decode(*args, max_context_len=4096)
            with mock.patch.object(
                module, "decode_config", lambda *a: module.DecodeConfig(n, 4, 3)
            ):
                return module.paged_decode(*args, max_context_len=4096)

        add(f"mqa64_4096_{tag}", fn, refs, nb)
    add("mqa64_4096_sdpa_cudnn", sdpa_fn(q[:, :, None], k, v)[0], refs, nb, "sdpa_cudnn")
    core.in_turns(recs, fns, 3, impls=impls, must_capture=True)
    for name, rec in recs.items():
        rate = rec["nb"] / rec["graph_ms"] / 1e6 * 1e9 / copy
        print(f"{name:32s} {rec['graph_ms'] * 1e3:7.1f} us {rate:6.1%} of copy")


if __name__ == "__main__":
    main()

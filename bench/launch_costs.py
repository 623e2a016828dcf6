"""What one Triton launch of the split decode's merge kernel costs the host, four ways, beside a
torch.empty, and what launch's key costs built two ways (Lab 03 part 2, "What a call costs the
host"); each launch but the JIT's checked against the JIT's output first.

    MINIMODEL_COMMIT=<hash> python -m bench.launch_costs --out data/launch-costs-h200.json
"""

import torch
from triton._C.libtriton import native_specialize_impl

from bench.core import arguments, environment, error, save
from minimodel.kernels import _backend, _classes, launch
from minimodel.paged_attention import _merge_splits
from minimodel.timing import host_time_us


def main() -> None:
    args = arguments(__doc__).parse_args()
    b, hq, splits, d = 1, 32, 16, 128  # decode B = 1, 32 query heads, as bench.host_path
    part = torch.randn(b, hq, splits, d, device="cuda")
    lse_part = torch.randn(b, hq, splits, device="cuda")
    o = torch.empty(b, hq, d, dtype=torch.float16, device="cuda")
    lse = torch.empty(b, hq, device="cuda")
    ints = (splits, hq, *part.stride(), *lse_part.stride(), *o.stride(), *lse.stride())
    meta = {"D": d, "HEAD_DIM": d, "BLOCK_S": 16, "LSE": True}  # in the kernel's parameter order
    tensors, constexprs = (part, lse_part, o, lse), tuple(meta.values())
    grid = (b * hq,)

    def jit():
        return _merge_splits[grid](*tensors, *ints, **meta, num_warps=4)

    kernel = jit()
    want = o.clone(), lse.clone()
    stream = torch.cuda.current_stream().cuda_stream
    # grid, stream, the compiled function and its metadata; no launch metadata, enter or exit hook
    head = (b * hq, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None)

    def direct(pointers):
        return lambda: kernel.run(*head, *pointers, *ints, *constexprs)

    backend = _backend(torch.cuda.current_device())
    checked = {  # each launch, checked against the JIT's output first
        "direct_tensors": direct(tensors),
        "direct_ints": direct([t.data_ptr() for t in tensors]),
        "minimodel_launch": lambda: launch(
            _merge_splits, grid, *tensors, *ints, **meta, num_warps=4
        ),
    }
    fns = {"jit": jit, **checked}
    fns["torch_empty"] = lambda: torch.empty((b, hq, d), dtype=torch.float16, device="cuda")

    # launch's key alone for the same arguments (no launch), built and hashed as a lookup does
    def key_per_argument():  # launch's key up to commit 8890d1f
        spec = [native_specialize_impl(backend, a, False, True, True) for a in (*tensors, *ints)]
        return hash((*meta.items(), *spec))

    fns["key_per_argument"] = key_per_argument  # and its key since:
    fns["key_classes"] = lambda: hash((*meta.items(), *_classes(backend, (*tensors, *ints))))
    host_us, errors = {}, {}
    for name, fn in fns.items():
        try:
            if name in checked:
                o.zero_(), lse.zero_()
                fn(), fn()  # launch's first call under a key is the JIT's; its second is not
                torch.cuda.synchronize()
                if not (torch.equal(o, want[0]) and torch.equal(lse, want[1])):
                    raise RuntimeError("output differs from the JIT launch's")
            host_us[name] = host_time_us(fn)
        except Exception as err:  # recorded, not hidden: the data says which way failed and why
            errors[name] = error(err)
        print(name, host_us.get(name), errors.get(name, ""), flush=True)
    timing = "minimodel.timing.host_time_us: CPU wall time per call, 200 calls behind "
    timing += "torch.cuda._sleep, median of 5 rounds"
    kernel = "_merge_splits, grid (32,), 4 tensors and 14 ints"
    record = {"environment": environment(), "timing": timing, "kernel": kernel}
    save(args.out, record | {"host_us": host_us, "errors": errors})


if __name__ == "__main__":
    main()

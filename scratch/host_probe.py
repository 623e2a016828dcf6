"""Issue 22 study: where a prefill call's host time goes on the H200's host. Host time per call
(minimodel.timing.host_times_us, in turns) of SDPA-cuDNN, minimodel.attention, the Hopper
wrapper, the wrapper with its launch replaced by nothing (its Python alone), kernels.launch with
arguments built once (the launch path alone), the C launcher with descriptors encoded once, two
torch.empty, and a one-element add_ (a bare PyTorch launch). The same for a decode step.

    PYTHONPATH=src:. python scratch/host_probe.py

Written and run before the wrappers kept plans (3a952a1's parent, 668c07e): since then a
signature's third call goes through kernels.Prepared, not through the module's `launch`, so
the "launch a no-op" row would time real launches; clear attention_flash_hopper._PLANS first.
"""

import time
from unittest import mock

import torch

from bench.core import sdpa_cudnn
from minimodel import attention_flash_hopper as fh
from minimodel import kernels, paged_attention
from minimodel.attention import attention
from minimodel.timing import eager_times_us, host_times_us


def captured(module, name):
    """The (kernel, grid, args, meta) of the next launch through module.launch."""
    seen = {}

    def record(kernel, grid, *args, **meta):
        seen.update(kernel=kernel, grid=grid, args=args, meta=meta)
        kernels.launch(kernel, grid, *args, **meta)
    return seen, mock.patch.object(module, name, record)


def raw_launcher(kernel, grid, args, meta):
    """A closure calling the C launcher with everything encoded once (descriptors included)."""
    kernels.launch(kernel, grid, *args, **meta)
    torch.cuda.synchronize()
    device = torch.cuda.current_device()
    _, function, metadata, constants, direct = kernels._COMPILED[
        kernels._key(kernel, device, meta, args)]
    raw, coop, pdl, enc = direct
    encoded = kernels._encode(args, enc) if enc else list(args)
    gx, gy, gz = (*grid, 1, 1)[:3]
    stream = kernels.driver.active.get_current_stream(device)
    return lambda: raw(gx, gy, gz, stream, function, coop, pdl, None, None, metadata, None, None,
                       None, *encoded, *constants)


def report(title, fns):
    host = host_times_us(fns)
    eager = eager_times_us(fns)
    print(title, flush=True)
    for name in fns:
        print(f"  {name:28s} host {host[name]:7.1f} us  eager {eager[name]:7.1f} us", flush=True)


def main():
    torch.manual_seed(0)
    x = torch.ones(1, device="cuda")
    b, h, n, d = 4, 32, 512, 128
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16, device="cuda") for _ in "qkv")
    seen, patch = captured(fh, "launch")
    with patch:
        fh.flash_attention_hopper(q, k, v, causal=True)
    noop = mock.patch.object(fh, "launch", lambda *a, **kw: None)
    noop.start()
    py = lambda: fh.flash_attention_hopper(q, k, v, causal=True)  # noqa: E731
    py()
    t = time.perf_counter()
    for _ in range(2000):
        py()
    py_us = (time.perf_counter() - t) / 2000 * 1e6
    noop.stop()
    print(f"prefill: hopper wrapper with launch a no-op: {py_us:.1f} us per call (wall, no GPU)")
    fns = {
        "sdpa_cudnn": lambda: sdpa_cudnn(q, k, v, is_causal=True),
        "attention": lambda: attention(q, k, v, causal=True),
        "hopper": lambda: fh.flash_attention_hopper(q, k, v, causal=True),
        "launch_prebuilt": lambda: kernels.launch(seen["kernel"], seen["grid"], *seen["args"],
                                                  **seen["meta"]),
        "raw_encoded_once": raw_launcher(seen["kernel"], seen["grid"], seen["args"],
                                         seen["meta"]),
        "two_empty": lambda: (torch.empty((b, h, n, d), dtype=q.dtype, device="cuda"),
                              torch.empty((b, h, n), dtype=torch.float32, device="cuda")),
        "add_one_element": lambda: x.add_(1),
    }
    report(f"prefill B={b} H={h} N={n} d={d} causal fp16", fns)

    qd = torch.randn(1, 32, 1, d, dtype=torch.float16, device="cuda")
    kd, vd = (torch.randn(1, 8, 4096, d, dtype=torch.float16, device="cuda") for _ in "kv")
    seen, patch = captured(paged_attention, "launch")
    with patch:
        attention(qd, kd, vd)
    fns = {
        "sdpa_cudnn": lambda: sdpa_cudnn(qd, kd, vd),
        "attention": lambda: attention(qd, kd, vd),
        "decode_contiguous": lambda: paged_attention.decode_contiguous(
            qd, kd, vd, window=None, tau=d**-0.5, with_lse=False),
        "launch_prebuilt(last)": lambda: kernels.launch(seen["kernel"], seen["grid"],
                                                        *seen["args"], **seen["meta"]),
        "add_one_element": lambda: x.add_(1),
    }
    report("decode B=1 32/8 4k keys d=128 fp16", fns)


if __name__ == "__main__":
    main()

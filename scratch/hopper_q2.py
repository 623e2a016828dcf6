"""Issue 23 study, offline (no GPU): the Hopper prefill kernel with two Q buffers, so that the
loader fetches the next work item's Q while the consumers still work on this one (as shipped,
one Q buffer: the next Q is loaded only once both consumers have done the item's last S, and
the consumers wait for it at every item boundary). Compiles the shipped module and patched
copies for sm_90 (scripts/ptx_hopper.py's way): Q2, RCP (the epilogue's reciprocal, below), both,
and RCP with MASK (the boundary mask, below), no mask, causal and windowed; prints shared memory,
registers, spills and the SASS instruction count.

    env -u TRITON_INTERPRET PYTHONPATH=src:scripts .venv/bin/python scratch/hopper_q2.py  # ~20 s

Its output is scratch/hopper_q2.txt; scratch/q2_probe.py times the patch on the H200. With
--patch it compiles only the module as scratch/rcp-mask.patch writes it (the "patch" lines).
Since 3a96fae the module ships RCP and MASK and the patch file is gone: the replacements below no
longer apply to it. To reproduce the output, run this script in a checkout of 3a96fae^ (which
still holds scratch/rcp-mask.patch).
"""

# ruff: noqa: E501 (the patch quotes the module's own lines, as long as they are)
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import ptx_hopper  # scripts/: the one offline compile of the Hopper kernel
import torch
import triton

from minimodel import attention_flash_hopper as h

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"

# Two Q buffers: buffer done % 2 of each, the barriers one per buffer, waited at the phase of
# that buffer's use count (done // 2).
Q2 = [
    ("q_smem = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF, HEAD_DIM], desc_q.layout)",
     "q_smem = gl.allocate_shared_memory(dtype, [4, 1, 1, HALF, HEAD_DIM], desc_q.layout)"),
    ("""    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())""",
     """    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())"""),
    ("""    mbarrier.init(q_ready, count=1)  # the TMA completes it
    mbarrier.init(q_empty, count=2)  # both consumers release it""",
     """    for i in gl.static_range(2):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=2)"""),
    # loader
    ("""            mbarrier.wait(sh.q_empty, (done & 1) ^ 1)  # both consumers are done with the last Q
            mbarrier.expect(sh.q_ready, 2 * sh.desc_q.block_type.nbytes)
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0, 0], sh.q_ready,
                                            sh.q_smem.index(0))
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0 + HALF, 0], sh.q_ready,
                                            sh.q_smem.index(1))""",
     """            qb = done % 2
            mbarrier.wait(sh.q_empty.index(qb), _phase(done, 2) ^ 1)
            mbarrier.expect(sh.q_ready.index(qb), 2 * sh.desc_q.block_type.nbytes)
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0, 0],
                                            sh.q_ready.index(qb), sh.q_smem.index(2 * qb))
            tma.async_copy_global_to_shared(sh.desc_q, [off_b, off_h, i0 + HALF, 0],
                                            sh.q_ready.index(qb), sh.q_smem.index(2 * qb + 1))"""),
    # consumer
    ("    q = sh.q_smem.index(WG).reshape([HALF, HEAD_DIM])\n", ""),
    ("            mbarrier.wait(sh.q_ready, done & 1)\n",
     "            qb = done % 2\n"
     "            mbarrier.wait(sh.q_ready.index(qb), _phase(done, 2))\n"
     "            q = sh.q_smem.index(2 * qb + WG).reshape([HALF, HEAD_DIM])\n"),
    ("                mbarrier.arrive(sh.q_empty)  # the item's last S is done: the next Q may load",
     "                mbarrier.arrive(sh.q_empty.index(qb))"),
    ("            else:\n                mbarrier.arrive(sh.q_empty)",
     "            else:\n                mbarrier.arrive(sh.q_empty.index(qb))"),
]


# The epilogue's O = acc / l as one reciprocal per row and a multiply per element (the division
# of every element is an IEEE divide sequence: about 190 SASS instructions of each consumer copy).
RCP = [("out = acc / gl.convert_layout(l_safe, row_o)[:, None]  # O_i = acc_i / l_i",
        "out = acc * gl.convert_layout(1.0 / l_safe, row_o)[:, None]  # O_i = acc_i / l_i")]


# The boundary tiles' mask as one comparison of the tile's column offsets with a per-row limit:
# j < n_k and j <= pos_i together are j <= min(pos_i, n_k - 1); and (windowed) j > pos_i - W is
# offs_n > pos_i - W - start_n. No key position j is formed per element.
MASK = [("""        j = start_n + offs_n[None, :]
        visible = j < sh.n_k
        if sh.CAUSAL:
            visible = visible & (j <= pos_i[:, None])
        if sh.WINDOWED:
            visible = visible & (j > pos_i[:, None] - sh.window)
        s = gl.where(visible, s, float("-inf"))""",
         """        last = sh.n_k - 1 - start_n  # the row's last visible column of this tile
        if sh.CAUSAL:
            last = gl.minimum(pos_i - start_n, last)
        else:
            last = gl.full(pos_i.shape, 0, gl.int32, layout=pos_i.type.layout) + last
        visible = offs_n[None, :] <= last[:, None]
        if sh.WINDOWED:
            visible = visible & (offs_n[None, :] > (pos_i - sh.window - start_n)[:, None])
        s = gl.where(visible, s, float("-inf"))""")]


def load(name, path):
    """The module at `path`, imported as hopper_<name>."""
    spec = importlib.util.spec_from_file_location(f"hopper_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patched(name, replacements):
    src = Path(h.__file__).read_text()
    for old, new in replacements:
        if src.count(old) != 1:
            raise SystemExit(f"{name}: {old[:70]!r} found {src.count(old)} times")
        src = src.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"hopper_{name}.py"
    path.write_text(src)
    return load(name, path)


def from_patch():
    """The module as scratch/rcp-mask.patch writes it (RCP and MASK as they would ship: the
    non-causal mask keeps its form), applied with git apply to a scratch copy."""
    rel = "src/minimodel/attention_flash_hopper.py"
    tmp = Path(tempfile.mkdtemp())
    (tmp / rel).parent.mkdir(parents=True)
    (tmp / rel).write_text(Path(h.__file__).read_text())
    patch = Path(__file__).resolve().with_name("rcp-mask.patch")
    subprocess.run(["git", "apply", f"--include={rel}", str(patch)], cwd=tmp, check=True)
    return load("patch", tmp / rel)


def compile_kernel(module, head_dim, causal, dtype=torch.float16, windowed=False):
    """scripts/ptx_hopper.py's compile of `module`'s kernel (ping-pong on, as shipped)."""
    return ptx_hopper.compile_kernel(module, dtype, head_dim, causal, windowed, True)


def ptxas(ptx):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.ptx"
        p.write_text(ptx)
        out = subprocess.run([str(BIN / "ptxas"), "-arch=sm_90a", "-v", str(p), "-o",
                              str(Path(d) / "k.o")], capture_output=True, text=True)
    text = out.stderr + out.stdout
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores", text)
    return (int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else None,
            out.returncode, text if out.returncode else "")


def sass_count(cubin: bytes) -> int:
    """SASS instructions in a cubin (nvdisasm's listing, one per /*address*/ line)."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.cubin").write_bytes(cubin)
        text = subprocess.run([str(BIN / "nvdisasm"), "-c", str(Path(d) / "k.cubin")],
                              capture_output=True, text=True, check=True).stdout
    return sum(1 for line in text.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line))


def main():
    if sys.argv[1:] == ["--patch"]:  # only the patch's module, as "patch" lines
        return report([("patch", from_patch())])
    report((("shipped", h), ("q2", patched("q2", Q2)), ("rcp", patched("rcp", RCP)),
            ("rcp_q2", patched("rcp_q2", RCP + Q2)), ("rcp_mask", patched("rcp_mask", RCP + MASK))))


def report(modules):
    for name, module in modules:
        for head_dim in (64, 128):
            for causal, windowed in ((False, False), (True, False), (True, True)):
                c = compile_kernel(module, head_dim, causal, windowed=windowed)
                regs, spill, rc, err = ptxas(c.asm["ptx"])
                mask = f"causal={causal}" + (" windowed" if windowed else "")
                print(f"{name} d={head_dim} {mask}: shared {c.metadata.shared} B "
                      f"(limit {h.SMEM_LIMIT}), registers {regs}, spill stores {spill} B, "
                      f"{sass_count(c.asm['cubin'])} SASS instructions, ptxas rc {rc} "
                      f"{err[:300]}", flush=True)


if __name__ == "__main__":
    main()

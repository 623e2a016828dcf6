"""The Hopper kernel's PTX, compiled ahead of time for sm_90 with no GPU, less its debug info.

A refactoring of `minimodel.attention_flash_hopper` that only moves code around (a helper
extracted, arguments bundled) must leave the kernel's PTX as it was, apart from line numbers.
This script compiles `_attn_fwd_ws` for four configurations (below), strips the debug info
(`.loc`, `.file` and the `.debug_*` sections), and hashes what is left.

    python scripts/ptx_hopper.py                    # print the digests of the working tree
    python scripts/ptx_hopper.py --ref main         # and compare them with main's (git archive)
    python scripts/ptx_hopper.py --check            # compare with data/hopper-ptx.json
    python scripts/ptx_hopper.py --write            # record the working tree's digests there
    python scripts/ptx_hopper.py --dump DIR         # also write each stripped PTX to DIR

Needs only triton (3.6) and torch on the CPU: the descriptors' types come from real
GluonTensorDescriptors of small CPU tensors, the target is GPUTarget("cuda", 90, 32).
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "hopper-ptx.json"

# (name, dtype, head_dim, CAUSAL, WINDOWED, PINGPONG): the schedule's two switches that change
# the kernel (the persistent grid is the host's choice of grid, not a kernel variant), both
# masks, both tile widths and both 16-bit dtypes.
CONFIGS = [
    ("fp16-d128-full-pingpong", "float16", 128, False, False, True),
    ("fp16-d128-causal-pingpong", "float16", 128, True, False, True),
    ("bf16-d64-window-pingpong", "bfloat16", 64, True, True, True),
    ("fp16-d128-causal-no-pingpong", "float16", 128, True, False, False),
]


def strip_debug(ptx: str) -> str:
    """PTX without its debug info: `.loc` and `.file` lines and the `.section .debug_*` blocks."""
    ptx = re.sub(r"^\s*\.section\s+\.debug_\w+\s*\{.*?\}\s*$", "", ptx, flags=re.S | re.M)
    lines = [line for line in ptx.splitlines()  # debug labels go too, block labels stay
             if not re.match(r"\s*\.(loc|file)\b", line)
             and not re.match(r"\$L__(tmp|func_begin|func_end)\d*:", line)]
    return "\n".join(line for line in lines if line.strip()) + "\n"


def compile_kernel(h, dtype, head_dim: int, causal: bool, windowed: bool, pingpong: bool):
    """`_attn_fwd_ws` of module `h` (minimodel.attention_flash_hopper, or a patched copy of it)
    compiled for sm_90 with no GPU: the descriptors' types from Gluon descriptors of a small CPU
    tensor, the integers as the kernel's do_not_specialize leaves them (i32)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    kernel = h._attn_fwd_ws
    params = [p.name for p in kernel.params]
    t = torch.zeros(1, 2, 256, head_dim, dtype=dtype)  # strides only: never read
    # the wrapper's TmaArg made the Gluon descriptor the JIT would get (kernels._jit_args)
    desc_q = TensorDescriptor(*h._descriptor(t, h.BLOCK_M // 2, head_dim))
    desc_kv = TensorDescriptor(*h._descriptor(t, h.BLOCK_N, head_dim))
    constexprs = {"BLOCK_M": h.BLOCK_M, "BLOCK_N": h.BLOCK_N, "HEAD_DIM": head_dim,
                  "STAGES": h.STAGES, "CAUSAL": causal, "WINDOWED": windowed,
                  "PINGPONG": pingpong, "CONSUMER_REGS": h.CONSUMER_REGS}
    signature = {}
    for p in params:
        if p in constexprs:
            signature[p] = "constexpr"
        elif p in ("desc_q", "desc_o"):
            signature[p] = mangle_type(desc_q)
        elif p in ("desc_k", "desc_v"):
            signature[p] = mangle_type(desc_kv)
        elif p == "lse_ptr":
            signature[p] = "*fp32"
        elif p == "qk_scale":
            signature[p] = "fp32"
        else:
            signature[p] = "i32"
    src = GluonASTSource(fn=kernel, signature=signature,
                         constexprs={(params.index(k),): v for k, v in constexprs.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def compile_all(dump: Path | None = None) -> dict[str, str]:
    """{config name: sha256 of the stripped PTX} of the minimodel found on sys.path."""
    import torch

    from minimodel import attention_flash_hopper as h

    digests = {}
    for name, dtype_name, head_dim, causal, windowed, pingpong in CONFIGS:
        compiled = compile_kernel(h, getattr(torch, dtype_name), head_dim, causal, windowed,
                                  pingpong)
        ptx = strip_debug(compiled.asm["ptx"])
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"{name}.ptx").write_text(ptx)
        digests[name] = hashlib.sha256(ptx.encode()).hexdigest()
        print(f"{name}: {digests[name][:16]} ({len(ptx.splitlines())} lines)", flush=True)
    return digests


def digests_of_ref(ref: str) -> dict[str, str]:
    """The digests of `ref`'s src/ tree, compiled in a subprocess that imports only it."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", ref, "src"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        out = Path(tmp) / "digests.json"
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        env.pop("TRITON_INTERPRET", None)
        subprocess.run([sys.executable, __file__, "--json", str(out)], env=env, check=True,
                       cwd=tmp)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="also compile this git revision's kernel and compare")
    parser.add_argument("--check", action="store_true", help=f"compare with {DATA.name}")
    parser.add_argument("--write", action="store_true", help=f"record the digests in {DATA.name}")
    parser.add_argument("--dump", type=Path, help="write each stripped PTX to this folder")
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)  # the --ref subprocess
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("unset TRITON_INTERPRET: Gluon kernels compile only outside the interpreter")
    mine = compile_all(args.dump)
    if args.json:
        args.json.write_text(json.dumps(mine))
        return
    if args.write:
        import triton
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        DATA.write_text(json.dumps({"commit": commit + ("+" if dirty else ""),
                                    "triton": triton.__version__, "target": "sm_90",
                                    "stripped": ".loc, .file, .debug_* sections",
                                    "digests": mine}, indent=1) + "\n")
        print(f"wrote {DATA}")
    others = {}
    if args.ref:
        others[args.ref] = digests_of_ref(args.ref)
    if args.check:
        others[DATA.name] = json.loads(DATA.read_text())["digests"]
    differ = False
    for label, theirs in others.items():
        for name, digest in mine.items():
            same = theirs.get(name) == digest
            differ |= not same
            print(f"{name}: {'identical to' if same else 'DIFFERS from'} {label}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

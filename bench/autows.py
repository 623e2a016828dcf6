"""Does Triton's automatic warp specialisation apply to Lab 02's kernel on Hopper?

Compiles Lab 02's `_attn_fwd` twice ahead of time, with no GPU: as written, and with
`warp_specialize=True` on the key loop (`tl.range(lo, hi, BLOCK_N, warp_specialize=True)`, the
flag Triton documents for this), for Hopper (sm_90) and, as a control, Blackwell (sm_100). For
each it records whether the compiled TTGIR holds a `ttg.warp_specialize` region (the partitions
the flag asks for), its shared memory, and, for sm_90, ptxas's register and spill report. Lab 02
part 2 (docs/lab/02b-flash-hopper.md) cites the result.

    python -m bench.autows                  # writes data/autows-probe.json
    python -m bench.autows --out x.json

The flagged variant is made by rewriting the loop line of the kernel's source (the committed
kernel is not changed); the script fails if that line is not found.
"""

import argparse
import inspect
import json
import os
import re
import subprocess
import tempfile
import textwrap
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from bench.core import environment
from minimodel import attention_flash, kernels

ROOT = Path(__file__).resolve().parents[1]
LOOP = "for start_n in tl.range(lo, hi, BLOCK_N):"
FLAGGED = "for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=True):"
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def kernel_pair(flagged: bool):
    """Lab 02's (inner loop, kernel) as jit functions, the loop flagged or not."""
    inner_src = textwrap.dedent(inspect.getsource(attention_flash._attn_fwd_inner.fn))
    if LOOP not in inner_src:
        raise SystemExit(f"the loop line {LOOP!r} is not in _attn_fwd_inner: update this probe")
    if flagged:
        inner_src = inner_src.replace(LOOP, FLAGGED)
    kernel_src = textwrap.dedent(inspect.getsource(attention_flash._attn_fwd.fn))
    namespace = {
        "triton": triton,
        "tl": tl,
        "LN2": kernels.LN2,
        "key_range": kernels.key_range,
        "__name__": f"probe_autows_{int(flagged)}",
    }
    path = Path(tempfile.mkdtemp()) / f"probe_{int(flagged)}.py"  # jit needs a source file
    path.write_text(
        "import triton\nimport triton.language as tl\n\n" + inner_src + "\n\n" + kernel_src
    )
    code = compile(path.read_text(), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - our own kernel's source, rewritten on one line
    return namespace["_attn_fwd"]


def signature(block_m: int, block_n: int, head_dim: int) -> dict[str, str]:
    def desc(rows: int) -> str:
        return f"tensordesc<fp16[1,1,{rows},{head_dim}]>"

    sig = {
        "desc_q": desc(block_m),
        "desc_k": desc(block_n),
        "desc_v": desc(block_n),
        "desc_o": desc(block_m),
        "lse_ptr": "*fp32",
        "qk_scale": "fp32",
    }
    sig |= {
        name: "i32"
        for name in (
            "n_q",
            "n_k",
            "n_heads",
            "group",
            "window",
            "stride_lse_b",
            "stride_lse_h",
            "N_Q_BUCKET",
            "N_K_BUCKET",
        )
    }
    sig |= {
        name: "constexpr"
        for name in ("BLOCK_M", "BLOCK_N", "HEAD_DIM", "CAUSAL", "WINDOWED", "DOT_PRECISION")
    }
    return sig


def ptxas_report(ptx: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        run = subprocess.run(
            [str(PTXAS), "-v", "--gpu-name", "sm_90a", src, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
        )
    return " | ".join(
        line.split(":", 1)[-1].strip()
        for line in run.stderr.splitlines()
        if "registers" in line or "spill" in line
    )


def probe(
    flagged: bool, capability: int, block_m: int, block_n: int, warps: int, stages: int
) -> dict:
    fn = kernel_pair(flagged)
    constexprs = {
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "HEAD_DIM": 128,
        "CAUSAL": False,
        "WINDOWED": False,
        "DOT_PRECISION": "tf32",
    }
    record = {
        "warp_specialize_flag": flagged,
        "target": f"sm_{capability}",
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "num_warps": warps,
        "num_stages": stages,
        "head_dim": 128,
        "dtype": "float16",
    }
    try:
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature(block_m, block_n, 128), constexprs=constexprs),
            target=GPUTarget("cuda", capability, 32),
            options={"num_warps": warps, "num_stages": stages},
        )
    except Exception as err:  # a compile failure is a result of the probe, recorded as such
        record["compiled"] = False
        record["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        return record
    ttgir = compiled.asm["ttgir"]
    record["compiled"] = True
    record["ttgir_has_warp_specialize"] = bool(re.search(r"ttg\.warp_specialize\b", ttgir))
    record["shared_bytes"] = compiled.metadata.shared
    if capability == 90:
        record["ptxas"] = ptxas_report(compiled.asm["ptx"])
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "autows-probe.json")
    args = parser.parse_args()
    records = []
    for capability in (90, 100):
        for block_m, block_n, warps, stages in [(128, 64, 4, 2), (128, 128, 8, 2)]:
            for flagged in (False, True):
                record = probe(flagged, capability, block_m, block_n, warps, stages)
                print(record, flush=True)
                records.append(record)
    env = environment(compiled="ahead of time, no GPU")
    args.out.write_text(json.dumps({"environment": env, "records": records}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Does Triton's automatic warp specialisation apply to Lab 02's kernel (Lab 02 part 2, "The two
routes in Triton 3.6")? `_attn_fwd` compiled ahead of time, no GPU, as written and with
`warp_specialize=True` on its key loop, for sm_90 and sm_100.

    python -m bench.autows                  # writes data/autows-probe.json
"""

import inspect
import re
import subprocess
import tempfile
import textwrap
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from bench.core import DATA, arguments, environment, error, save
from minimodel import attention_flash, kernels

LOOP = "for start_n in tl.range(lo, hi, BLOCK_N):"
FLAGGED = "for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=True):"
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def kernel(flagged: bool):
    """Lab 02's `_attn_fwd` (with its inner loop) as a jit function, the loop flagged or not."""
    inner, outer = (
        textwrap.dedent(inspect.getsource(f.fn))
        for f in (attention_flash._attn_fwd_inner, attention_flash._attn_fwd)
    )
    if LOOP not in inner:
        raise SystemExit(f"the loop line {LOOP!r} is not in _attn_fwd_inner: update this probe")
    inner = inner.replace(LOOP, FLAGGED) if flagged else inner
    source = f"import triton\nimport triton.language as tl\n\n{inner}\n\n{outer}"
    path = Path(tempfile.mkdtemp()) / f"probe_{int(flagged)}.py"  # jit needs a source file
    path.write_text(source)
    namespace = {"triton": triton, "tl": tl, "LN2": kernels.LN2, "key_range": kernels.key_range}
    namespace["__name__"] = f"probe_autows_{int(flagged)}"
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - our own kernel's source
    return namespace["_attn_fwd"]


def signature(fn, block_m: int, block_n: int, head_dim: int) -> dict[str, str]:
    """Every parameter's type: the descriptors fp16 tiles, the lse pointer and the scale fp32,
    the constexprs as such, the other scalars i32."""
    tiles = {"desc_q": block_m, "desc_o": block_m, "desc_k": block_n, "desc_v": block_n}
    types = {"lse_ptr": "*fp32", "qk_scale": "fp32"}
    types |= {name: f"tensordesc<fp16[1,1,{rows},{head_dim}]>" for name, rows in tiles.items()}
    return {p.name: "constexpr" if p.is_constexpr else types.get(p.name, "i32") for p in fn.params}


def ptxas_report(ptx: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        command = [PTXAS, "-v", "--gpu-name", "sm_90a", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"]
        run = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in run.stderr.splitlines() if "registers" in line or "spill" in line]
    return " | ".join(line.split(":", 1)[-1].strip() for line in lines)


def probe(flagged: bool, capability: int, block_m: int, block_n: int, warps: int, stages: int):
    tiles = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    record = {"warp_specialize_flag": flagged, "target": f"sm_{capability}", **tiles}
    record |= {"num_warps": warps, "num_stages": stages, "head_dim": 128, "dtype": "float16"}
    fn = kernel(flagged)
    masks = {"CAUSAL": False, "WINDOWED": False, "DOT_PRECISION": "tf32"}
    constexprs = {**tiles, "HEAD_DIM": 128, **masks}
    source = ASTSource(fn=fn, signature=signature(fn, block_m, block_n, 128), constexprs=constexprs)
    options = {"num_warps": warps, "num_stages": stages}
    try:
        compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
    except Exception as e:  # a compile failure is a result of the probe, recorded as such
        return {**record, "compiled": False, "error": error(e, 300)}
    record["compiled"] = True
    partitions = re.search(r"ttg\.warp_specialize\b", compiled.asm["ttgir"])
    record["ttgir_has_warp_specialize"] = bool(partitions)
    record["shared_bytes"] = compiled.metadata.shared
    if capability == 90:
        record["ptxas"] = ptxas_report(compiled.asm["ptx"])
    return record


def main() -> None:
    args = arguments(__doc__, DATA / "autows-probe.json").parse_args()
    records = []
    for capability in (90, 100):
        for tile in [(128, 64, 4, 2), (128, 128, 8, 2)]:
            for flagged in (False, True):
                records.append(probe(flagged, capability, *tile))
                print(records[-1], flush=True)
    env = environment(compiled="ahead of time, no GPU")
    save(args.out, {"environment": env, "records": records})


if __name__ == "__main__":
    main()

"""Bytes that attention really moves, kernel by kernel, measured with Nsight Compute at the shapes
of the overlay table (CASES): every case in one process under `ncu`, run twice (Lab 01,
"Measured on the H200", gives the two modes); a one-block marker kernel before each case's call
tells the cases apart. bench.overlay runs it with the Flash tiles its timing chose (--pins).

    python -m bench.bytes --out data/bytes-h200.json       # on the GPU machine, as root
    TRITON_INTERPRET=1 python -m bench.bytes --smoke       # CPU: every case on tiny shapes,
                                                           # writes nothing
"""

import contextlib
import csv
import dataclasses
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch
import triton
import triton.language as tl

from bench.core import DATA, ROOT, arguments, environment, in_blocks, sdpa_cudnn
from minimodel import paged_attention
from minimodel.attention import attention, paged_decode
from minimodel.attention_flash import _attn_fwd_tuned, flash_attention
from minimodel.kernels import INTERPRET
from minimodel.minigpt import MiniGPT, MiniGPTConfig
from minimodel.reference import attention_ref, naive_attention, visible_mask
from minimodel.verbs import VERB_SEQUENCE_LEN, tokenizer, verb_sequence

HEADS = {"MHA": 16, "GQA": 4, "MQA": 1}  # kv heads; 16 query heads of d = 64 everywhere
PAGED_BLOCK_SIZE = 16  # token slots per block of the paged cache
MINIGPT = MiniGPTConfig(vocab_size=tokenizer().vocab_size, max_seq_len=VERB_SEQUENCE_LEN)


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured point: an implementation at one shape."""

    phase: str  # "prefill" or "decode"
    impl: str  # "naive", "flash", "sdpa_flash" (prefill); "decode", "paged" (decode)
    heads: str  # "MHA", "GQA", "MQA", or "MiniGPT" (MiniGPT's own heads, verb sequence)
    b: int
    hq: int
    hkv: int
    nq: int
    nk: int
    d: int
    causal: bool = False

    @property
    def id(self) -> str:
        return f"{self.phase}-{self.impl}-{self.heads}-{self.nk}"

    @property
    def n(self) -> int:
        """The anchor this case belongs to: N of a prefill, the context of a decode step."""
        return self.nk


def cases() -> list[Case]:
    """Prefill at N = 64 and 2048 (B = 1, 16 query heads of d = 64; MHA, GQA-4, MQA) for naive
    attention, our Flash and SDPA's FlashAttention-2; MiniGPT's heads on the 64-token verb
    sequence (causal); decode (B = 64, same heads) at context 64 and 2048 on a contiguous and a
    paged cache."""
    out, prefill = [], ("naive", "flash", "sdpa_flash")
    for n in (64, 2048):
        for heads, hkv in HEADS.items():
            out += [Case("prefill", impl, heads, 1, 16, hkv, n, n, 64) for impl in prefill]
        if n == 64:
            hq, hkv, d = MINIGPT.n_heads, MINIGPT.n_kv_heads, MINIGPT.head_dim
            out += [Case("prefill", i, "MiniGPT", 1, hq, hkv, 64, 64, d, True) for i in prefill]
    for n in (64, 2048):
        for heads, hkv in HEADS.items():
            out += [
                Case("decode", i, heads, 64, 16, hkv, 1, n, 64, True) for i in ("decode", "paged")
            ]
    return out


CASES = cases()


def minigpt_qkv(device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """q, k, v of MiniGPT's first layer on the verb sequence (seed 0, untrained weights), made
    contiguous: the values a real forward pass hands its attention."""
    torch.manual_seed(0)
    model, seen = MiniGPT(MINIGPT).to(device=device, dtype=dtype).eval(), []

    def capture(q, k, v, **kwargs):
        seen.append((q, k, v))
        return attention_ref(q, k, v, **kwargs)

    with torch.no_grad():
        model(torch.tensor([verb_sequence()], device=device), attn=capture)
    return tuple(t.contiguous() for t in seen[0])


def build(case: Case, scale_down: bool = False):
    """Inputs and a zero-argument call for `case`. scale_down (the CPU smoke run) shrinks N and B
    so that the interpreter gets through every case quickly."""
    dev, dtype = "cpu" if INTERPRET else "cuda", torch.float16
    b, n = (min(case.b, 2), min(case.nk, 40)) if scale_down else (case.b, case.nk)
    torch.manual_seed(0)
    if case.heads == "MiniGPT":
        q, k, v = minigpt_qkv(dev, dtype)
        n = q.shape[2]
    else:
        nq = n if case.phase == "prefill" else 1
        q = torch.randn(b, case.hq, nq, case.d, device=dev, dtype=dtype)
        k, v = (torch.randn(b, case.hkv, n, case.d, device=dev, dtype=dtype) for _ in "kv")
    if case.impl == "naive":
        hidden = ~visible_mask(n, n, causal=True, device=dev) if case.causal else None
        return lambda: naive_attention(q, k, v, hidden=hidden)
    if case.impl == "flash":
        return lambda: flash_attention(q, k, v, causal=case.causal)
    if case.impl == "sdpa_flash":
        return lambda: sdpa_cudnn(q, k, v, is_causal=case.causal, impl="sdpa_flash")
    if case.impl == "decode":
        return lambda: attention(q, k, v)
    if case.impl == "paged":
        (kp, table), (vp, _) = (in_blocks(t, [n] * b, PAGED_BLOCK_SIZE) for t in (k, v))
        lens, q3 = torch.full((b,), n, dtype=torch.int32, device=dev), q[:, :, 0].contiguous()
        return lambda: paged_decode(q3, kp, vp, table, lens, max_context_len=n)
    raise ValueError(f"no implementation {case.impl!r} for phase {case.phase!r}")


def prepared(case: Case) -> tuple:
    """(fn, params): the case's call (build), run once, and the parameters the byte model needs:
    the tile configuration of our Flash kernel (its autotuner's choice), or the decode kernel's
    grid and tile. bench.bytes profiles the call and bench.overlay times it."""
    fn = build(case)
    if case.impl == "flash":
        fn()
        c = _attn_fwd_tuned.best_config
        tiles = {"block_m": c.kwargs["BLOCK_M"], "block_n": c.kwargs["BLOCK_N"]}
        return fn, tiles | {"num_warps": c.num_warps, "num_stages": c.num_stages}
    if case.impl not in ("decode", "paged"):
        fn()
        return fn, {}
    kernel, seen = paged_attention._paged_decode_fwd, []
    run = kernel.run

    def spy(*args, grid, warmup, **kwargs):
        seen.append((grid[1], kwargs["BLOCK_N"], kwargs["BLOCK_SIZE"], kwargs["PAGED"]))
        return run(*args, grid=grid, warmup=warmup, **kwargs)

    kernel.run = spy
    try:
        fn()
    finally:
        del kernel.run
    ((splits, block_n, block_size, is_paged),) = seen
    params = {"num_splits": splits, "block_n": block_n}
    return fn, (params | {"block_size": block_size} if is_paged else params)


def pinned(params: dict | None):
    """Within the block, our Flash kernel runs the given tile configuration, no autotuning."""
    if not params:
        return contextlib.nullcontext()
    want = (params["block_m"], params["block_n"], params["num_warps"], params["num_stages"])
    tile = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
    match = [c for c in _attn_fwd_tuned.configs if tile(c) == want]
    if not match:
        raise ValueError(f"no Flash configuration {want} among the autotuner's candidates")
    return mock.patch.object(_attn_fwd_tuned, "configs", match[:1])


@triton.jit
def _case_marker(x_ptr):
    """One block that writes one int: it only marks where a case's kernels begin."""
    tl.store(x_ptr + tl.program_id(0), 1)


def child(sidecar: Path, pins_path: str, ids: str = "-") -> None:
    """Runs under ncu: every case (or those of the comma-separated `ids`) once, alone between
    cudaProfilerStart/Stop, after its marker."""
    pins = json.loads(Path(pins_path).read_text()) if pins_path != "-" else {}
    buf = torch.zeros(1, device="cuda", dtype=torch.int32)
    ran, errors = [], {}
    for case in [c for c in CASES if ids == "-" or c.id in ids.split(",")]:
        try:
            with pinned(pins.get(case.id) if case.impl == "flash" else None), torch.no_grad():
                fn, info = prepared(case)
                fn()
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                _case_marker[(1,)](buf)
                fn()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
        except Exception as e:  # recorded, not hidden: the data file says which case failed why
            errors[case.id] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()
            continue
        ran.append({"id": case.id, "params": info})
    sidecar.write_text(json.dumps({"ran": ran, "errors": errors}, indent=1))


METRICS_ALL = (
    "dram__bytes_read.sum dram__bytes_write.sum gpu__time_duration.sum lts__t_bytes.sum "
    "lts__t_sectors_op_read.sum lts__t_sectors_op_write.sum "
    "lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_tex_op_write.sum "
    "l1tex__m_xbar2l1tex_read_bytes.sum l1tex__m_l1tex2xbar_write_bytes.sum"
).split()
METRICS_NONE = METRICS_ALL[:2]
OPTIONS = "--csv --print-units base --clock-control none --profile-from-start off".split()
MODES = {"all": "--cache-control all", "none": "--cache-control none --replay-mode application"}


def find_ncu() -> str:
    if found := shutil.which("ncu"):
        return found
    if not (versions := sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"))):
        sys.exit("ncu not found: put Nsight Compute on PATH")
    return str(versions[-1])


def parse(csv_text: str) -> list[dict]:
    """ncu's CSV, one dict per profiled kernel, in launch order."""
    rows = [line for line in csv_text.splitlines() if line.startswith('"')]
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        kern = kernels.setdefault(row["ID"], {"kernel": row["Kernel Name"][:120]})
        value = row["Metric Value"].replace(",", "")
        kern[row["Metric Name"]] = float(value) if value not in ("", "n/a") else None
    return [kernels[i] for i in sorted(kernels, key=int)]


def group(kernels: list[dict], ran: list[dict]) -> dict[str, list[dict]]:
    """Cut the kernel list at each marker: the kernels after the i-th marker are case i's."""
    groups: list[list[dict]] = []
    for k in kernels:
        if "_case_marker" in k["kernel"]:
            groups.append([])
        elif groups:
            groups[-1].append(k)
    if len(groups) != len(ran):
        raise RuntimeError(f"{len(groups)} markers in ncu's output for {len(ran)} cases run")
    return {r["id"]: g for r, g in zip(ran, groups, strict=True)}


def measure(out: Path, pins: str = "-", ids: str = "-") -> dict:
    """Profile every case (or those of `ids`) in both cache modes; write and return the record."""
    ncu = find_ncu()
    record = {"environment": environment(), "cases": {}, "errors": {}, "commands": {}}
    for mode in MODES:
        sidecar, t0 = out.parent / f".bytes-{mode}.json", time.time()
        metrics = METRICS_ALL if mode == "all" else METRICS_NONE
        options = [*OPTIONS, *MODES[mode].split(), "--metrics", ",".join(metrics)]
        cmd = [ncu, *options, sys.executable, "-m", "bench.bytes", "--child", str(sidecar), pins]
        done = subprocess.run([*cmd, ids], capture_output=True, text=True, cwd=ROOT)
        log_text = done.stdout[-100_000:] + "\n" + done.stderr[-100_000:]
        (out.parent / f"ncu-{mode}.log").write_text(log_text)
        if done.returncode != 0 or not sidecar.exists():
            raise RuntimeError(f"ncu ({mode}) failed: {done.stderr[-1500:]}")
        side = json.loads(sidecar.read_text())
        sidecar.unlink()
        grouped = group(parse(done.stdout), side["ran"])
        passes = sorted(set(re.findall(r"(\d+) pass", done.stdout + done.stderr)))
        record["commands"][mode] = " ".join(["ncu", *options, "python -m bench.bytes --child ..."])
        record[f"metrics_{mode}"], record[f"passes_{mode}"] = metrics, passes
        for r in side["ran"]:
            record["cases"].setdefault(r["id"], {"params": r["params"]})[mode] = grouped[r["id"]]
        record["errors"].update({f"{k} ({mode})": v for k, v in side["errors"].items()})
        counts = f"{len(side['ran'])} cases, {len(side['errors'])} failed"
        print(f"ncu --cache-control {mode}: {counts}, {time.time() - t0:.0f} s, passes {passes}")
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def smoke() -> None:
    """Build and run every case on tiny shapes in the interpreter; no ncu, nothing written."""
    if not INTERPRET:
        sys.exit("--smoke runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
    for case in CASES:
        if case.impl == "sdpa_flash":
            continue  # SDPA's flash backend needs a GPU
        with torch.no_grad():
            out = build(case, scale_down=True)()
        assert torch.isfinite(out).all(), case.id
        print(f"ok {case.id}: {tuple(out.shape)}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(Path(sys.argv[2]), *sys.argv[3:])
    parser = arguments(__doc__, DATA / "bytes-h200.json", smoke="tiny shapes, in the interpreter")
    parser.add_argument("--pins", default="-", help="JSON {case id: Flash tile configuration}")
    args = parser.parse_args()
    if args.smoke:
        return smoke()
    measure(args.out, args.pins)


if __name__ == "__main__":
    main()

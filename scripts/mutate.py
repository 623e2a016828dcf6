"""Mutation run: change one bound, guard or formula of the tangled code at a time, run the tests
that should notice, and report which changes survive. A survivor is a bug the suite would let
through: add the test that catches it (or explain on the page why the change is equivalent).

    .venv/bin/python scripts/mutate.py                 # every mutant (tens of minutes: kernels run
                                                       # in Triton's interpreter)
    .venv/bin/python scripts/mutate.py --only flash    # the mutants whose name contains "flash"
    .venv/bin/python scripts/mutate.py --list

Each mutant runs in a scratch copy of src/, tests/ and exercises/, so the working tree is never
touched; a mutant whose text is no longer in its file is reported as stale (the code moved on:
update the list), never silently skipped. Writes nothing but its report (stdout, and --out).
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # a tangled file under src/
    old: str  # text that must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # the test files that should catch it


FLASH_TESTS = ("tests/test_attention_flash.py", "tests/test_attention_flash_solution.py")
F = "src/minimodel/attention_flash.py"
R = "src/minimodel/roofline.py"
G = "src/minimodel/minigpt.py"
S = "src/minimodel/online_softmax.py"
REF = "src/minimodel/reference.py"
BYTES_TESTS = ("tests/test_flash_bytes.py", "tests/test_roofline.py",
               "tests/test_roofline_bytes.py", "tests/test_kv_cache_bytes.py")

MUTANTS = [
    # the Flash kernel (Lab 02): each of the four tile-run bounds, the dot precision, the checks
    Mutant("flash-lo-one-tile-late", F,
           "lo = tl.maximum(0, pos_first - window + 1) // BLOCK_N * BLOCK_N",
           "lo = (tl.maximum(0, pos_first - window + 1) // BLOCK_N + 1) * BLOCK_N", FLASH_TESTS),
    Mutant("flash-full-lo-one-key-early", F,
           "full_lo = tl.maximum(0, pos_last - window + 1)",
           "full_lo = tl.maximum(0, pos_last - window)", FLASH_TESTS),
    Mutant("flash-full-hi-one-key-late", F,
           "full_hi = tl.maximum(tl.minimum(n_k, pos_first + 1), 0) // BLOCK_N * BLOCK_N",
           "full_hi = tl.maximum(tl.minimum(n_k, pos_first + 2), 0) // BLOCK_N * BLOCK_N",
           FLASH_TESTS),
    Mutant("flash-hi-one-key-short", F,
           "hi = tl.maximum(tl.minimum(n_k, pos_last + 1), 0)",
           "hi = tl.maximum(tl.minimum(n_k, pos_last), 0)", FLASH_TESTS),
    Mutant("flash-window-mask-off-by-one", F,
           "visible &= j > pos_i[:, None] - window", "visible &= j >= pos_i[:, None] - window",
           FLASH_TESTS),
    Mutant("flash-causal-mask-off-by-one", F,
           "visible &= j <= pos_i[:, None]", "visible &= j < pos_i[:, None]", FLASH_TESTS),
    Mutant("flash-empty-row-guard-dropped", F,
           'm_use = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_use = m_new", FLASH_TESTS),
    Mutant("flash-rescale-dropped", F, "acc = acc * alpha[:, None]", "acc = acc", FLASH_TESTS),
    Mutant("flash-tf32-for-fp32", F, 'DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32"',
           'DOT_PRECISION="tf32"', FLASH_TESTS),
    Mutant("flash-stride-check-removed", F, "if t.stride(-1) != 1 or not strides_ok or",
           "if t.stride(-1) != 1 or", FLASH_TESTS),
    Mutant("flash-smem-counts-only-k", F,
           "return elem * head_dim * (block_m + 2 * stages * block_n)",
           "return elem * head_dim * (block_m + stages * block_n)", FLASH_TESTS),
    # the byte model
    Mutant("bytes-causal-hi-off-by-one", R,
           "hi = max(min(nk, pos_last + 1), 0)  # keys past pos_last: invisible to the whole tile",
           "hi = max(min(nk, pos_last), 0)  # keys past pos_last: invisible to the whole tile",
           BYTES_TESTS),
    Mutant("bytes-layer-weights-ignore-gqa", R,
           "weights = 2 * d_model * d_model + 2 * d_model * d_kv + 2 * mlp_ratio * d_model**2",
           "weights = 4 * d_model * d_model + 2 * mlp_ratio * d_model**2", BYTES_TESTS),
    Mutant("ceilings-bandwidth-reads-only", R, "bandwidth=2 * src.nbytes / copy_s",
           "bandwidth=src.nbytes / copy_s", ("tests/test_roofline.py",)),
    # MiniGPT
    Mutant("minigpt-pre-norm-dropped", G,
           "x = x + self.attn(self.norm1(x), positions, cache, attn)",
           "x = x + self.attn(x, positions, cache, attn)", ("tests/test_minigpt.py",)),
    Mutant("minigpt-final-norm-dropped", G, "return self.norm(x) @ self.tok.weight.T",
           "return x @ self.tok.weight.T", ("tests/test_minigpt.py",)),
    Mutant("minigpt-int32-tokens-accepted", G,
           "if tokens.dim() != 2 or tokens.dtype != torch.long:",
           "if tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int32):",
           ("tests/test_minigpt.py",)),
    # validation
    Mutant("softmax-bool-logit-accepted", S,
           "    if isinstance(x, bool) or not isinstance(x, Real):",
           "    if not isinstance(x, Real):", ("tests/test_online_softmax.py",)),
    Mutant("softmax-bool-state-accepted", S,
           "            if isinstance(value, bool) or not isinstance(value, Real):",
           "            if not isinstance(value, Real):", ("tests/test_online_softmax.py",)),
    Mutant("softmax-rescale-nan-guard-dropped", S,
           "if math.isnan(m_old) or math.isnan(m_new) or m_new < m_old:", "if m_new < m_old:",
           ("tests/test_online_softmax.py",)),
    Mutant("reference-integer-dtypes-accepted", REF, "        if not t.dtype.is_floating_point:",
           "        if False:", ("tests/test_reference.py",)),
    Mutant("reference-non-bool-causal-accepted", REF, "    if not isinstance(causal, bool):",
           "    if False:", ("tests/test_reference.py",)),
    Mutant("reference-zero-scale-accepted", REF, "if not (math.isfinite(scale) and scale > 0):",
           "if not (math.isfinite(scale) and scale >= 0):", ("tests/test_reference.py",)),
    Mutant("reference-zero-lengths-accepted", REF, "    if nq < 1 or nk < 1:",
           "    if nq < 0 or nk < 0:", ("tests/test_reference.py",)),
]


def run(mutant: Mutant, keep_going: bool) -> dict:
    text = (ROOT / mutant.path).read_text()
    if text.count(mutant.old) != 1:
        found = text.count(mutant.old)
        return {"name": mutant.name, "result": "stale", "seconds": 0.0,
                "detail": f"the mutated text occurs {found} times in {mutant.path}"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for folder in ("src", "tests", "exercises"):
            shutil.copytree(ROOT / folder, tmp / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copy(ROOT / "pyproject.toml", tmp)
        (tmp / mutant.path).write_text(text.replace(mutant.old, mutant.new))
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             *([] if keep_going else ["-x"]), *mutant.tests],
            cwd=tmp, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp / "src"),
                          "HOME": str(tmp)},
            capture_output=True, text=True)
        seconds = time.monotonic() - start
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    caught = result.returncode == 1
    if result.returncode not in (0, 1):
        return {"name": mutant.name, "result": "error", "seconds": seconds, "detail": summary}
    return {"name": mutant.name, "result": "caught" if caught else "SURVIVED", "seconds": seconds,
            "detail": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep-going", action="store_true", help="run every test, not -x")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only is None or args.only in m.name]
    if args.list:
        for m in chosen:
            print(f"{m.name:40s} {m.path}")
        return
    if not chosen:
        sys.exit(f"no mutant's name contains {args.only!r}")
    report = []
    for i, mutant in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {mutant.name} ...", end=" ", flush=True)
        row = run(mutant, args.keep_going)
        report.append(row)
        print(f"{row['result']} ({row['seconds']:.0f} s): {row['detail']}", flush=True)
    survivors = [r["name"] for r in report if r["result"] != "caught"]
    print(f"\n{len(report) - len(survivors)} of {len(report)} mutants caught"
          + (f"; not caught: {', '.join(survivors)}" if survivors else ""))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    sys.exit(1 if survivors else 0)


if __name__ == "__main__":
    main()

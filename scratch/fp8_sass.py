"""Issue 27 study: the paged decode kernel compiled ahead of time for sm_90 (no GPU), with the
specialisation a real B = 64, 4k keys, GQA 32/8, d = 128 graph-replayed call gets, for the
8-bit pools (the shipped config) and the 16-bit ones; PTX, SASS, ptxas -v, and instruction
counts by class for the main key loop.

    env -u TRITON_INTERPRET PYTHONPATH=src .venv/bin/python scratch/fp8_sass.py \
        [--out DIR] [--variant NAME ...]        # ~1 min for all; scratch/fp8_sass.txt is its output

The arguments come from minimodel.paged_attention._launch_decode itself (its `launch` and
`num_sms` patched): the same pointers (None where the launch passes None), the same int
arguments, so the same divisibility-by-16 and equal-to-1 specialisations as Triton's JIT binder
gives a CUDA call (CPU tensors are 64-byte aligned, as CUDA allocations are 256-byte aligned).
Variants: VARIANTS (the kernel as shipped, other configs, other pool layouts: fp8_slotmajor
stores the scales (block, slot, head), _vT the V pool (block, head, d, slot)) and PATCHED
(a copy of the module with source replacements: HINTS, BLOCK_MASK, PREFETCH). Writes each
variant's TTGIR, PTX, SASS and its main loop's SASS (source line per instruction) to --out.
"""

import argparse
import collections
import contextlib
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from minimodel import paged_attention as pa  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
B, N, HQ, HKV, D, BS = 64, 4096, 32, 8, 128, 16
NUM_BLOCKS = 64  # the pool's block count is a do_not_specialize int: its value changes nothing
TARGET = GPUTarget("cuda", 90, 32)

# name: (fp8, scales head-major in a block, DecodeConfig override or None, V pool slot-major)
VARIANTS = {
    "fp8": (True, True, None, False),
    "fp16": (False, True, None, False),
    "fp8_n64": (True, True, pa.DecodeConfig(64, 4, 3), False),
    "fp8_slotmajor": (True, False, None, False),
    "fp8_w8": (True, True, pa.DecodeConfig(128, 8, 3), False),
    "fp8_s2": (True, True, pa.DecodeConfig(128, 4, 2), False),
    # V stored (block, head, d, slot) and passed as the (block, slot, head, d) view of it: the
    # kernel unchanged, its V strides (Hkv d BS, 1, d BS, BS), a block's 16 slots of one
    # channel 16 contiguous bytes (vLLM's value-cache order)
    "fp8_vT": (True, True, None, True),
    "fp8_vT_n64": (True, True, pa.DecodeConfig(64, 4, 3), True),
    "fp16_vT": (False, True, None, True),
    "fp8_vT_s2": (True, True, pa.DecodeConfig(128, 4, 2), True),
    "fp8_s4": (True, True, pa.DecodeConfig(128, 4, 4), False),
    "fp8_vT_s4": (True, True, pa.DecodeConfig(128, 4, 4), True),
    "fp8_vT_n64_s4": (True, True, pa.DecodeConfig(64, 4, 4), True),
}
# the same with AxisInfo hints in a patched copy of the module: a block's BLOCK_SIZE keys share
# one entry (constancy) and are consecutive slots (contiguity), so that a slot-major V tile is
# seen as runs of 16 contiguous bytes
HINTS = [("            slot = (j % BLOCK_SIZE).to(tl.int64)\n",
          "            slot = (j % BLOCK_SIZE).to(tl.int64)\n"
          "            slot = tl.max_contiguous(tl.multiple_of(slot, BLOCK_SIZE), BLOCK_SIZE)\n"
          "            phys = tl.max_constancy(phys, BLOCK_SIZE)\n")]
# and K/V loads masked per block (the table entry's check) only, as a loop over full tiles with
# the context's last tile peeled off would load them; the scores keep `visible`. Not a correct
# kernel for a context that ends inside a tile: an instruction-count bound for that split.
BLOCK_MASK = HINTS + [("        kv_mask = visible[:, None]\n",
                       "        kv_mask = tl.max_constancy(in_pool, BLOCK_SIZE)[:, None]\n")]
# the next tile's table entries loaded one iteration ahead into a loop-carried tensor, so that
# no K/V address depends on a load of its own iteration (the pipeliner may then give K and V
# their own stages); paged, BLOCK_SIZE < BLOCK_N only
PREFETCH = [
    ("    for start_n in tl.range(start, end, BLOCK_N):\n",
     "    blk_ar = tl.arange(0, BLOCK_N // BLOCK_SIZE)\n"
     "    row = table_ptr + b64 * stride_tb\n"
     "    blk0 = start // BLOCK_SIZE + blk_ar\n"
     "    entry_next = tl.load(row + blk0 * stride_tc, mask=blk0 * BLOCK_SIZE < end, "
     "other=0)\n"
     "    for start_n in tl.range(start, end, BLOCK_N):\n"),
    ("                entry = tl.load(table + blk * stride_tc, mask=blk * BLOCK_SIZE < end, "
     "other=0)\n",
     "                entry = entry_next\n"
     "                nblk = blk + BLOCK_N // BLOCK_SIZE\n"
     "                entry_next = tl.load(table + nblk * stride_tc, "
     "mask=nblk * BLOCK_SIZE < end,\n"
     "                                     other=0)\n"),
]
# every load of a tile issued at the top of its iteration, before the first product waits on
# one: V (the source loads it after the softmax) and, with 8-bit pools, both tiles' scales
# (plain loads whose latency the source exposes after each product). Paged only.
LOADS_FIRST = [
    ("        k = tl.load(k_head + k_rows[:, None] + k_cols, mask=kv_mask, other=0.0)\n",
     "        k = tl.load(k_head + k_rows[:, None] + k_cols, mask=kv_mask, other=0.0)\n"
     "        v = tl.load(v_head + v_rows[:, None] + v_cols, mask=kv_mask, other=0.0)\n"
     "        if FP8:\n"
     "            k_sc = tl.load(ks_head + phys * stride_ksblk + slot * stride_ksslot,\n"
     "                           mask=visible, other=0.0)\n"
     "            v_sc = tl.load(vs_head + phys * stride_vsblk + slot * stride_vsslot,\n"
     "                           mask=visible, other=0.0)\n"),
    ("            qk = qk * tl.load(ks_head + phys * stride_ksblk + slot * stride_ksslot, "
     "mask=visible,\n                              other=0.0)[None, :]\n",
     "            qk = qk * k_sc[None, :]\n"),
    ("        v = tl.load(v_head + v_rows[:, None] + v_cols, mask=kv_mask, other=0.0)\n"
     "        acc = acc * alpha[:, None]\n",
     "        acc = acc * alpha[:, None]\n"),
    ("            v_sc = tl.load(vs_head + phys * stride_vsblk + slot * stride_vsslot, "
     "mask=visible,\n                           other=0.0)\n", ""),
]
# each block's K and V row offsets (int64) computed once per block and given to its keys, a
# key adding only its slot's int32 offset: one 64-bit multiply per block, not per key. Compiled
# at 49be17b: far worse, not a candidate: 255 registers and ~1.3 KB spilled, the K/V loads no
# longer pipelined (21.5 KB of shared memory against 42 KB), 5,445 loop instructions a tile
# against 1,721 (fp16 likewise: 2,080 against 630): the reshaped int64 offsets defeat the
# pipeliner, as the row address must come from a layout the async copies can use
BLKADDR = [
    ("                phys = tl.reshape(per_key, [BLOCK_N]).to(tl.int64)\n",
     "                phys = tl.reshape(per_key, [BLOCK_N]).to(tl.int64)\n"
     "                e64 = entry.to(tl.int64)\n"
     "                kb = tl.reshape(tl.broadcast_to((e64 * stride_kblk)[:, None],\n"
     "                     [BLOCK_N // BLOCK_SIZE, BLOCK_SIZE]), [BLOCK_N])\n"
     "                vb = tl.reshape(tl.broadcast_to((e64 * stride_vblk)[:, None],\n"
     "                     [BLOCK_N // BLOCK_SIZE, BLOCK_SIZE]), [BLOCK_N])\n"),
    ("            k_rows = phys * stride_kblk + slot * stride_kslot\n"
     "            v_rows = phys * stride_vblk + slot * stride_vslot\n",
     "            k_rows = kb + (j % BLOCK_SIZE) * stride_kslot\n"
     "            v_rows = vb + (j % BLOCK_SIZE) * stride_vslot\n"),
]
# The kernel before the longest-first order (e6e892e): split calls of 64 to 512 sequences sort
# the batch in every program; this switches the order off.
UNORDERED = [("LONGEST_FIRST_BATCH = (64, 512)", "LONGEST_FIRST_BATCH = (1, 0)")]
PATCHED = {  # name: (variant it patches, source replacements)
    "fp8_unordered": ("fp8", UNORDERED),
    "fp16_unordered": ("fp16", UNORDERED),
    "fp8_prefetch": ("fp8", PREFETCH),
    "fp8_vT_blockmask_prefetch": ("fp8_vT", BLOCK_MASK + PREFETCH),
    "fp8_vT_n64_blockmask_prefetch": ("fp8_vT_n64", BLOCK_MASK + PREFETCH),
    "fp16_prefetch": ("fp16", PREFETCH),
    "fp8_blockmask": ("fp8", BLOCK_MASK),
    "fp8_vT_blockmask": ("fp8_vT", BLOCK_MASK),
    "fp16_blockmask": ("fp16", BLOCK_MASK),
    "fp8_vT_n64_blockmask": ("fp8_vT_n64", BLOCK_MASK),
    "fp8_vT_s2_blockmask": ("fp8_vT_s2", BLOCK_MASK),
    "fp8_vT_s4_blockmask": ("fp8_vT_s4", BLOCK_MASK),
    "fp8_vT_n64_s4_blockmask": ("fp8_vT_n64_s4", BLOCK_MASK),
    # and both dots on the tensor cores' e4m3 path (q and P~ cast to e4m3 unscaled: a compile
    # probe of the instruction mix, not an accurate kernel)
    "fp8_vT_blockmask_f8mma": ("fp8_vT", BLOCK_MASK + [
        ("        qk = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION)\n",
         "        qk = tl.dot(q.to(k.dtype), tl.trans(k))\n"),
        ("            acc = _scaled_pv(acc, p, v.to(q.dtype), v_sc, DOT_PRECISION)\n",
         "            acc = _scaled_pv(acc, p, v, v_sc, DOT_PRECISION)\n"),
        ("    pv = tl.dot((p * (v_scale / s_max)[None, :]).to(v.dtype), v, "
         "input_precision=DOT_PRECISION)",
         "    pv = tl.dot((p * (v_scale / s_max)[None, :]).to(v.dtype), v)")]),
    "fp8_loadsfirst": ("fp8", LOADS_FIRST),
    "fp8_loadsfirst_blockmask": ("fp8", LOADS_FIRST + BLOCK_MASK),
    "fp16_loadsfirst": ("fp16", LOADS_FIRST),
    "fp8_hints": ("fp8", HINTS),
    "fp8_blkaddr": ("fp8", BLKADDR),
    "fp8_blkaddr_blockmask": ("fp8", BLKADDR + BLOCK_MASK),
    "fp16_blkaddr": ("fp16", BLKADDR),
    "fp8_vT_hints": ("fp8_vT", HINTS),
    "fp16_vT_hints": ("fp16_vT", HINTS),
}


def patched_module(name: str, replacements):
    """A copy of minimodel.paged_attention with `replacements` made in its source."""
    import importlib.util
    src = Path(pa.__file__).read_text()
    for old, new in replacements:
        if old not in src:
            raise SystemExit(f"{name}: {old!r} not in paged_attention.py")
        src = src.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"pa_{name}.py"  # jit reads its function's source file
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"pa_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def capture(fp8: bool, head_major: bool, cfg, v_slot_major: bool = False, module=pa):
    """(kernel, grid, args, meta) of _launch_decode's decode launch at the issue's shape."""
    dt = pa.FP8_DTYPE if fp8 else torch.float16
    q = torch.zeros(B, HQ, D, dtype=torch.float16)
    k_pool, v_pool = (torch.zeros(NUM_BLOCKS, BS, HKV, D, dtype=torch.float16).to(dt)
                      for _ in "kv")
    if v_slot_major:
        v_pool = torch.zeros(NUM_BLOCKS, HKV, D, BS, dtype=torch.float16).to(dt)
        v_pool = v_pool.permute(0, 3, 1, 2)  # (block, slot, head, d), slot stride 1
    table = torch.zeros(B, N // BS, dtype=torch.int32)
    lens = torch.full((B,), N, dtype=torch.int32)
    scales = None
    if fp8:
        if head_major:  # as attention._scale_pools and bench.fp8_decode store them
            scales = tuple(torch.ones(NUM_BLOCKS, HKV, BS).transpose(1, 2) for _ in "kv")
        else:  # (block, slot, head) contiguous: consecutive slots Hkv * 4 bytes apart
            scales = tuple(torch.ones(NUM_BLOCKS, BS, HKV) for _ in "kv")
    seen = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(
            module, "launch", lambda k, g, *a, **m: seen.append((k, g, a, m))))
        stack.enter_context(mock.patch.object(module, "num_sms", lambda device: 132))
        if cfg is not None:
            stack.enter_context(mock.patch.object(module, "decode_config", lambda *a: cfg))
        module._launch_decode(q, k_pool, v_pool, table, lens, n_k=0, strides_k=k_pool.stride(),
                          strides_v=v_pool.stride(), block_size=BS, n_kv_heads=HKV,
                          max_context_len=N, window=None, num_splits=None, tau=D**-0.5,
                          scales=scales, with_lse=False)
    return seen[0]  # the decode kernel (the merge, when unfolded, comes second)


def compile_like_jit(kernel, args, meta):
    """triton.compile with the signature, constexprs and attrs Triton's binder would give."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, spec, options = binder(*args, **meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, meta, bound, spec, options)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=TARGET,
                              options=options.__dict__)
    return compiled, signature, constexprs, attrs


def ptxas_v(ptx: str) -> tuple[str, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        run = subprocess.run([BIN / "ptxas", "-v", "--gpu-name", "sm_90a", f"{tmp}/k.ptx", "-o",
                              f"{tmp}/k.cubin"], capture_output=True, text=True)
    text = " | ".join(line.split(":", 1)[-1].strip() for line in run.stderr.splitlines()
                      if "registers" in line or "spill" in line or "smem" in line)
    regs = int(re.search(r"Used (\d+) registers", text).group(1))
    spills = re.search(r"(\d+) bytes spill stores", text).group(1)
    return text, regs, int(spills)


def programs_per_sm(regs: int, warps: int, shared: int) -> tuple[int, int]:
    """(by registers, by shared memory): sm_90's 64K registers allocated per warp in units of
    256, 228 KiB of shared memory with 1 KiB reserved per program."""
    per_warp = math.ceil(regs * 32 / 256) * 256
    return (65536 // per_warp) // warps, 233472 // (shared + 1024)


def sass(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.cubin").write_bytes(cubin)
        return subprocess.run([BIN / "nvdisasm", "-c", "-g", f"{tmp}/k.cubin"],
                              capture_output=True, text=True, check=True).stdout


SASS_CLASSES = [  # first match wins: (class, regex on the opcode)
    ("mma", r"^HMMA|^HGMMA|^WARPGROUP"),
    ("global_async", r"^LDGSTS|^LDGDEPBAR|^DEPBAR|^UBLKCP|^UTMALDG|^SYNCS"),
    ("global_ld", r"^LDG"),
    ("global_st", r"^STG|^RED|^ATOM"),
    ("shared_ldmatrix", r"^LDSM"),
    ("shared_ld", r"^LDS"),
    ("shared_st", r"^STS"),
    ("convert", r"^F2FP|^F2F|^I2F|^F2I|^HADD2\.F32|^PRMT"),
    ("shuffle", r"^SHFL"),
    ("fp32", r"^FMUL|^FADD|^FFMA|^FMNMX|^MUFU|^FSETP|^FSEL|^FCHK"),
    ("fp16x2", r"^HMUL2|^HADD2|^HFMA2|^HMNMX2"),
    ("int_addr", r"^IMAD|^IADD|^LEA|^SHF|^LOP|^ISETP|^SEL|^IABS|^IMNMX|^VIADD|^VIMNMX|^SHL|^SHR"
                 r"|^UIMAD|^UIADD|^ULEA|^USHF|^ULOP|^UISETP|^USEL|^UMOV|^MOV|^S2R|^S2UR|^CS2R"
                 r"|^R2UR|^PLOP|^P2R|^R2P|^IABS|^FLO|^POPC|^BREV|^UPRMT|^UFLO|^VOTE"),
    ("control", r"^BRA|^BAR|^BSSY|^BSYNC|^EXIT|^NOP|^WARPSYNC|^CALL|^RET|^YIELD|^ELECT"),
]


def sass_lines(text: str):
    """(address, opcode, text, source line, label) of each SASS instruction, in order: the
    source line from nvdisasm -g's line comments, the label of a branch target before it."""
    out, src, label = [], 0, None
    for line in text.splitlines():
        m = re.match(r"\s*//## File .*, line (\d+)", line)
        if m:
            src = int(m.group(1))
            continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            label = m.group(1)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(3), line.strip(), src, label))
            label = None
    return out


def classify(op: str) -> str:
    for name, pattern in SASS_CLASSES:
        if re.search(pattern, op):
            return name
    return "other"


def main_loop(lines):
    """The SASS of the main key loop: the backward branch whose body holds the most MMAs."""
    where = {lab: i for i, (*_, lab) in enumerate(lines) if lab}
    best = []
    for i, (_, _, text, *_) in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", text)
        if m and m.group(1) in where and where[m.group(1)] <= i:
            body = lines[where[m.group(1)] : i + 1]
            if sum(classify(x[1]) == "mma" for x in body) > sum(
                    classify(x[1]) == "mma" for x in best):
                best = body
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/fp8study")
    parser.add_argument("--variant", nargs="*", default=list(VARIANTS) + list(PATCHED))
    a = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("run with TRITON_INTERPRET unset: the interpreter compiles nothing")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in a.variant:
        if name in PATCHED:
            base, replacements = PATCHED[name]
            kernel, grid, args, meta = capture(*VARIANTS[base], patched_module(name, replacements))
        else:
            kernel, grid, args, meta = capture(*VARIANTS[name])
        compiled, signature, constexprs, attrs = compile_like_jit(kernel, args, meta)
        for ext in ("ttgir", "ptx"):
            (out / f"{name}.{ext}").write_text(compiled.asm[ext])
        text = sass(compiled.asm["cubin"])
        (out / f"{name}.sass").write_text(text)
        lines = sass_lines(text)
        loop = main_loop(lines)
        by_class = collections.Counter(classify(x[1]) for x in loop)
        ops = collections.Counter(x[1].split(".")[0] for x in loop)
        names = kernel.arg_names
        spec = {names[k[0]]: v for k, v in constexprs.items()
                if names[k[0]] not in meta and v is not None}
        div16 = [names[k[0]] for k, v in attrs.items() if "tt.divisibility" in str(v)]
        print(f"== {name}: grid {grid}, meta BLOCK_N={meta['BLOCK_N']} BLOCK_G={meta['BLOCK_G']}"
              f" warps={meta['num_warps']} stages={meta['num_stages']} FOLD={meta['FOLD']}")
        print(f"   ints specialised to constants: {spec}")
        print(f"   divisible by 16: {div16}")
        report, regs, spills = ptxas_v(compiled.asm["ptx"])
        smem = compiled.metadata.shared
        by_regs, by_smem = programs_per_sm(regs, meta["num_warps"], smem)
        buffers = re.findall(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x\d+x\d+x",
                             compiled.asm["ttgir"])
        print(f"   shared bytes {smem}; ptxas: {report}")
        print(f"   programs/SM: {min(by_regs, by_smem)} (registers {by_regs}, shared {by_smem});"
              f" K/V tile buffers {buffers}")
        summary.append((name, meta["BLOCK_N"], regs, spills, smem, min(by_regs, by_smem),
                        "x".join(buffers[:1]), len(loop), len(loop) / meta["BLOCK_N"]))
        print(f"   SASS total {len(lines)} instructions; main loop {len(loop)} "
              f"({loop[0][0]:#x}..{loop[-1][0]:#x})" if loop else "   no loop found")
        print("   loop by class:", dict(sorted(by_class.items(), key=lambda x: -x[1])))
        print("   loop opcodes:", dict(sorted(ops.items(), key=lambda x: -x[1])))
        (out / f"{name}.loop.sass").write_text(
            "\n".join(f"L{x[3]:<5} {x[2]}" for x in loop))
        per_line = collections.defaultdict(collections.Counter)
        for x in loop:
            per_line[x[3]][classify(x[1])] += 1
        print("   loop by source line:")
        for ln in sorted(per_line):
            print(f"     {ln:5d}: {sum(per_line[ln].values()):4d} {dict(per_line[ln])}")
        sys.stdout.flush()
    print("\nvariant                         BLOCK_N regs spill  smem  prog/SM bufs loop/tile"
          " loop/key")
    for row in summary:
        print("{:32s}{:6d}{:5d}{:6d}{:7d}{:6d}{:>6s}{:9d}{:9.1f}".format(*row))


if __name__ == "__main__":
    main()

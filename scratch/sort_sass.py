"""Decode study, offline (no GPU): what the longest-first order changes in the compiled decode
kernel. scratch/sort_probe.py measured the sort 17-18% slower on uniform B = 16 rows (five
splits) and 4% faster on uniform B = 64 (two splits); this compiles the kernel for sm_90 with
the arguments _launch_decode gives those calls (paged, blocks of 16, GQA 32/8, d = 128, fp16)
with LONGEST_FIRST at 0, 16 and 64, and prints ptxas's registers, spills and shared memory, the
programs per SM they allow, and the SASS instruction count.

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch .venv/bin/python scratch/sort_sass.py
"""

import contextlib
from unittest import mock

import torch
from fp8_sass import compile_like_jit, patched_module, programs_per_sm, ptxas_v, sass

from minimodel import paged_attention as pa

D, HQ, HKV, BS = 128, 32, 8, 16
# the sort on int32 keys: a length saturated at 2^22 - 1 in the high bits, the index reversed in
# the low 9 (a batch of at most 512); the order of lengths past 4M keys is the batch's, which
# is enough for a schedule. Not shipped: compiled here only
INT32_KEYS = [
    (
        "    key = (n.to(tl.int64) + 2**31) * BLOCK_B + (BLOCK_B - 1 - ib)"
        "  # >= 0 for any int32 length\n",
        "    key = tl.minimum(tl.maximum(n, 0), 2**22 - 1) * 512 + (511 - ib)\n",
    ),
    ("    return BLOCK_B - 1 - mine % BLOCK_B\n", "    return 511 - mine % 512\n"),
]


def launch_of(b: int, n: int, width: int | None, module=pa, hq=HQ, hkv=HKV, block_n=None):
    """(kernel, grid, args, meta) of the decode launch of a paged call of b sequences of n keys
    (hq query heads on hkv kv heads, d = 128, fp16, blocks of 16), LONGEST_FIRST forced to
    `width` and the tile to `block_n` keys (None: as _launch_decode chooses)."""
    q = torch.zeros(b, hq, D, dtype=torch.float16)
    k_pool, v_pool = (torch.zeros(64, BS, hkv, D, dtype=torch.float16) for _ in "kv")
    table = torch.zeros(b, n // BS, dtype=torch.int32)
    lens = torch.full((b,), n, dtype=torch.int32)
    seen = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(module, "launch", lambda k, g, *a, **m: seen.append((k, g, a, m)))
        )
        stack.enter_context(mock.patch.object(module, "num_sms", lambda device: 132))
        if block_n is not None:
            cfg = module.DecodeConfig(block_n, 4, 3)
            stack.enter_context(mock.patch.object(module, "decode_config", lambda *a: cfg))
        module._launch_decode(
            q,
            k_pool,
            v_pool,
            table,
            lens,
            n_k=0,
            strides_k=k_pool.stride(),
            strides_v=v_pool.stride(),
            block_size=BS,
            n_kv_heads=hkv,
            max_context_len=n,
            window=None,
            num_splits=None,
            tau=D**-0.5,
            with_lse=False,
        )
    kernel, grid, args, meta = seen[0]
    if width is not None:
        meta = {**meta, "LONGEST_FIRST": width}
    return kernel, grid, args, meta


def main() -> None:
    int32 = patched_module("int32_keys", INT32_KEYS)
    for b, n, widths in ((16, 32768, (0, 16, 64)), (64, 4096, (0, 64))):
        for width, name, module in [
            *((w, "", pa) for w in widths),
            *((w, " int32 keys", int32) for w in widths if w),
        ]:
            kernel, grid, args, meta = launch_of(b, n, width, module)
            compiled = compile_like_jit(kernel, args, meta)[0]
            text, regs, spills = ptxas_v(compiled.asm["ptx"])
            shared = compiled.metadata.shared
            by_regs, by_smem = programs_per_sm(regs, meta["num_warps"], shared)
            count = sum(
                1
                for line in sass(compiled.asm["cubin"]).splitlines()
                if line.strip().startswith("/*") and ";" in line
            )
            print(
                f"B={b} n={n} grid={grid} LONGEST_FIRST={width}{name}: {regs} registers, "
                f"{spills} B spilled, {shared} B shared -> {min(by_regs, by_smem)} programs/SM "
                f"(registers {by_regs}, shared {by_smem}); {count} SASS instructions",
                flush=True,
            )


if __name__ == "__main__":
    main()

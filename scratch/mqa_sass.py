"""MQA decode study, offline (no GPU): the decode kernel compiled for sm_90 as the MQA call
gets it (B = 64, 4k keys, 32 query heads on one kv head, d = 128, fp16, blocks of 16: one
32-row program per sequence and split), shipped (64-key tiles), with 128-key tiles, with the
next tile's table entries loaded one iteration ahead (fp8_sass.py's PREFETCH), and both, each
also with the longest-first sort off (LONGEST_FIRST = 0, as before e6e892e); ptxas's
registers, spills and shared memory, the programs per SM they allow, the grid, and the SASS
instruction count. scratch/next_probe.py times the same variants on the H200.

    env -u TRITON_INTERPRET PYTHONPATH=src:scratch .venv/bin/python scratch/mqa_sass.py
"""

from fp8_sass import PREFETCH, compile_like_jit, patched_module, programs_per_sm, ptxas_v, sass
from sort_sass import launch_of

from minimodel import paged_attention as pa

B, N, HQ, HKV = 64, 4096, 32, 1  # d = 128, blocks of 16: sort_sass.launch_of's


def main() -> None:
    prefetch = patched_module("mqa_prefetch", PREFETCH)
    for name, module, block_n, width in (
        ("shipped", pa, None, None),
        ("shipped, no sort", pa, None, 0),
        ("tiles128", pa, 128, None),
        ("tiles128, no sort", pa, 128, 0),
        ("prefetch", prefetch, None, None),
        ("prefetch, no sort", prefetch, None, 0),
        ("prefetch_tiles128", prefetch, 128, None),
    ):
        kernel, grid, args, meta = launch_of(B, N, width, module, HQ, HKV, block_n)
        compiled = compile_like_jit(kernel, args, meta)[0]
        _, regs, spills = ptxas_v(compiled.asm["ptx"])
        shared = compiled.metadata.shared
        by_regs, by_smem = programs_per_sm(regs, meta["num_warps"], shared)
        count = sum(
            1
            for line in sass(compiled.asm["cubin"]).splitlines()
            if line.strip().startswith("/*") and ";" in line
        )
        print(
            f"{name}: BLOCK_G={meta['BLOCK_G']} BLOCK_N={meta['BLOCK_N']} grid={grid} "
            f"LONGEST_FIRST={meta['LONGEST_FIRST']}: {regs} registers, {spills} B spilled, "
            f"{shared} B shared -> {min(by_regs, by_smem)} programs/SM (registers {by_regs}, "
            f"shared {by_smem}); {count} SASS instructions",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Tables and figure of Theory 02 (FlashAttention), from minimodel.roofline and the H200 data.

    python -m figures.flash            # write docs/generated/flash-*.md, docs/figures/*.svg
    python -m figures.flash --check    # fail if the committed ones are stale

Bytes and FLOPs come from minimodel.roofline. The tile-fit estimates (shared memory, registers)
are computed here, with the hardware limits named below. Measured numbers come from
data/flash-config-sweep-h200.json, data/bench-attention-h200.json and data/ceilings-h200.json and
data/mufu-h200.json (figures.core.h200_exp_rate); the claims that
Theory 02 makes about the sweep and the exponential roof are tests over the data
(tests/test_data_claims.py, test_flash_*), so the page cannot silently outlive its data.
"""

import json
import math
from collections import defaultdict

from figures.core import ROOT, emit, h200_measured, markdown_table, roofline_svg
from minimodel.attention_flash import FLASH_CONFIGS, SMEM_BUDGET, smem_bytes
from minimodel.ceilings import HARDWARE, Ceilings
from minimodel.roofline import (
    arithmetic_intensity,
    attention_flops,
    attention_min_bytes,
    flash_attention_bytes,
    naive_attention_bytes,
)
from minimodel.roofline_plot import RooflinePoint

SWEEP = ROOT / "data" / "flash-config-sweep-h200.json"
BENCH = ROOT / "data" / "bench-attention-h200.json"
MEASURED = ROOT / "data" / "ceilings-h200.json"
E = 2  # bytes per element: fp16 / bf16

# Hopper (compute capability 9.0), CUDA C++ programming guide: shared memory one block may opt in
# to, the part of each SM's shared memory reserved per resident block, and the register file.
SMEM_PER_BLOCK = 227 * 1024
SMEM_RESERVED_PER_BLOCK = 1024
REGS_PER_SM = 64 * 1024  # 32-bit registers
REGS_PER_THREAD = 255


def measured_ceilings() -> dict:
    return json.loads(MEASURED.read_text())["ceilings"]


def roofs() -> list[Ceilings]:
    return [HARDWARE["H200"], h200_measured()]


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.2f}" if nbytes < 100 * 2**20 else f"{nbytes / 2**20:,.0f}"


# --- Bytes and intensity per head: naive, tiled Flash, compulsory -------------------------------


def byte_rows(n: int, d: int) -> list[tuple[str, int]]:
    """(label, bytes) for one (batch, head), MHA, no mask."""
    return [
        ("naive (S, P in HBM)", naive_attention_bytes(1, 1, 1, n, n, d)),
        ("Flash, BLOCK_M=64, no reuse", flash_attention_bytes(1, 1, 1, n, n, d, block_m=64)),
        ("Flash, BLOCK_M=128, no reuse", flash_attention_bytes(1, 1, 1, n, n, d, block_m=128)),
        ("compulsory", attention_min_bytes(1, 1, 1, n, n, d)),
    ]


def bytes_table() -> str:
    datasheet, measured = roofs()
    rows = []
    for n in (64, 2048, 8192):
        for d in (64, 128):
            flops = attention_flops(1, 1, n, n, d)
            for label, nbytes in byte_rows(n, d):
                i = arithmetic_intensity(flops, nbytes)
                rows.append(
                    [
                        n,
                        d,
                        label,
                        mib(nbytes),
                        f"{i:,.1f}",
                        f"{datasheet.attainable(i) / 1e12:,.0f}",
                        f"{measured.attainable(i) / 1e12:,.0f}",
                    ]
                )
    header = [
        "N",
        "d",
        "bytes counted",
        "MiB per head",
        "I (FLOP/B)",
        f"attainable TFLOP/s, datasheet (ridge {datasheet.ridge:.0f})",
        f"measured roofs (ridge {measured.ridge:.0f})",
    ]
    return markdown_table(header, rows)


# --- Masks and GQA -----------------------------------------------------------------------------

MASK_HQ, MASK_D, MASK_BM, MASK_BN, MASK_W = 32, 128, 128, 64, 1024


def mask_rows() -> list[list[object]]:
    rows = []
    cases = [
        (n, hkv, mask)
        for n in (2048, 8192, 32768)
        for hkv, mask in [
            (MASK_HQ, {}),
            (MASK_HQ, {"causal": True}),
            (MASK_HQ, {"causal": True, "window": MASK_W}),
        ]
    ]
    cases += [(8192, hkv, mask) for hkv in (8, 1) for mask in ({}, {"causal": True})]
    for n, hkv, mask in cases:
        flops = attention_flops(1, MASK_HQ, n, n, MASK_D, **mask)
        dense_flops = attention_flops(1, MASK_HQ, n, n, MASK_D)
        tiles = {"block_m": MASK_BM, "block_n": MASK_BN}
        flash = flash_attention_bytes(1, MASK_HQ, hkv, n, n, MASK_D, **tiles, **mask)
        dense = flash_attention_bytes(1, MASK_HQ, hkv, n, n, MASK_D, **tiles)
        floor = attention_min_bytes(1, MASK_HQ, hkv, n, n, MASK_D)
        label = (
            "dense"
            if not mask
            else "causal"
            if "window" not in mask
            else f"causal, W={mask['window']}"
        )
        heads = "MHA" if hkv == MASK_HQ else f"{MASK_HQ}/{hkv}"
        rows.append(
            [
                f"{n:,}",
                label,
                heads,
                f"{flops / 1e9:,.0f}",
                f"{flops / dense_flops:.3f}",
                f"{flash / 2**30:,.2f}",
                f"{flash / dense:.3f}",
                mib(floor),
                f"{arithmetic_intensity(flops, flash):,.0f}",
                f"{arithmetic_intensity(flops, floor):,.0f}",
            ]
        )
    return rows


def masks_table() -> str:
    header = [
        "N",
        "mask",
        "Hq/Hkv",
        "GFLOP",
        "FLOPs / dense",
        "Flash GiB (no reuse)",
        "Flash bytes / dense",
        "compulsory MiB",
        "I Flash (no reuse)",
        "I compulsory",
    ]
    return markdown_table(header, mask_rows())


# --- Which tiles fit: shared memory and registers -----------------------------------------------


def smem(d: int, bm: int, bn: int, stages: int) -> int:
    """The kernel's own model (Lab 02's smem_bytes): one Q tile plus `stages` K and V tiles."""
    return smem_bytes(bm, bn, stages, d, E)


def blocks_by_smem(nbytes: int) -> int:
    return measured_ceilings()["smem_per_sm_bytes"] // (nbytes + SMEM_RESERVED_PER_BLOCK)


def regs_estimate(d: int, bm: int, bn: int, warps: int) -> tuple[int, int]:
    """32-bit registers per thread: (fp32 accumulator + fp32 score tile, plus the 16-bit P copy).

    Only the big tiles: addresses, m_i, l_i and the compiler's temporaries come on top, and the
    compiler may convert S to P in place (then the first number is the peak). An estimate, not
    what the compiler will allocate; spills show up as local-memory traffic in a profile.
    """
    threads = 32 * warps
    acc_s = math.ceil((bm * d + bm * bn) / threads)
    return acc_s, acc_s + math.ceil(bm * bn * E / 4 / threads)


def regs_cell(d: int, bm: int, bn: int, warps: int) -> str:
    acc_s, with_p = regs_estimate(d, bm, bn, warps)
    return f"{acc_s} / {with_p}" + (" (over)" if acc_s > REGS_PER_THREAD else "")


# Tiles to compare at every head dim, next to the autotuner's own candidates for that head dim
# (Lab 02's FLASH_CONFIGS, keyed by the padded head dim).
COMPARED_TILES = [
    (64, 64, 2),
    (64, 64, 3),
    (64, 128, 2),
    (128, 64, 2),
    (128, 64, 3),
    (128, 128, 2),
    (128, 128, 3),
    (256, 64, 2),
]


def tile_fit_table() -> str:
    rows = []
    for d in (64, 128, 256):
        tuned = FLASH_CONFIGS.get(d, [])
        tiles = sorted(set(COMPARED_TILES) | {(bm, bn, s) for bm, bn, _, s in tuned})
        for bm, bn, stages in tiles:
            s = smem(d, bm, bn, stages)
            if s > SMEM_PER_BLOCK:
                fits = "no"
            elif s > SMEM_BUDGET:
                fits = "yes, over the kernel's 200"
            else:
                fits = "yes"
            warps = [w for bm_, bn_, w, s_ in tuned if (bm_, bn_, s_) == (bm, bn, stages)]
            rows.append(
                [
                    d,
                    bm,
                    bn,
                    stages,
                    f"{s / 1024:.0f}",
                    fits,
                    blocks_by_smem(s) if s <= SMEM_PER_BLOCK else "-",
                    regs_cell(d, bm, bn, 4),
                    regs_cell(d, bm, bn, 8),
                    "-"
                    if not warps
                    else "pruned"
                    if s > SMEM_BUDGET
                    else ", ".join(f"{w} warps" for w in warps),
                ]
            )
    header = [
        "d",
        "BLOCK_M",
        "BLOCK_N",
        "stages",
        "shared KiB",
        "fits 227 KiB",
        "blocks/SM (shared)",
        "regs/thread, 4 warps",
        "8 warps",
        "autotuner",
    ]
    return markdown_table(header, rows)


# --- The measured sweep --------------------------------------------------------------------------


def sweep() -> dict[tuple, dict]:
    """{(d, causal, n, b, h): {"minimodel": {config: record}, "sdpa_flash": rec, ...}}."""
    shapes: dict[tuple, dict] = defaultdict(lambda: {"minimodel": {}})
    for r in json.loads(SWEEP.read_text())["records"]:
        key = (r["d"], r["causal"], r["n"], r["b"], r["h"])
        if r["impl"] == "minimodel":
            shapes[key]["minimodel"][tuple(r["config"])] = r
        else:
            shapes[key][r["impl"]] = r
    return dict(sorted(shapes.items()))


def cfg(c: tuple) -> str:
    """(BM, BN, warps, stages), with no-break spaces: a configuration never wraps in a table."""
    return "({}, {}, {}, {})".format(*c).replace(" ", "\u00a0")


def no_reuse_rate(key: tuple, config: tuple, ms: float) -> float:
    """Bytes/s the run would have needed from HBM if no tile were reused (it stored no lse)."""
    d, causal, n, b, h = key
    nbytes = flash_attention_bytes(
        b, h, h, n, n, d, block_m=config[0], block_n=config[1], causal=causal, lse=False
    )
    return nbytes / (ms * 1e-3)


def sweep_best_table() -> str:
    bandwidth = measured_ceilings()["bandwidth"]
    rows = []
    for key, impls in sweep().items():
        d, causal, n, b, h = key
        best_cfg, best = max(impls["minimodel"].items(), key=lambda kv: kv[1]["tflops"])
        rate = no_reuse_rate(key, best_cfg, best["ms"])
        rows.append(
            [
                d,
                "yes" if causal else "no",
                f"{n:,}",
                f"{b} x {h}",
                cfg(best_cfg),
                f"{best['tflops']:.0f}",
                f"{impls['sdpa_cudnn']['tflops']:.0f}",
                f"{impls['sdpa_flash']['tflops']:.0f}",
                f"{best['tflops'] / impls['sdpa_cudnn']['tflops']:.0%}",
                f"{best['tflops'] * 1e12 / measured_ceilings()['peak_flops']:.0%}",
                f"{rate / 1e12:.1f}" + (" (> copy)" if rate > bandwidth else ""),
            ]
        )
    header = [
        "d",
        "causal",
        "N",
        "B x H",
        "best (BM, BN, warps, stages)",
        "TFLOP/s",
        "cuDNN",
        "FA2 (SDPA)",
        "best / cuDNN",
        "of matmul",
        "TB/s if no reuse",
    ]
    return markdown_table(header, rows)


SWEEP_CONFIGS = [
    (128, 64, 4, 2),
    (128, 64, 4, 3),
    (128, 64, 8, 3),
    (128, 128, 4, 2),
    (128, 128, 4, 3),
    (128, 128, 4, 4),
    (128, 128, 8, 2),
    (64, 64, 4, 3),
    (64, 128, 4, 2),
    (64, 128, 4, 4),
]


def sweep_configs_table() -> str:
    shapes = sweep()
    rows = []
    for d in (64, 128):
        keys = [k for k in shapes if k[0] == d]
        for c in SWEEP_CONFIGS:
            if not any(c in shapes[k]["minimodel"] for k in keys):
                continue  # the sweep ran only what fits the kernel's shared-memory budget
            bm, bn, warps, stages = c
            s = smem(d, bm, bn, stages)
            cells = []
            for k in keys:
                runs = shapes[k]["minimodel"]
                if c not in runs:
                    cells.append("not run")
                    continue
                best = max(r["tflops"] for r in runs.values())
                cells.append(f"{runs[c]['tflops']:.0f} ({runs[c]['tflops'] / best:.0%})")
            rows.append(
                [
                    d,
                    cfg(c),
                    f"{s / 1024:.0f}",
                    blocks_by_smem(s),
                    regs_cell(d, bm, bn, warps),
                    *cells,
                ]
            )
    keys = [k for k in shapes if k[0] == 64]
    header = [
        "d",
        "(BM, BN, warps, stages)",
        "shared KiB",
        "blocks/SM (shared)",
        "regs/thread (est.)",
    ] + [f"N={n:,}{', causal' if causal else ''}" for _, causal, n, _, _ in keys]
    return markdown_table(header, rows)


# --- The exponential roof against the measured rates -------------------------------------------


def bench_best(d: int, impl: str) -> dict:
    """The fastest fp16 run without a mask of `impl` at head dim d, over FlashAttention-2's grid."""
    runs = [
        r
        for r in json.loads(BENCH.read_text())["records"]
        if r["group"] == "fa2"
        and r["dtype"] == "float16"
        and not r["causal"]
        and r["d"] == d
        and r["impl"] == impl
    ]
    return max(runs, key=lambda r: r["tflops"])


EXP_IMPLS = [("minimodel", "ours"), ("sdpa_cudnn", "cuDNN"), ("sdpa_flash", "FA2 (SDPA)")]


def exp_roof_rows() -> list[dict]:
    roof = h200_measured()
    rows = []
    for d in (64, 128):
        cap = roof.attention_roof(d)
        exp_time, mma_time = 1 / roof.exp_rate, 4 * d / roof.peak_flops  # per score
        rows.append(
            {
                "d": d,
                "cap": cap,
                "overlapped": roof.attention_roof(d, overlapped=True),
                "exp_share": exp_time / (exp_time + mma_time),
                "best": {impl: bench_best(d, impl) for impl, _ in EXP_IMPLS},
            }
        )
    return rows


def exp_roof_table() -> str:
    roof = h200_measured()
    out = []
    for r in exp_roof_rows():
        best = [
            f"{b['tflops']:.0f} ({b['tflops'] * 1e12 / r['cap']:.0%})" for b in r["best"].values()
        ]
        out.append(
            [
                r["d"],
                4 * r["d"],
                f"{r['exp_share']:.0%}",
                f"{r['cap'] / 1e12:.0f} ({r['cap'] / roof.peak_flops:.0%})",
                f"{r['overlapped'] / 1e12:.0f}",
                *best,
            ]
        )
    header = [
        "d",
        "FLOPs per exp2",
        "exp2 share of the time",
        "cap, not overlapped (of matmul)",
        "cap, overlapped",
        *(f"{name}: best TFLOP/s (of cap)" for _, name in EXP_IMPLS),
    ]
    return markdown_table(header, out)


def figure_points() -> list[RooflinePoint]:
    b, h, d = 1, 16, 64  # Theory 00's anchor shape
    points = []
    for n in (64, 2048):
        flops = attention_flops(b, h, n, n, d)
        cases = [("naive", naive_attention_bytes(b, h, h, n, n, d))]
        if n <= 128:
            one_tile = flash_attention_bytes(b, h, h, n, n, d, block_m=128)
            cases.append(("Flash (one tile) ~ compulsory", one_tile))
        else:
            cases += [
                (f"Flash BM={bm}, no reuse", flash_attention_bytes(b, h, h, n, n, d, block_m=bm))
                for bm in (64, 128)
            ]
            cases.append(("compulsory", attention_min_bytes(b, h, h, n, n, d)))
        points += [
            RooflinePoint(f"{label} N={n}", arithmetic_intensity(flops, nbytes))
            for label, nbytes in cases
        ]
    return points


def outputs() -> dict[str, str | bytes]:
    points = figure_points()
    return {
        "generated/flash-bytes.md": bytes_table(),
        "generated/flash-masks.md": masks_table(),
        "generated/flash-tile-fit.md": tile_fit_table(),
        "generated/flash-sweep-best.md": sweep_best_table(),
        "generated/flash-sweep-configs.md": sweep_configs_table(),
        "generated/flash-exp-roof.md": exp_roof_table(),
        "figures/roofline-flash.svg": roofline_svg(
            roofs(),
            points,
            head_dim=64,
            title="Naive, tiled Flash and compulsory bytes (d=64, fp16)",
        ),
    }


if __name__ == "__main__":
    emit(outputs())

"""Theory 02's tables and figure: bytes, masks and tile fit from minimodel.roofline; the tile sweep
(data/flash-config-sweep-h200.json) and the exponential roof (data/bench-attention-h200.json)."""

import itertools
import math
from collections import defaultdict

from figures.core import DASH, h200_measured, load, markdown_table, roofline_svg, share, yes
from minimodel.attention_flash import FLASH_CONFIGS, SMEM_BUDGET, smem_bytes
from minimodel.ceilings import HARDWARE
from minimodel.roofline import attention_flops as flops_of
from minimodel.roofline import attention_min_bytes, flash_attention_bytes, naive_attention_bytes
from minimodel.roofline_plot import RooflinePoint

E = 2  # bytes per element: fp16 / bf16
# Hopper (compute capability 9.0), CUDA C++ programming guide: shared memory one block may opt in
# to, the part of each SM's shared memory reserved per resident block, and a thread's registers.
SMEM_PER_BLOCK = 227 * 1024
SMEM_RESERVED_PER_BLOCK = 1024
REGS_PER_THREAD = 255


def mib(nbytes: float) -> str:
    return format(nbytes / 2**20, ",.2f" if nbytes < 100 * 2**20 else ",.0f")


def bytes_table() -> str:
    """Bytes and intensity per (batch, head), MHA, no mask: naive, tiled Flash, compulsory."""
    datasheet, measured, rows = HARDWARE["H200"], h200_measured(), []
    for n, d in itertools.product((64, 2048, 8192), (64, 128)):
        shape = (1, 1, 1, n, n, d)
        counted = [("naive (S, P in HBM)", naive_attention_bytes(*shape))]
        for bm in (64, 128):
            label = f"Flash, BLOCK_M={bm}, no reuse"
            counted.append((label, flash_attention_bytes(*shape, block_m=bm)))
        counted.append(("compulsory", attention_min_bytes(*shape)))
        for label, nbytes in counted:
            i = flops_of(1, 1, n, n, d) / nbytes
            roofs = [f"{c.attainable(i) / 1e12:,.0f}" for c in (datasheet, measured)]
            rows.append([n, d, label, mib(nbytes), f"{i:,.1f}", *roofs])
    header = "N | d | bytes counted | MiB per head | I (FLOP/B)"
    header += " | attainable TFLOP/s (two roofs), datasheet"
    header += f" (ridge {datasheet.ridge:.0f}) | measured roofs (ridge {measured.ridge:.0f})"
    return markdown_table(header, rows)


MASK_HQ, MASK_D, MASK_TILES, MASK_W = 32, 128, {"block_m": 128, "block_n": 64}, 1024


def masks_table() -> str:
    """FLOPs and bytes of masks and GQA against dense MHA."""
    masks = ({}, {"causal": True}, {"causal": True, "window": MASK_W})
    cases = [(n, MASK_HQ, mask) for n in (2048, 8192, 32768) for mask in masks]
    cases += [(8192, hkv, mask) for hkv in (8, 1) for mask in masks[:2]]  # GQA, MQA: no window
    rows = []
    for n, hkv, mask in cases:
        shape = (1, MASK_HQ, hkv, n, n, MASK_D)
        flops, dense_flops = (flops_of(1, MASK_HQ, n, n, MASK_D, **m) for m in (mask, {}))
        flash, dense = (flash_attention_bytes(*shape, **MASK_TILES, **m) for m in (mask, {}))
        floor = attention_min_bytes(*shape)
        label = {0: "dense", 1: "causal", 2: f"causal, W={MASK_W}"}[len(mask)]
        heads = "MHA" if hkv == MASK_HQ else f"{MASK_HQ}/{hkv}"
        cells = [f"{flops / 1e9:,.0f}", f"{flops / dense_flops:.3f}"]  # FLOPs
        cells += [f"{flash / 2**30:,.2f}", f"{flash / dense:.3f}", mib(floor)]  # bytes
        cells += [f"{flops / flash:,.0f}", f"{flops / floor:,.0f}"]  # intensities
        rows.append([f"{n:,}", label, heads, *cells])
    header = "N | mask | Hq/Hkv | GFLOP | FLOPs / dense | Flash GiB (no reuse)"
    header += " | Flash bytes / dense | compulsory MiB | I Flash (no reuse) | I compulsory"
    return markdown_table(header, rows)


def smem(d: int, bm: int, bn: int, stages: int) -> int:
    """The kernel's own model (Lab 02's smem_bytes): one Q tile plus `stages` K and V tiles."""
    return smem_bytes(bm, bn, stages, d, E)


def blocks_by_smem(nbytes: int) -> int:
    return h200_measured().smem_per_sm_bytes // (nbytes + SMEM_RESERVED_PER_BLOCK)


def regs_estimate(d: int, bm: int, bn: int, warps: int) -> tuple[int, int]:
    """32-bit registers per thread of the big tiles: (fp32 accumulator + fp32 score tile, plus the
    16-bit P copy); an estimate, not what the compiler allocates."""
    threads = 32 * warps
    acc_s = math.ceil((bm * d + bm * bn) / threads)
    return acc_s, acc_s + math.ceil(bm * bn * E / 4 / threads)


def regs_cell(d: int, bm: int, bn: int, warps: int) -> str:
    acc_s, with_p = regs_estimate(d, bm, bn, warps)
    return f"{acc_s} / {with_p}" + (" (over)" if acc_s > REGS_PER_THREAD else "")


# Tiles to compare at every head dim, next to the autotuner's own candidates for that head dim
# (Lab 02's FLASH_CONFIGS, keyed by the padded head dim).
COMPARED_TILES = [(64, 64, 2), (64, 64, 3), (64, 128, 2), (128, 64, 2), (128, 64, 3)]
COMPARED_TILES += [(128, 128, 2), (128, 128, 3), (256, 64, 2)]


def tile_fit_table() -> str:
    rows = []
    for d in (64, 128, 256):
        tuned = FLASH_CONFIGS.get(d, [])
        for bm, bn, stages in sorted(set(COMPARED_TILES) | {(bm, bn, s) for bm, bn, _, s in tuned}):
            s = smem(d, bm, bn, stages)
            fits = "yes, over the kernel's 200" if s > SMEM_BUDGET else "yes"
            fits = "no" if s > SMEM_PER_BLOCK else fits
            blocks = blocks_by_smem(s) if s <= SMEM_PER_BLOCK else DASH
            warps = [w for bm_, bn_, w, s_ in tuned if (bm_, bn_, s_) == (bm, bn, stages)]
            autotuner = "pruned" if s > SMEM_BUDGET else ", ".join(f"{w} warps" for w in warps)
            autotuner = autotuner if warps else DASH
            regs = [regs_cell(d, bm, bn, w) for w in (4, 8)]
            rows.append([d, bm, bn, stages, f"{s / 1024:.0f}", fits, blocks, *regs, autotuner])
    header = "d | BLOCK_M | BLOCK_N | stages | shared KiB | fits 227 KiB | blocks/SM (shared)"
    return markdown_table(f"{header} | regs/thread, 4 warps | 8 warps | autotuner", rows)


def sweep() -> dict[tuple, dict]:
    """{(d, causal, n, b, h): {"minimodel": {config: record}, "sdpa_flash": rec, ...}}."""
    shapes: dict[tuple, dict] = defaultdict(lambda: {"minimodel": {}})
    for r in load("flash-config-sweep-h200.json")["records"]:
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
    tiles = {"block_m": config[0], "block_n": config[1]}
    return flash_attention_bytes(b, h, h, n, n, d, **tiles, causal=causal, lse=False) / (ms * 1e-3)


def sweep_best_table() -> str:
    roof, rows = h200_measured(), []
    for key, impls in sweep().items():
        d, causal, n, b, h = key
        best_cfg, best = max(impls["minimodel"].items(), key=lambda kv: kv[1]["tflops"])
        rate = no_reuse_rate(key, best_cfg, best["ms"])
        cudnn, tf = impls["sdpa_cudnn"]["tflops"], best["tflops"]
        rates = [f"{x:.0f}" for x in (tf, cudnn, impls["sdpa_flash"]["tflops"])]
        rates += [f"{tf / cudnn:.0%}", f"{tf * 1e12 / roof.peak_flops:.0%}"]
        bound = f"{rate / 1e12:.1f}" + (" (> copy)" if rate > roof.bandwidth else "")
        rows.append([d, yes(causal), f"{n:,}", f"{b} x {h}", cfg(best_cfg), *rates, bound])
    header = "d | causal | N | B x H | best (BM, BN, warps, stages) | TFLOP/s | cuDNN | FA2 (SDPA)"
    return markdown_table(f"{header} | best / cuDNN | of matmul | TB/s if no reuse", rows)


SWEEP_CONFIGS = [(128, 64, 4, 2), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 4, 2)]
SWEEP_CONFIGS += [(128, 128, 4, 3), (128, 128, 4, 4), (128, 128, 8, 2), (64, 64, 4, 3)]
SWEEP_CONFIGS += [(64, 128, 4, 2), (64, 128, 4, 4)]


def sweep_configs_table() -> str:
    shapes, rows = sweep(), []
    for d, c in itertools.product((64, 128), SWEEP_CONFIGS):
        runs = [shapes[k]["minimodel"] for k in shapes if k[0] == d]
        if c not in runs[0]:
            continue  # the sweep ran only what fits the kernel's shared-memory budget
        best = [max(r["tflops"] for r in shape.values()) for shape in runs]
        rates = [shape[c]["tflops"] for shape in runs]
        cells = [f"{tf:.0f} ({tf / b:.0%})" for tf, b in zip(rates, best, strict=True)]
        s = smem(d, c[0], c[1], c[3])
        rows.append([d, cfg(c), f"{s / 1024:.0f}", blocks_by_smem(s), regs_cell(d, *c[:3]), *cells])
    header = "d | (BM, BN, warps, stages) | shared KiB | blocks/SM (shared) | regs/thread (est.)"
    shapes = [f"N={n:,}{', causal' if causal else ''}" for d, causal, n, _, _ in shapes if d == 64]
    return markdown_table(header.split(" | ") + shapes, rows)


EXP_IMPLS = {"minimodel": "ours", "sdpa_cudnn": "cuDNN", "sdpa_flash": "FA2 (SDPA)"}


def exp_roof_rows() -> list[dict]:
    """Per head dim: the exponential roof, overlapped and not, the exponentials' share of the time,
    and each implementation's fastest fp16 run without a mask over FlashAttention-2's grid."""
    roof, records = h200_measured(), load("bench-attention-h200.json")["records"]
    rows = []
    for d in (64, 128):
        exp_time, mma_time = 1 / roof.exp_rate, 4 * d / roof.peak_flops  # per score
        key = ("fa2", "float16", False, d)
        runs = [r for r in records if (r["group"], r["dtype"], r["causal"], r["d"]) == key]
        rate = lambda r: r["tflops"]
        best = {i: max((r for r in runs if r["impl"] == i), key=rate) for i in EXP_IMPLS}
        cap, overlapped = roof.attention_roof(d), roof.attention_roof(d, overlapped=True)
        share = exp_time / (exp_time + mma_time)
        rows.append(dict(d=d, cap=cap, overlapped=overlapped, exp_share=share, best=best))
    return rows


def exp_roof_table() -> str:
    roof, out = h200_measured(), []
    for r in exp_roof_rows():
        best = [share(b["tflops"] * 1e12, r["cap"]) for b in r["best"].values()]
        cap = share(r["cap"], roof.peak_flops)
        cells = [r["d"], 4 * r["d"], f"{r['exp_share']:.0%}", cap, f"{r['overlapped'] / 1e12:.0f}"]
        out.append([*cells, *best])
    header = "d | FLOPs per exp2 | exp2 share of the time | cap, not overlapped (of matmul)"
    header = [*header.split(" | "), "cap, overlapped"]
    return markdown_table(header + [f"{n}: best TFLOP/s (of cap)" for n in EXP_IMPLS.values()], out)


def figure_points() -> list[RooflinePoint]:
    """Theory 00's anchor shape (B = 1, H = 16, d = 64): at N = 64 one Flash tile moves the
    compulsory bytes; at N = 2048 the tiles re-read K and V."""
    small, large = (1, 16, 16, 64, 64, 64), (1, 16, 16, 2048, 2048, 64)
    one_tile = flash_attention_bytes(*small, block_m=128)
    cases = [(64, "naive", naive_attention_bytes(*small))]
    cases += [(64, "Flash (one tile) ~ compulsory", one_tile)]
    cases += [(2048, "naive", naive_attention_bytes(*large))]
    for bm in (64, 128):
        cases.append((2048, f"Flash BM={bm}, no reuse", flash_attention_bytes(*large, block_m=bm)))
    cases.append((2048, "compulsory", attention_min_bytes(*large)))
    return [RooflinePoint(f"{label} N={n}", flops_of(1, 16, n, n, 64) / b) for n, label, b in cases]


def outputs() -> dict[str, str | bytes]:
    title = "Naive, tiled Flash and compulsory bytes (d=64, fp16)"
    roofs = [HARDWARE["H200"], h200_measured()]
    figure = roofline_svg(roofs, figure_points(), head_dim=64, title=title)
    return {
        "generated/flash-bytes.md": bytes_table(),
        "generated/flash-masks.md": masks_table(),
        "generated/flash-tile-fit.md": tile_fit_table(),
        "generated/flash-sweep-best.md": sweep_best_table(),
        "generated/flash-sweep-configs.md": sweep_configs_table(),
        "generated/flash-exp-roof.md": exp_roof_table(),
        "figures/roofline-flash.svg": figure,
    }

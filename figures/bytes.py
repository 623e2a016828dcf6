"""Lab 01's and Results' tables: the bytes attention moves, measured with Nsight Compute
(data/bytes-h200.json), against Lab 01's byte model, at the shapes of bench.bytes.CASES."""

import re

from bench.bytes import CASES, Case
from figures.core import DASH, load, markdown_table, ratio, yes
from minimodel import roofline as r

MIB = 2**20
IMPL = {"naive": "naive", "flash": "Flash (ours)", "sdpa_flash": "SDPA FA2"}
IMPL |= {"decode": "decode, contiguous", "paged": "decode, paged"}
L2_TO_SM = "l1tex__m_xbar2l1tex_read_bytes.sum"  # what the crossbar delivers from L2 to the SMs
BAR = 0.15


def shapes_table() -> str:
    """The shapes of CASES, grouped as the pages show them."""
    groups: dict[tuple, tuple[dict, dict]] = {}
    for c in CASES:
        minigpt = c.heads == "MiniGPT"
        heads = f"(MiniGPT: {c.hq}/{c.hkv})" if minigpt else "16/16, 16/4, 16/1"
        key = (c.phase, heads, c.b, c.d, yes(c.causal), "verb sequence" if minigpt else "random")
        ns, impls = groups.setdefault(key, ({}, {}))
        ns[str(c.n)] = impls[c.impl] = None
    rows = [
        [phase, ", ".join(ns), b, heads, d, causal, ", ".join(impls), inputs]
        for (phase, heads, b, d, causal, inputs), (ns, impls) in groups.items()
    ]
    header = "phase | N (prefill) or context (decode) | B | Hq/Hkv | d | causal | implementations"
    return markdown_table(f"{header} | inputs", rows)


def flops(case: Case) -> int:
    return r.attention_flops(case.b, case.hq, case.nq, case.nk, case.d, causal=case.causal)


def model(case: Case, params: dict) -> dict[str, dict[str, int]]:
    """The byte model of a case's kernels with their own tiles: {kernel: {"read", "write", ...}}."""
    shape = (case.b, case.hq, case.hkv, case.nq, case.nk, case.d)
    ctx = (case.b, case.hq, case.hkv, case.nk, case.d)
    if case.impl == "naive":
        return r.naive_attention_bytes_per_kernel(*shape, causal=case.causal)
    if case.impl in ("flash", "sdpa_flash"):
        tiles = {"block_m": params["block_m"], "block_n": params["block_n"]}
        return {"flash": r.flash_forward_bytes(*shape, **tiles, causal=case.causal)}
    if case.impl == "decode":
        return r.decode_bytes(*ctx, num_splits=params["num_splits"])
    if case.impl == "paged":
        tiles = {k: params[k] for k in ("block_size", "block_n", "num_splits")}
        return r.paged_decode_bytes(*ctx, **tiles)
    raise ValueError(f"no model for {case.impl!r}")


def l2_written(metrics: dict) -> float:
    """Bytes the SMs wrote to L2 (its 32-byte sectors)."""
    return 32 * metrics["lts__t_sectors_srcunit_tex_op_write.sum"]


def dram_bytes(metrics: dict) -> float:
    """DRAM bytes read plus the bytes written to L2 (a write reaches DRAM only when evicted)."""
    return metrics["dram__bytes_read.sum"] + l2_written(metrics)


def kernel_models(case: Case, params: dict, kernels: list[dict]) -> list[tuple[str, dict]]:
    """(name, model) per measured kernel, in launch order."""
    if case.impl == "sdpa_flash":  # FA2 names its tiles: Flash_fwd_kernel_traits<d, BM, BN, ...>
        t = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+)", kernels[0]["kernel"])
        tiles = {"block_m": int(t[2]), "block_n": int(t[3])}
        return [("FA2 flash_fwd_kernel", model(case, tiles)["flash"])]
    named = list(model(case, params).items())
    if case.impl == "flash":
        return [("_attn_fwd", named[0][1])]
    if case.impl in ("decode", "paged"):
        return [("_paged_decode_fwd" if n == "decode" else "_merge_splits", m) for n, m in named]
    return named


def rows(data: dict) -> list[dict]:
    """One row per (case, kernel): model, measurement (both cache modes)."""
    out = []
    for case in CASES:
        entry = data["cases"][case.id]
        named = kernel_models(case, entry["params"], entry["all"])
        for (name, m), cold, warm in zip(named, entry["all"], entry["none"], strict=True):
            read, warm_read = cold["dram__bytes_read.sum"], warm["dram__bytes_read.sum"]
            row = {"case": case, "kernel": name, "model": m, "dram": dram_bytes(cold)}
            row |= {"dram_read": read, "l2_write": l2_written(cold), "l2_to_sm": cold.get(L2_TO_SM)}
            row |= {"warm": warm_read + warm["dram__bytes_write.sum"], "warm_read": warm_read}
            row |= {"dram_model": m["read"] + m["write"], "tiled": m.get("read_tiled")}
            out.append(row)
    return out


def mib(x: float | None) -> str:
    return DASH if x is None else format(x / MIB, ",.3f" if x < 10 * MIB else ",.1f")


def compared(t: dict) -> list[str]:
    """The cells model, measured, ratio for DRAM and for L2 to the SMs, then warm DRAM."""
    dram = [mib(t["dram_model"]), mib(t["dram"]), ratio(t["dram"], t["dram_model"], ".3f")]
    l2 = [mib(t["tiled"]), mib(t["l2_to_sm"]), ratio(t["l2_to_sm"], t["tiled"], ".3f")]
    return [*dram, *l2, mib(t["warm"])]


def measured_table(data: dict) -> str:
    body = []
    for row in rows(data):
        c = row["case"]
        body.append([f"{c.n:,}", IMPL[c.impl], c.heads, f"`{row['kernel']}`", *compared(row)])
    header = "N | implementation | heads | kernel | DRAM model | DRAM measured | ratio"
    return markdown_table(f"{header} | L2→SM model | L2→SM measured | ratio | DRAM, warm", body)


def case_totals(data: dict) -> dict[str, dict]:
    """Per case: the measurement and the model summed over its kernels."""
    by_case: dict[str, list[dict]] = {}  # its rows, one per kernel
    for row in rows(data):
        by_case.setdefault(row["case"].id, []).append(row)
    out = {}
    for case_id, kernels in by_case.items():
        tiled = [k["tiled"] for k in kernels]  # naive attention reads no tiles
        t = {key: sum(k["model"][key] for k in kernels) for key in ("read", "write")}
        t |= {
            key: sum(k[key] for k in kernels) for key in ("dram_model", "dram", "l2_to_sm", "warm")
        }
        t |= dict(case=kernels[0]["case"], kernels=len(kernels))
        out[case_id] = t | {"tiled": None if None in tiled else sum(tiled)}
    return out


def summary_table(data: dict) -> str:
    """Per case, its kernels summed: the Results page's short version of Lab 01's table."""
    body = []
    for t in case_totals(data).values():
        c = t["case"]
        if c.heads not in ("MHA", "MiniGPT") and c.impl not in ("decode", "paged"):
            continue  # the prefill GQA/MQA rows are on Lab 01
        body.append([f"{c.n:,}", IMPL[c.impl], c.heads, t["kernels"], *compared(t)])
    header = "N | kernel | heads | kernels | DRAM model | DRAM meas. | ratio | L2→SM model"
    return markdown_table(f"{header} | L2→SM meas. | ratio | warm DRAM", body)


def model_table(data: dict) -> str:
    """The four functions evaluated at every case, with the tiles the measurement ran."""
    body = []
    for t in case_totals(data).values():
        c, f = t["case"], flops(t["case"])
        sizes = [mib(t["read"]), mib(t["tiled"]), mib(t["write"]), f"{f / 1e9:,.3f}"]
        body.append([f"{c.n:,}", IMPL[c.impl], c.heads, *sizes, f"{f / t['dram_model']:,.1f}"])
    header = "N | implementation | heads | read (MiB) | read_tiled | write | FLOPs (G)"
    return markdown_table(f"{header} | I = F / (read + write)", body)


def outputs() -> dict[str, str | bytes]:
    data = load("bytes-h200.json")
    return {
        "generated/overlay-shapes.md": shapes_table(),
        "generated/bytes-model.md": model_table(data),
        "generated/bytes-measured.md": measured_table(data),
        "generated/bytes-summary.md": summary_table(data),
    }

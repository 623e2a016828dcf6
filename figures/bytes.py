"""Bytes moved, measured with Nsight Compute (data/bytes-h200.json, written by
bench/bytes.py), against Lab 01's byte model in minimodel.roofline, kernel by kernel.

    python -m figures.bytes            # write docs/generated/bytes-*.md and overlay-shapes.md
    python -m figures.bytes --check    # fail if they are stale

The findings under the table are written in Lab 01's page; tests/test_data_claims.py recomputes
their numbers from the same data.
"""

import json
import re

from bench.bytes import CASES, Case, shapes_table
from figures.core import ROOT, emit, markdown_table
from minimodel.roofline import attention_flops  # noqa: E402

DATA = ROOT / "data" / "bytes-h200.json"
MIB = 2**20
IMPL = {
    "naive": "naive",
    "flash": "Flash (ours)",
    "sdpa_flash": "SDPA FA2",
    "decode": "decode, contiguous",
    "paged": "decode, paged",
}
L2_WRITE = ("lts__t_sectors_srcunit_tex_op_write.sum", "lts__t_sectors_op_write.sum")
L2_TO_SM = "l1tex__m_xbar2l1tex_read_bytes.sum"  # what the crossbar delivers from L2 to the SMs
BAR = 0.15


def fa2_tiles(kernel: str) -> dict | None:
    """SDPA's FlashAttention-2 kernel names its tiles: Flash_fwd_kernel_traits<d, BM, BN, ...>."""
    m = re.search(r"Flash_fwd_kernel_traits<(\d+), (\d+), (\d+)", kernel)
    return {"block_m": int(m[2]), "block_n": int(m[3])} if m else None


def model_kernels(case: Case, params: dict, kernels: list[dict]) -> list[tuple[str, dict | None]]:
    """(name, model) per measured kernel, in launch order; model None where there is none."""
    from figures.overlay import model_kernels as model

    if case.impl == "sdpa_flash":
        tiles = fa2_tiles(kernels[0]["kernel"]) if len(kernels) == 1 else None
        return [("FA2 flash_fwd_kernel", model(case, tiles)["flash"] if tiles else None)]
    named = list(model(case, params).items())
    if len(named) != len(kernels):  # a kernel the model does not know: shown without a model
        return [(k["kernel"][:30], None) for k in kernels]
    if case.impl == "flash":
        return [("_attn_fwd", named[0][1])]
    if case.impl in ("decode", "paged"):
        return [("_paged_decode_fwd" if n == "decode" else "_merge_splits", m) for n, m in named]
    return named


def measured(kernel: dict) -> dict[str, float]:
    metric = next(m for m in L2_WRITE if kernel.get(m) is not None)
    return {
        "dram": kernel["dram__bytes_read.sum"] + 32 * kernel[metric],
        "dram_read": kernel["dram__bytes_read.sum"],
        "l2_write": 32 * kernel[metric],
        "l2_to_sm": kernel.get(L2_TO_SM),
    }


def rows(data: dict) -> list[dict]:
    """One row per (case, kernel): model, measurement (both cache modes)."""
    out = []
    for case in CASES:
        entry = data["cases"].get(case.id)
        if entry is None:
            continue
        kernels = entry["all"]
        for i, (name, model) in enumerate(model_kernels(case, entry["params"], kernels)):
            warm = entry["none"][i]
            out.append(
                {
                    "case": case,
                    "kernel": name,
                    "model": model,
                    **measured(kernels[i]),
                    "warm": warm["dram__bytes_read.sum"] + warm["dram__bytes_write.sum"],
                    "warm_read": warm["dram__bytes_read.sum"],
                }
            )
    return out


def mib(x: float | None) -> str:
    if x is None:
        return "—"
    x /= MIB
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.3f}"


def measured_table(data: dict) -> str:
    header = [
        "N",
        "implementation",
        "heads",
        "kernel",
        "DRAM model",
        "DRAM measured",
        "ratio",
        "L2→SM model",
        "L2→SM measured",
        "ratio",
        "DRAM, warm",
    ]
    body = []
    for r in rows(data):
        c, m = r["case"], r["model"]
        dram_model = None if m is None else m["read"] + m["write"]
        tiled = None if m is None or "read_tiled" not in m else m["read_tiled"]
        body.append(
            [
                f"{c.n:,}",
                IMPL[c.impl],
                c.heads,
                f"`{r['kernel']}`",
                mib(dram_model),
                mib(r["dram"]),
                ratio(r["dram"], dram_model),
                mib(tiled),
                mib(r["l2_to_sm"]),
                ratio(r["l2_to_sm"], tiled),
                mib(r["warm"]),
            ]
        )
    return markdown_table(header, body)


def case_totals(data: dict) -> dict[str, dict]:
    """Per case: the model and the measurement summed over its kernels (None if a kernel has no
    model)."""
    out: dict[str, dict] = {}
    for r in rows(data):
        t = out.setdefault(
            r["case"].id,
            {
                "case": r["case"],
                "dram_model": 0,
                "tiled": 0,
                "dram": 0.0,
                "l2_to_sm": 0.0,
                "warm": 0.0,
                "kernels": 0,
            },
        )
        m = r["model"]
        t["kernels"] += 1
        t["dram"] += r["dram"]
        t["l2_to_sm"] += r["l2_to_sm"]
        t["warm"] += r["warm"]
        t["dram_model"] = (
            None
            if m is None or t["dram_model"] is None
            else (t["dram_model"] + m["read"] + m["write"])
        )
        t["tiled"] = (
            None
            if m is None or "read_tiled" not in m or t["tiled"] is None
            else (t["tiled"] + m["read_tiled"])
        )
    return out


def summary_table(data: dict) -> str:
    """Per case, the kernels summed: the Results page's short version of Lab 01's table."""
    # MiB throughout: device memory (DRAM) against the compulsory model, L2 to the SMs against
    # the tiled one, and DRAM again with warm caches
    header = [
        "N",
        "kernel",
        "heads",
        "kernels",
        "DRAM model",
        "DRAM meas.",
        "ratio",
        "L2→SM model",
        "L2→SM meas.",
        "ratio",
        "warm DRAM",
    ]
    body = []
    for t in case_totals(data).values():
        c = t["case"]
        if c.heads not in ("MHA", "MiniGPT") and c.impl not in ("decode", "paged"):
            continue  # the prefill GQA/MQA rows are on Lab 01
        body.append(
            [
                f"{c.n:,}",
                IMPL[c.impl],
                c.heads,
                t["kernels"],
                mib(t["dram_model"]),
                mib(t["dram"]),
                ratio(t["dram"], t["dram_model"]),
                mib(t["tiled"]),
                mib(t["l2_to_sm"]),
                ratio(t["l2_to_sm"], t["tiled"]),
                mib(t["warm"]),
            ]
        )
    return markdown_table(header, body)


def model_table() -> str:
    """The four functions evaluated at every case, with the tiles the measurement ran."""
    data = json.loads(DATA.read_text())
    header = [
        "N",
        "implementation",
        "heads",
        "read (MiB)",
        "read_tiled",
        "write",
        "FLOPs (G)",
        "I = F / (read + write)",
    ]
    body = []
    for t in case_totals(data).values():
        c = t["case"]
        if t["dram_model"] is None:
            continue
        entry = data["cases"][c.id]
        model = model_kernels(c, entry["params"], entry["all"])
        read = sum(m["read"] for _, m in model)
        write = sum(m["write"] for _, m in model)
        tiled = (
            sum(m["read_tiled"] for _, m in model)
            if all("read_tiled" in m for _, m in model)
            else None
        )
        f = attention_flops(c.b, c.hq, c.nq, c.nk, c.d, causal=c.causal)
        body.append(
            [
                f"{c.n:,}",
                IMPL[c.impl],
                c.heads,
                mib(read),
                mib(tiled),
                mib(write),
                f"{f / 1e9:,.3f}",
                f"{f / (read + write):,.1f}",
            ]
        )
    return markdown_table(header, body)


def outputs() -> dict[str, str | bytes]:
    data = json.loads(DATA.read_text())
    return {
        "generated/overlay-shapes.md": shapes_table(),
        "generated/bytes-model.md": model_table(),
        "generated/bytes-measured.md": measured_table(data),
        "generated/bytes-summary.md": summary_table(data),
    }


if __name__ == "__main__":
    emit(outputs())

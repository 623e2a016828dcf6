"""Tables of Lab 02 part 2 (docs/lab/02b-flash-hopper.md), from committed data only:

- docs/generated/hopper-drafts.md: how the kernel got here, draft by draft, against cuDNN
  (data/flash-hopper-drafts-h200.json);
- docs/generated/hopper-ablation.md: the kept kernel with its persistent grid and its ping-pong
  switched off, against Lab 02's kernel and cuDNN (data/flash-hopper-ablation-h200.json, written
  by bench/ablate_hopper.py); "not measured" until that file exists;
- docs/generated/hopper-autows.md: what Triton's automatic warp specialisation did to Lab 02's
  kernel (data/autows-probe.json, written by bench/autows.py).

    python -m figures.flash_hopper            # write
    python -m figures.flash_hopper --check    # fail if the committed files are stale
"""

import json
import re

from figures.core import ROOT, emit, markdown_table

DATA = ROOT / "data"


def _n(n: int) -> str:
    return f"{n:,}"


def drafts_table() -> str:
    data = json.loads((DATA / "flash-hopper-drafts-h200.json").read_text())
    rows = []
    for run in data["runs"]:
        for variant in run["variants"]:
            cfg = variant["cfg"]
            switches = []
            if cfg.get("PERSISTENT") is False:
                switches.append("not persistent")
            if cfg.get("PINGPONG") is False:
                switches.append("no ping-pong")
            if cfg.get("CONSUMER_REGS", 240) != 240:
                switches.append(f"{cfg['CONSUMER_REGS']} registers")
            if cfg.get("STAGES", 2) != 2:
                switches.append(f"{cfg['STAGES']} stages")
            err = max(check["err"] for check in variant["checks"])
            for perf in variant["perf"]:
                rows.append(
                    [
                        run["draft"],
                        ", ".join(switches) or "as described",
                        cfg["d"],
                        cfg.get("dtype", "float16"),
                        _n(perf["n"]),
                        "yes" if perf["causal"] else "no",
                        f"{perf['hopper']:.0f}",
                        f"{perf['cudnn']:.0f}",
                        f"{perf['ratio']:.2f}",
                        f"{err:.1e}",
                    ]
                )
    header = [
        "draft",
        "variant",
        "d",
        "dtype",
        "N",
        "causal",
        "TFLOP/s",
        "cuDNN",
        "÷ cuDNN",
        "max error",
    ]
    return markdown_table(header, rows)


def ablation_table() -> str:
    path = DATA / "flash-hopper-ablation-h200.json"
    if not path.exists():
        return (
            "*Not measured yet: `python -m bench.ablate_hopper` on the H200 writes "
            "`data/flash-hopper-ablation-h200.json`.*\n"
        )
    data = json.loads(path.read_text())
    names = list(data["variants"]) + ["lab02", "sdpa_cudnn"]
    shown = {
        "hopper": "kept kernel",
        "hopper, no ping-pong": "no ping-pong",
        "hopper, one program per item pair": "not persistent",
        "hopper, neither": "neither",
        "lab02": "Lab 02",
        "sdpa_cudnn": "cuDNN",
    }
    rows = []
    for rec in data["records"]:
        cudnn = rec["sdpa_cudnn"]["tflops"]
        rows.append(
            [_n(rec["n"]), "yes" if rec["causal"] else "no"]
            + [f"{rec[name]['tflops']:.0f} ({rec[name]['tflops'] / cudnn:.2f})" for name in names]
        )
    env = data["environment"]
    note = (
        f"TFLOP/s (÷ cuDNN) at d = 128, fp16, B = 16384 / N, H = 16, measured in one process "
        f"on an {env['device']} (torch {env['torch']}, Triton {env['triton']}, commit "
        f"{env['commit']}, {env['date'][:10]}) by `bench/ablate_hopper.py` "
        "(`data/flash-hopper-ablation-h200.json`); medians of `triton.testing.do_bench`."
    )
    return markdown_table(["N", "causal"] + [shown[n] for n in names], rows) + "\n" + note + "\n"


def _ptxas_short(report: str | None) -> str:
    """'255 regs, 88 B spilled' from ptxas's -v lines; '–' where ptxas did not run."""
    if not report:
        return "–"
    regs = re.search(r"Used (\d+) registers", report)
    spill = re.search(r"(\d+) bytes spill stores", report)
    return f"{regs.group(1)} regs, {spill.group(1)} B spilled" if regs and spill else report


def autows_table() -> str:
    data = json.loads((DATA / "autows-probe.json").read_text())
    rows = []
    for rec in data["records"]:
        if rec["compiled"]:
            result = (
                "partitions made" if rec["ttgir_has_warp_specialize"] else "compiled, no partitions"
            )
        else:
            result = f"compile error ({rec['error'].split(':')[0]})"
        rows.append(
            [
                rec["target"],
                "yes" if rec["warp_specialize_flag"] else "no",
                f"{rec['BLOCK_M']} x {rec['BLOCK_N']}",
                rec["num_warps"],
                result,
                _ptxas_short(rec.get("ptxas")),
            ]
        )
    env = data["environment"]
    note = (
        f"Lab 02's kernel at d = 128, fp16, no mask, compiled {env['compiled']} by Triton "
        f"{env['triton']} (`bench/autows.py`, `data/autows-probe.json`); "
        '"partitions" means a `ttg.warp_specialize` region in the compiled TTGIR.'
    )
    return (
        markdown_table(
            ["target", "warp_specialize=True", "tile", "warps", "result", "registers (sm_90)"], rows
        )
        + "\n"
        + note
        + "\n"
    )


def outputs() -> dict[str, str | bytes]:
    return {
        "generated/hopper-drafts.md": drafts_table(),
        "generated/hopper-ablation.md": ablation_table(),
        "generated/hopper-autows.md": autows_table(),
    }


if __name__ == "__main__":
    emit(outputs())

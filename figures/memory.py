"""The GPU primer's figure of the H200's memory hierarchy, from minimodel.ceilings.HARDWARE and
data/ceilings-h200.json."""

import matplotlib.pyplot as plt

from figures.core import h200_measured, hide_spines, svg
from minimodel.ceilings import HARDWARE

H200 = HARDWARE["H200"]
REGISTERS_PER_SM_BYTES = 65536 * 4  # 64 K 32-bit registers (CUDA programming guide, cc 9.0)
HBM_BYTES = 141e9  # 141 GB of HBM3e (NVIDIA H200 datasheet)
KIB, MIB = 1024, 1024**2


def levels() -> list[tuple[str, float, str, str]]:
    """(level, bytes on the chip, what one SM or the chip has, who uses it), nearest first."""
    sms, smem, regs = H200.sm_count, H200.smem_per_sm_bytes, REGISTERS_PER_SM_BYTES
    copy = h200_measured().bandwidth
    hbm = f"{HBM_BYTES / 1e9:.0f} GB, {H200.bandwidth / 1e12:.1f} TB/s datasheet, "
    shared = f"up to {smem // KIB} KiB per SM × {sms} (its L1 the rest of 256 KiB)"
    sizes = {
        "registers": (sms * regs, f"{regs // KIB} KiB per SM × {sms}"),
        "shared memory": (sms * smem, shared),
        "L2 cache": (H200.l2_bytes, f"{H200.l2_bytes // MIB} MiB for the chip"),
        "HBM (device memory)": (HBM_BYTES, hbm + f"{copy / 1e12:.2f} TB/s measured copy"),
    }
    who = [
        "one thread's own; every block a kernel computes on (acc, m_i, l_i)",
        "one CTA's threads; tl.dot operands, pipeline stages, TMA tiles",
        "every SM; every load and store of device memory passes through it",
        "every program; each tl.load / tl.store / TMA copy",
    ]
    return [(name, *size, text) for (name, size), text in zip(sizes.items(), who, strict=True)]


def outputs() -> dict[str, str | bytes]:
    rows = levels()
    fig, ax = plt.subplots(figsize=(9.0, 3.6))
    colors = ["#bc4b51", "#f4a259", "#8cb369", "#5b8e7d"]
    for y, ((name, size, amount, who), color) in enumerate(zip(rows, colors, strict=True)):
        ax.barh(y, size, color=color, height=0.62, alpha=0.45)
        ax.text(1.3e5, y - 0.08, f"{name}: {amount}", va="center", fontsize=9, weight="bold")
        ax.text(1.3e5, y + 0.2, who, va="center", fontsize=8)
    ax.set(xscale="log", xlim=(1e5, 1e12), ylim=(len(rows) - 0.5, -0.5), yticks=[])
    ax.set_xlabel("bytes on the whole H200 (log scale); faster and smaller toward the top")
    title = "The H200's memory hierarchy: what each level holds, and who shares it"
    ax.set_title(title, fontsize=10)
    hide_spines(ax, "top", "right", "left")
    return {"figures/memory-hierarchy.svg": svg(fig)}

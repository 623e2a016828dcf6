"""The roofline overlay: naive, Flash, MQA and paged attention (MHA and GQA for contrast) on the
H200's measured roofline, at N = 64 (the verb sequence) and N = 2048. Each implementation is two
points joined by a line: where minimodel.roofline predicts it (the compulsory bytes of its
kernels, and the attainable rate at that intensity) and where the measurement puts it (its FLOPs
over the DRAM bytes Nsight Compute counted, and its FLOPs over its measured time).

    python scripts/roofline_overlay.py               # on a GPU: measure afresh (times every case
                                                     # of scripts/measure_bytes.py, then runs it
                                                     # under ncu), write data/, then draw
    python scripts/roofline_overlay.py               # elsewhere (or with --draw): draw from
                                                     # the committed data
    python scripts/roofline_overlay.py --check       # fail if the figures or tables are stale or
                                                     # a point is missing from the data
    python scripts/roofline_overlay.py --measure --out-dir DIR   # measure only, into DIR

Writes data/roofline-overlay-h200.json (and data/bytes-h200.json), docs/figures/
roofline-overlay-n64.svg and -n2048.svg, docs/generated/overlay-n64.md and -n2048.md.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from measure_bytes import CASES, Case  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "roofline-overlay-h200.json"
BYTES = ROOT / "data" / "bytes-h200.json"
ANCHORS = (64, 2048)
OVERLAY_IMPLS = ("naive", "flash", "decode", "paged")  # SDPA's FA2 is on Lab 01's table only


# --- measuring ------------------------------------------------------------------------------------

def totals(kernels: list[dict]) -> dict[str, float]:
    """Each metric summed over a case's kernels (None where ncu gave no value)."""
    out: dict[str, float] = {}
    for k in kernels:
        for metric, value in k.items():
            if metric != "kernel" and value is not None:
                out[metric] = out.get(metric, 0.0) + value
    return out


def warm_up_gpu(seconds: float = 3.0) -> None:
    """Matrix products for a few seconds, so that the clocks (left alone) have ramped up."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def time_case(fn) -> dict[str, float]:
    """Two times, in seconds. device: CUDA-graph replay of back-to-back calls
    (triton.testing.do_bench_cudagraph, median of 10 replays): the kernels alone, with no host
    work between them and the L2 as the previous call left it. call: each call timed from Python
    (triton.testing.do_bench, median, L2 flushed before each call): what a caller waits, the
    wrapper's host work included when it outlasts the kernels."""
    import triton

    dev = triton.testing.do_bench_cudagraph(fn, rep=20, quantiles=[0.5, 0.2, 0.8])
    call = triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=[0.5, 0.2, 0.8])
    return {"device_s": dev[0] / 1e3, "device_q20_s": dev[1] / 1e3, "device_q80_s": dev[2] / 1e3,
            "call_s": call[0] / 1e3, "call_q20_s": call[1] / 1e3, "call_q80_s": call[2] / 1e3}


def measure(out_dir: Path, log=print) -> None:
    """Time every case twice over (the second pass is kept; the first is recorded beside it),
    then profile the same cases under ncu with the same Flash tiles; write both data files into
    out_dir."""
    import measure_bytes
    from measure_ceilings import environment

    out_dir.mkdir(parents=True, exist_ok=True)
    timed, errors, pins = {}, {}, {}
    t0 = time.time()
    warm_up_gpu()
    for attempt in ("first", "kept"):
        for case in CASES:
            if case.id in errors:
                continue
            try:
                with torch.no_grad():
                    fn = measure_bytes.build(case)
                    params = measure_bytes.probe(case, fn)
                    torch.cuda.synchronize()
                    times = time_case(fn)
            except Exception as e:  # recorded: the data file says which case failed, and why
                errors[case.id] = f"{type(e).__name__}: {e}"[:300]
                log(f"{case.id}: FAILED {errors[case.id]}")
                continue
            if attempt == "first":
                timed[case.id] = {"first_pass": times}
                continue
            timed[case.id].update(params=params, **times)
            if case.impl == "flash":
                pins[case.id] = params
            log(f"{case.id}: device {times['device_s'] * 1e6:.1f} us, call "
                f"{times['call_s'] * 1e6:.1f} us {params} ({time.time() - t0:.0f} s)")
    pins_path = out_dir / ".pins.json"
    pins_path.write_text(json.dumps(pins))
    (out_dir / "roofline-overlay-h200.json").write_text(json.dumps(  # kept if ncu fails
        {"environment": environment(), "cases": timed, "errors": errors}, indent=1) + "\n")
    profiled = measure_bytes.measure(out_dir / "bytes-h200.json", str(pins_path), log=log)
    for case_id, entry in profiled["cases"].items():
        if case_id in timed:
            timed[case_id]["all"] = totals(entry.get("all", []))
            timed[case_id]["none"] = totals(entry.get("none", []))
            timed[case_id]["kernels"] = [k["kernel"] for k in entry.get("all", [])]
            if entry["params"] != timed[case_id].get("params"):
                timed[case_id]["params_under_ncu"] = entry["params"]
    record = {"environment": environment(),
              "timing": " ".join(time_case.__doc__.split(". ", 1)[1].split()),
              "cases": timed, "errors": {**errors, **profiled["errors"]},
              "ncu": profiled["commands"]}
    (out_dir / "roofline-overlay-h200.json").write_text(json.dumps(record, indent=1) + "\n")
    log(f"done in {time.time() - t0:.0f} s")


# --- the model and the measured point of a case ---------------------------------------------------

def flops(case: Case) -> int:
    from minimodel.roofline import attention_flops
    return attention_flops(case.b, case.hq, case.nq, case.nk, case.d, causal=case.causal)


def model_kernels(case: Case, params: dict) -> dict[str, dict[str, int]]:
    """The byte model of a case's kernels (Lab 01's functions), with the kernel's own tiles."""
    from minimodel import roofline as r

    shape = (case.b, case.hq, case.hkv, case.nq, case.nk, case.d)
    if case.impl == "naive":
        return r.naive_attention_bytes_per_kernel(*shape, causal=case.causal)
    if case.impl in ("flash", "sdpa_flash"):
        return {"flash": r.flash_forward_bytes(*shape, block_m=params["block_m"],
                                               block_n=params["block_n"], causal=case.causal)}
    ctx = (case.b, case.hq, case.hkv, case.nk, case.d)
    if case.impl == "decode":
        return r.decode_bytes(*ctx, num_splits=params["num_splits"])
    if case.impl == "paged":
        return r.paged_decode_bytes(*ctx, block_size=params["block_size"],
                                    block_n=params["block_n"], num_splits=params["num_splits"])
    raise ValueError(f"no model for {case.impl!r}")


def model_bytes(case: Case, params: dict) -> int:
    """Compulsory bytes of the whole case: every kernel's distinct reads and its writes."""
    return sum(k["read"] + k["write"] for k in model_kernels(case, params).values())


L2_WRITE = ("lts__t_sectors_srcunit_tex_op_write.sum", "lts__t_sectors_op_write.sum")


def measured_bytes(entry: dict) -> float:
    """DRAM bytes read (caches flushed before each kernel) plus the bytes written to L2: a write
    reaches DRAM only when L2 evicts it, which may be after the kernel ends."""
    metric = next(m for m in L2_WRITE if m in entry["all"])
    return entry["all"]["dram__bytes_read.sum"] + 32 * entry["all"][metric]


# --- the figure ----------------------------------------------------------------------------------

LABEL = {"naive": "naive", "flash": "Flash", "decode": "decode", "paged": "paged"}
COLOR = {"naive": "C3", "flash": "C2", "decode": "C0", "paged": "C4"}
MARKER = {"prefill": "o", "decode": "s"}


def points(data: dict, anchor: int) -> tuple[list[dict], list[str]]:
    """The overlay's points at one anchor, model and measured; and the expected cases missing
    from the data (named, never invented)."""
    from figlib import h200_measured

    roof = h200_measured()
    out, missing = [], []
    for case in CASES:
        if case.n != anchor or case.impl not in OVERLAY_IMPLS:
            continue
        entry = data["cases"].get(case.id)
        if entry is None or "all" not in entry or entry.get("device_s") is None:
            missing.append(case.id)
            continue
        f = flops(case)
        i_model = f / model_bytes(case, entry["params"])
        out.append({
            "case": case, "label": f"{LABEL[case.impl]} {case.heads}", "flops": f,
            "i_model": i_model, "rate_model": roof.attainable(i_model, head_dim=case.d),
            "i_meas": f / measured_bytes(entry), "rate_meas": f / entry["device_s"],
            "call_rate": f / entry["call_s"], "device_s": entry["device_s"],
            "call_s": entry["call_s"]})
    return out, missing


def merge_coincident(marks: list[tuple]) -> list[tuple[float, float, str, bool]]:
    """One label for the points of one phase that sit on one spot (within 3% on both log axes),
    e.g. "naive MHA, GQA, MQA" or "decode, paged MQA": several labels there could not say which
    is which."""
    groups: list[list[tuple]] = []
    for mark in marks:
        x, y, p, model = mark
        for g in groups:
            gx, gy, gp, gmodel = g[0]
            if (gmodel == model and gp["case"].phase == p["case"].phase
                    and abs(x / gx - 1) < 0.03 and abs(y / gy - 1) < 0.03):
                g.append(mark)
                break
        else:
            groups.append([mark])
    out = []
    for g in groups:
        x, y, _, model = g[0]
        by_impl: dict[str, list[str]] = {}
        for _, _, q, _ in g:
            by_impl.setdefault(LABEL[q["case"].impl], []).append(q["case"].heads)
        heads = list(by_impl.values())
        if all(h == heads[0] for h in heads):  # "decode, paged MQA", "naive MHA, GQA, MQA"
            label = f"{', '.join(by_impl)} {', '.join(heads[0])}"
        else:  # "naive MHA / Flash MiniGPT"
            label = " / ".join(f"{i} {', '.join(h)}" for i, h in by_impl.items())
        out.append((x, y, label, model))
    return out


def _place(ax, anchors, labels, styles) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Put each label near its point where it overlaps no other label, no marker, no legend and
    stays inside the axes; crowded points first, nearer places and fewer crossed lines preferred."""
    import math

    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    px = ax.transData.transform(anchors)
    markers = [Bbox.from_bounds(x - 5, y - 5, 10, 10) for x, y in px]
    curves = [ax.transData.transform(line.get_xydata()) for line in ax.get_lines()
              if line.get_linestyle() not in ("None", "none", "")]
    order = sorted(range(len(labels)), key=lambda i: -sum(
        math.dist(px[i], q) < 60 for q in px))
    placed: dict[int, tuple] = {}
    candidates = [(r, a) for r in (10, 18, 28, 40, 55, 72, 92, 115)
                  for a in range(0, 360, 15)]
    for i in order:
        best = None
        for r, a in candidates:
            dx, dy = r * math.cos(math.radians(a)), r * math.sin(math.radians(a))
            ann = ax.annotate(
                labels[i], anchors[i], xytext=(dx, dy), textcoords="offset points", fontsize=7,
                ha="left" if dx > 2 else "right" if dx < -2 else "center",
                va="bottom" if dy > 2 else "top" if dy < -2 else "center", **styles[i],
                arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5, "shrinkB": 3}
                if r >= 18 else None)
            box = ann.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 \
                and box.y1 <= frame.y1
            others = [b for j, (_, b) in placed.items()] + [m for j, m in enumerate(markers)]
            clashes = sum(box.overlaps(b) for b in others)
            crossed = sum(any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1 for x, y in c)
                          for c in curves)
            score = (not inside, clashes, crossed, r)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, ann, box)
            else:
                ann.remove()
            if score[:3] == (False, 0, 0):
                break
        placed[i] = (labels[i], best[2])
    return [(labels[i], (b.x0, b.y0, b.x1, b.y1)) for i, (_, b) in sorted(placed.items())]


def figure(pts: list[dict], anchor: int) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from figlib import h200_measured, overlapping_labels, render_svg
    from matplotlib.lines import Line2D

    from minimodel.roofline_plot import ROOF_COLORS

    roof = h200_measured()
    d = 64
    boxes = []

    def draw(path: Path) -> None:
        plt.rcParams["svg.hashsalt"] = "minimodel"
        xs_all = [p["i_model"] for p in pts] + [p["i_meas"] for p in pts] + [roof.ridge]
        lo, hi = min(xs_all) / 3, max(xs_all) * 3
        xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
        fig, ax = plt.subplots(figsize=(9, 7))
        color = ROOF_COLORS[True][0]
        ax.plot(xs, [roof.attainable(x) / 1e12 for x in xs], color=color)
        exp = roof.attention_roof(d)
        flat = [x for x in xs if x * roof.bandwidth >= exp]
        ax.plot(flat, [exp / 1e12] * len(flat), "--", color=color, lw=1.2)
        marks = []  # (x, y, label, model?, implementation)
        for p in pts:
            c = COLOR[p["case"].impl]
            m = MARKER[p["case"].phase]
            size = 4 if p["case"].impl == "paged" else 6  # paged over contiguous: both visible
            ax.plot([p["i_model"], p["i_meas"]], [p["rate_model"] / 1e12, p["rate_meas"] / 1e12],
                    "-", color=c, lw=0.8, alpha=0.6)
            ax.plot(p["i_model"], p["rate_model"] / 1e12, m, markerfacecolor="white",
                    markeredgecolor=c, markersize=size)
            ax.plot(p["i_meas"], p["rate_meas"] / 1e12, m, color=c, markersize=size)
            marks += [(p["i_model"], p["rate_model"] / 1e12, p, True),
                      (p["i_meas"], p["rate_meas"] / 1e12, p, False)]
        anchors, labels, styles = [], [], []
        for x, y, label, model in merge_coincident(marks):
            anchors.append((x, y))
            labels.append(label)
            styles.append({"color": "0.45", "style": "italic"} if model else {"color": "black"})
        rates = [y for _, y in anchors]
        ax.set(xscale="log", yscale="log", xlim=(lo, hi),
               ylim=(min(rates) / 4, roof.peak_flops / 1e12 * 2.5),
               xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s",
               title=f"H200, N = {anchor}: model (hollow) and measured (filled), fp16, d = 64"
               + (" (MiniGPT: d = 32)" if any(p["case"].d != d for p in pts) else ""))
        ax.grid(True, which="both", alpha=0.3)
        handles = [
            Line2D([], [], color=color, label=f"{roof.name}: {roof.peak_flops / 1e12:.0f} "
                   f"TFLOP/s, {roof.bandwidth / 1e12:.2f} TB/s"),
            Line2D([], [], color=color, ls="--", label=f"exp2 not overlapped, d = {d}: "
                   f"{exp / 1e12:.0f} TFLOP/s"),
            Line2D([], [], ls="", marker="o", color="0.3", label="prefill"),
            Line2D([], [], ls="", marker="s", color="0.3", label="decode (B = 64)"),
            Line2D([], [], ls="", marker="o", markerfacecolor="white", markeredgecolor="0.3",
                   label="model: roofline.py bytes, attainable rate"),
            Line2D([], [], ls="", marker="o", color="0.3",
                   label="measured: ncu DRAM bytes, CUDA-graph time"),
        ] + [Line2D([], [], color=COLOR[k], label=LABEL[k] + (" (ours)" if k != "naive" else ""))
             for k in OVERLAY_IMPLS]
        ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1),
                  ncol=3, frameon=False)
        fig.tight_layout()
        boxes.extend(_place(ax, anchors, labels, styles))
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)

    svg = render_svg(draw)
    clashes = overlapping_labels(boxes)
    if clashes:
        sys.exit(f"overlay N = {anchor}: labels overlap: {clashes}")
    return svg


# --- the table and the three sentences under each figure ------------------------------------------

def table(pts: list[dict]) -> str:
    from figlib import h200_measured, markdown_table

    roof = h200_measured()
    # I in FLOP/byte, rates in TFLOP/s; "of roof": the measured rate over the roof above the
    # measured point; times per call, on the device (graph replay) and from Python
    header = ["kernel", "heads", "phase", "I model", "roof", "I meas.", "TFLOP/s meas.",
              "of roof", "device µs", "call µs"]
    body = [[LABEL[p["case"].impl], p["case"].heads, p["case"].phase, f"{p['i_model']:,.1f}",
             f"{p['rate_model'] / 1e12:,.1f}", f"{p['i_meas']:,.1f}",
             f"{p['rate_meas'] / 1e12:,.2f}",
             f"{p['rate_meas'] / roof.attainable(p['i_meas'], head_dim=p['case'].d):.0%}",
             f"{p['device_s'] * 1e6:,.1f}", f"{p['call_s'] * 1e6:,.1f}"] for p in pts]
    return markdown_table(header, body)


def sentences(pts: list[dict], anchor: int) -> str:
    """Three sentences the data supports: which points moved right (fewer bytes), which moved up,
    which roof each sits under; at N = 64, whether Flash's gain is invisible there."""
    from figlib import h200_measured

    roof = h200_measured()
    at = {(p["case"].impl, p["case"].heads): p for p in pts}
    naive, flash = at["naive", "MHA"], at["flash", "MHA"]
    dec = {h: at["decode", h] for h in ("MHA", "GQA", "MQA")}
    pag = {h: at["paged", h] for h in ("MHA", "GQA", "MQA")}
    right = flash["i_meas"] / naive["i_meas"]
    paged_shift = max(abs(pag[h]["i_meas"] / dec[h]["i_meas"] - 1) for h in dec)
    s1 = (f"**Right (fewer bytes).** Measured, Flash sits {right:.1f} times right of naive "
          f"attention (MHA: {naive['i_meas']:,.0f} to {flash['i_meas']:,.0f} FLOP/byte; the "
          f"model says {flash['i_model'] / naive['i_model']:.1f}); in decode, GQA and MQA sit "
          f"{dec['GQA']['i_meas'] / dec['MHA']['i_meas']:.1f} and "
          f"{dec['MQA']['i_meas'] / dec['MHA']['i_meas']:.1f} times right of MHA, and each paged "
          f"point within {100 * paged_shift:.1f}% of its contiguous one (the block table's bytes).")
    up = flash["rate_meas"] / naive["rate_meas"]
    paged_up = [pag[h]["rate_meas"] / dec[h]["rate_meas"] for h in dec]
    s2 = (f"**Up.** On the device, Flash runs at {up:.1f} times naive's FLOP/s; GQA and MQA "
          f"decode at {dec['GQA']['rate_meas'] / dec['MHA']['rate_meas']:.1f} and "
          f"{dec['MQA']['rate_meas'] / dec['MHA']['rate_meas']:.1f} times MHA's; paged decode at "
          f"{min(paged_up):.2f} to {max(paged_up):.2f} times contiguous decode.")

    def share(p):
        return p["rate_meas"] / roof.attainable(p["i_meas"], head_dim=p["case"].d)

    compute = [p for p in pts if p["i_meas"] > roof.ridge]
    memory = [p for p in pts if p["i_meas"] <= roof.ridge]
    s3 = f"**Roofs.** Left of the ridge ({roof.ridge:,.0f} FLOP/byte) sit "
    s3 += ("all the points" if not compute else
           ", ".join(sorted({p['label'] for p in memory})))
    s3 += (f", under the bandwidth roof, at {min(map(share, memory)):.0%} to "
           f"{max(map(share, memory)):.0%} of it")
    if compute:
        s3 += (f"; right of it, {', '.join(sorted({p['label'] for p in compute}))}, under the "
               f"exponential roof (d = 64: {roof.attention_roof(64) / 1e12:,.0f} TFLOP/s), at "
               f"{min(map(share, compute)):.0%} to {max(map(share, compute)):.0%} of it")
    s3 += "."
    if anchor == 64:
        dev = naive["device_s"] / flash["device_s"]
        call = naive["call_s"] / flash["call_s"]
        top = max(share(naive), share(flash))
        holds_bytes = top < 0.25
        s3 += (f" The chapter's claim that Flash's gain is invisible at N = 64 "
               f"{'holds for its bytes' if holds_bytes else 'does not hold for its bytes'}"
               f" (naive and Flash reach at most {top:.0%} of the bandwidth roof, so halving the "
               f"bytes does not by itself buy time), ")
        if dev > 1.3:
            s3 += (f"but not for its time on the device, where Flash takes {dev:.1f} times less "
                   f"({flash['device_s'] * 1e6:.1f} against {naive['device_s'] * 1e6:.1f} µs): "
                   "one kernel instead of three, each paying a few microseconds of latency")
        else:
            s3 += (f"and for its time on the device too ({flash['device_s'] * 1e6:.1f} against "
                   f"{naive['device_s'] * 1e6:.1f} µs)")
        if call < 1:
            s3 += (f"; called from Python, Flash is {1 / call:.1f} times slower "
                   f"({flash['call_s'] * 1e6:.0f} against {naive['call_s'] * 1e6:.0f} µs), its "
                   "wrapper's host work outlasting the kernels.")
        else:
            s3 += (f"; called from Python, Flash is {call:.1f} times faster "
                   f"({flash['call_s'] * 1e6:.0f} against {naive['call_s'] * 1e6:.0f} µs).")
    return f"{s1} {s2} {s3}\n"


def main() -> None:
    from figlib import emit

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if anything is stale")
    parser.add_argument("--draw", action="store_true", help="draw from data/, even on a GPU")
    parser.add_argument("--measure", action="store_true", help="measure only, into --out-dir")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "data")
    args = parser.parse_args()
    if args.measure:
        measure(args.out_dir, log=lambda s: print(s, flush=True))
        return
    if not (args.check or args.draw) and torch.cuda.is_available():
        measure(ROOT / "data", log=lambda s: print(s, flush=True))  # on a GPU: measure afresh
    data = json.loads(DATA.read_text())
    outputs, missing = {}, []
    for anchor in ANCHORS:
        pts, gone = points(data, anchor)
        missing += gone
        if gone:
            continue
        outputs[f"figures/roofline-overlay-n{anchor}.svg"] = figure(pts, anchor)
        outputs[f"generated/overlay-n{anchor}.md"] = table(pts) + "\n" + sentences(pts, anchor)
    if missing:
        sys.exit(f"points missing from {DATA.relative_to(ROOT)} (measure them on a GPU; none is "
                 f"drawn in their place): {', '.join(missing)}")
    emit(outputs, ["--check"] if args.check else [])


if __name__ == "__main__":
    main()

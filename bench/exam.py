"""The phase's exam (docs/lab/05-exam.md): six attention variants the course never built, each
predicted from the models before it is measured.

    python -m bench.exam --predict     # data/exam-predictions.json: no GPU, the models and the
                                       # committed roofs only

The predictions use nothing measured but the committed roofs: the matmul and copy rates of
data/ceilings-h200.json and the exp2 rate of data/mufu-h200.json (read by
minimodel.predictions.h200_roofs, the skeleton's given helper). Each case is described here by
its shapes alone, and its FLOPs and bytes come from minimodel.roofline's varlen counts; the lab's
solution module computes the same numbers by its own expressions, and tests/test_predictions.py
holds it (and a learner's module) to the file this writes.
"""

import argparse
import dataclasses
import datetime
import json
from pathlib import Path

from bench.core import DATA, ROOT, commit

PREDICTIONS = DATA / "exam-predictions.json"


@dataclasses.dataclass(frozen=True)
class Case:
    """One case of one variant: the call's shapes, and the API that runs it."""

    function: str  # the function of minimodel.predictions that answers it
    case: str  # its key in that function's dictionary
    hq: int
    hkv: int
    d: int
    groups: tuple[tuple[int, int, int], ...]  # (sequences, query rows, keys) of each kind
    causal: bool = True
    window: int | None = None
    kv_dtype: str = "float16"  # "float8_e4m3fn": one byte an element plus float32 scales
    run: str = "attention"  # "attention", "paged_decode" or "paged_prefill"

    @property
    def seqs(self) -> list[tuple[int, int]]:
        """(query rows, keys) of every sequence of the call, in order."""
        return [(nq, nk) for count, nq, nk in self.groups for _ in range(count)]


FP8 = "float8_e4m3fn"
FP8_SCALE_BYTES = 4  # one float32 scale per token, kv head and tensor (K, V): the assumption

CASES = [
    Case("fp8_kv_decode", "fp8", 64, 8, 128, ((16, 1, 16384),), kv_dtype=FP8, run="paged_decode"),
    Case("fp8_kv_decode", "fp16", 64, 8, 128, ((16, 1, 16384),), run="paged_decode"),
    *(Case("verification", f"k{k}", 32, 8, 128, ((64, k, 4096),), run="paged_prefill")
      for k in (2, 4, 8)),
    Case("mixed_batch", "mixed", 32, 8, 128, ((1, 8192, 8192), (63, 1, 4096)),
         run="paged_prefill"),
    Case("mixed_batch", "prefill", 32, 8, 128, ((1, 8192, 8192),), run="paged_prefill"),
    Case("mixed_batch", "decode", 32, 8, 128, ((63, 1, 4096),), run="paged_decode"),
    Case("sliding_window_prefill", "window", 32, 4, 64, ((1, 65536, 65536),), window=2048),
    Case("sliding_window_prefill", "causal", 32, 4, 64, ((1, 65536, 65536),)),
    Case("cross_attention", "cross", 32, 32, 128, ((64, 64, 4096),), causal=False),
    Case("mqa_decode", "mqa", 64, 1, 128, ((256, 1, 2048),)),
    Case("mqa_decode", "gqa8", 64, 8, 128, ((256, 1, 2048),)),
]


# --- the course's predictions ---------------------------------------------------------------------

def predict_case(case: Case, roofs) -> dict:
    """FLOPs and compulsory bytes from minimodel.roofline, placed on the roofs: the time at the
    attainable rate, min(attention's compute roof at d, I beta)."""
    from minimodel.roofline import (
        arithmetic_intensity,
        varlen_attention_flops,
        varlen_attention_min_bytes,
    )

    flops = varlen_attention_flops(case.hq, case.d, case.seqs, causal=case.causal,
                                   window=case.window)
    fp8 = case.kv_dtype == FP8
    nbytes = varlen_attention_min_bytes(case.hq, case.hkv, case.d, case.seqs,
                                        kv_elem_bytes=1 if fp8 else None,
                                        kv_scale_bytes=FP8_SCALE_BYTES if fp8 else 0)
    intensity = arithmetic_intensity(flops, nbytes)
    compute_roof = roofs.attention_roof(case.d)
    return {
        **dataclasses.asdict(case), "flops": flops, "bytes": nbytes, "intensity": intensity,
        "roof": "memory" if intensity * roofs.bandwidth <= compute_roof else "compute",
        "time_us": flops / roofs.attainable(intensity, head_dim=case.d) * 1e6,
    }


def predict() -> dict:
    """The course's predictions of every case, with the roofs they stand on."""
    from minimodel.predictions import h200_roofs

    roofs = h200_roofs()
    return {
        "roofs": {
            "name": roofs.name, "peak_flops": roofs.peak_flops, "bandwidth": roofs.bandwidth,
            "exp_rate": roofs.exp_rate,
            "attention_roof": {str(d): roofs.attention_roof(d) for d in (64, 128)},
        },
        "cases": [predict_case(case, roofs) for case in CASES],
    }


def provenance() -> dict:
    """Where the roofs came from: each input file's own environment (device, commit, date)."""
    out = {}
    for name in ("ceilings-h200.json", "mufu-h200.json"):
        env = json.loads((DATA / name).read_text())["environment"]
        out[f"data/{name}"] = {k: env.get(k) for k in ("device", "commit", "date")}
    return out


def write_predictions(out: Path) -> None:
    record = {
        "environment": {
            "commit": commit(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "inputs": provenance(),
        },
        "model": "flops: minimodel.roofline.varlen_attention_flops (4 d Hq over the visible "
                 "pairs, masks bottom-right per sequence); bytes: varlen_attention_min_bytes "
                 "(queries read and outputs written once in fp16, every sequence's K and V read "
                 "once at their stored size; fp8: 1 byte an element plus a float32 scale per "
                 "token, kv head and tensor); time: flops / Ceilings.attainable(I, head_dim=d) "
                 "on minimodel.predictions.h200_roofs(), the exponential roof not overlapped; "
                 "roof: memory when I * bandwidth <= attention_roof(d)",
        **predict(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predict", action="store_true",
                        help=f"write the course's predictions ({PREDICTIONS.relative_to(ROOT)})")
    parser.add_argument("--out", type=Path, help="write here instead")
    args = parser.parse_args(argv)
    if not args.predict:
        parser.error("say --predict")
    write_predictions(args.out or PREDICTIONS)


if __name__ == "__main__":
    main()

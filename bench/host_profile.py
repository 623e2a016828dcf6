"""Where the Python of a call through `minimodel.attention` goes (Lab 03 part 2, "What a call
costs the host"): cProfile's 30 functions of most own time over 2,000 decode calls (after 50
unprofiled) at bench.host_path's decode shape: B = 1, GQA 32/8, 4,096 keys, d = 128, fp16.

    MINIMODEL_COMMIT=<hash> python -m bench.host_profile --out data/host-profile-decode-h200.txt
"""

import cProfile
import io
import pstats
from datetime import date

import torch

from bench.core import arguments, environment
from minimodel.attention import attention

SHAPE = (1, 32, 8, 1, 4096)  # B, Hq, Hkv, Nq, Nk, as bench.host_path's decode case
CALLS = 2000


def main() -> None:
    args = arguments(__doc__).parse_args()
    b, hq, hkv, nq, nk = SHAPE
    q = torch.randn(b, hq, nq, 128, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(b, hkv, nk, 128, dtype=torch.float16, device="cuda") for _ in "kv")
    for _ in range(50):
        attention(q, k, v)
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        attention(q, k, v)
    profile.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
    env = environment()
    head = (
        f"# cProfile of {CALLS:,} minimodel.attention decode calls on the {env['device']} "
        f"(torch {env['torch']}, triton {env['triton']}), tree {env['commit']}, "
        f"{date.today()}: python -m bench.host_profile"
    )
    args.out.write_text(head + "\n" + out.getvalue())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

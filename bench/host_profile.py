"""Where the Python of a call through `minimodel.attention` goes (Lab 03 part 2, "What a call
costs the host"): cProfile over 2,000 calls at one of bench.host_path's shapes, after 50
unprofiled calls; the 30 functions of most own time (shares, not costs), under a first line
naming the device, versions and tree. --kind decode (the default): B = 1, GQA 32/8, 4,096 keys;
--kind prefill: B = 4, 32 heads, N = 512, causal. d = 128, fp16. On the H200:

    MINIMODEL_COMMIT=<hash> python -m bench.host_profile --out data/host-profile-decode-h200.txt
    MINIMODEL_COMMIT=<hash> python -m bench.host_profile --kind prefill \\
        --out data/host-profile-prefill-h200.txt
"""

import cProfile
import io
import pstats
from datetime import date

import torch

from bench.core import arguments, environment
from minimodel.attention import attention

SHAPES = {  # kind: (B, Hq, Hkv, Nq, Nk, causal), as bench.host_path's cases
    "decode": (1, 32, 8, 1, 4096, False),
    "prefill": (4, 32, 32, 512, 512, True),
}
CALLS = 2000


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--kind", choices=sorted(SHAPES), default="decode")
    args = parser.parse_args()
    b, hq, hkv, nq, nk, causal = SHAPES[args.kind]
    q = torch.randn(b, hq, nq, 128, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(b, hkv, nk, 128, dtype=torch.float16, device="cuda") for _ in "kv")
    for _ in range(50):
        attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        attention(q, k, v, causal=causal)
    profile.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
    env = environment()
    head = (
        f"# cProfile of {CALLS:,} minimodel.attention {args.kind} calls on the {env['device']} "
        f"(torch {env['torch']}, triton {env['triton']}), tree {env['commit']}, "
        f"{date.today()}: python -m bench.host_profile --kind {args.kind}"
    )
    args.out.write_text(head + "\n" + out.getvalue())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Where the Python of a decode call through `minimodel.attention` goes (Lab 03 part 2, "What a
call costs the host"): cProfile over 2,000 calls at bench.host_path's decode shape with 4,096
keys, after 50 unprofiled calls; the 30 functions of most own time (shares, not costs). On the
H200:

    PYTHONPATH=src:. python -m bench.host_profile > data/host-profile-decode-h200.txt
"""

import cProfile
import io
import pstats

import torch

from minimodel.attention import attention


def main() -> None:
    q = torch.randn(1, 32, 1, 128, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(1, 8, 4096, 128, dtype=torch.float16, device="cuda") for _ in "kv")
    for _ in range(50):
        attention(q, k, v)
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        attention(q, k, v)
    profile.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
    print(out.getvalue())


if __name__ == "__main__":
    main()

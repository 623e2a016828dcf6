"""Lab 03's cost of an operation: the time per `allocate` and per `append_slot` of minimodel's
BlockManager with 10^2 to 10^5 live sequences, flat if every operation is O(1).

    python -m bench.block_manager            # under a minute: data/block-manager-ops.json
"""

import gc
import random
import sys
import time

from bench.core import DATA, arguments, environment, save
from minimodel.block_manager import BlockManager

LIVE = (100, 1_000, 10_000, 100_000)
BLOCK_SIZE, PROMPT, OPS, ROUNDS, SWEEPS = 16, 40, 10_000, 5, 3  # a prompt of 40 tokens: 3 blocks


def bench(live: int, caching: bool, seed: int, rounds: dict[str, list[float]]) -> None:
    """Time per allocate (then freed, untimed) and per append_slot with `live` others, appended
    to `rounds` (allocate_ns, append_slot_ns): one mean time per op for each round."""
    rng = random.Random(seed)
    spare = OPS * (PROMPT // BLOCK_SIZE + 2) + OPS  # room for the timed operations
    m = BlockManager(live * 4 + spare, BLOCK_SIZE, enable_prefix_caching=caching)
    prompts = [[rng.randrange(32000) for _ in range(PROMPT)] for _ in range(64)]
    for s in range(live):
        m.allocate(s, prompts[s % 64] if caching else prompts[0])
        m.mark_computed(s, PROMPT)  # prefilled: with caching, its full blocks are hits now
    for r in range(ROUNDS):
        ids = range(live + r * OPS, live + (r + 1) * OPS)
        t0 = time.perf_counter_ns()
        for s in ids:  # new sequences arrive while `live` others hold their blocks
            m.allocate(s, prompts[s % 64])
        rounds["allocate_ns"].append((time.perf_counter_ns() - t0) / OPS)
        for s in ids:
            m.free(s)
        first = rng.randrange(live)  # a decode step: a batch of live sequences, one token each
        steps = [((first + i) % live, rng.randrange(32000)) for i in range(OPS)]
        t0 = time.perf_counter_ns()
        for s, token in steps:
            m.append_slot(s, token)
        rounds["append_slot_ns"].append((time.perf_counter_ns() - t0) / OPS)


def main() -> None:
    args = arguments(__doc__, DATA / "block-manager-ops.json", smoke="a small subset").parse_args()
    lives, sweeps = (LIVE[:2], 1) if args.smoke else (LIVE, SWEEPS)
    rounds = {  # every sweep's rounds, by config
        (live, caching): {"allocate_ns": [], "append_slot_ns": []}
        for caching in (False, True)
        for live in lives
    }
    gc.disable()  # as timeit does: the collector's passes grow with the heap, not with our code
    for sweep in range(sweeps):  # whole sweeps: interference hits one config
        for (live, caching), ns in rounds.items():
            bench(live, caching, sweep, ns)
            best = {op: f"{min(times) / 1e3:.2f} us" for op, times in ns.items()}
            where = f"sweep {sweep + 1}/{sweeps}, live {live:>7,}, prefix caching {caching!s:5}"
            print(f"{where}: {best}", file=sys.stderr, flush=True)
    results = [  # the fastest round of all: the statistic below
        {"live": live, "prefix_caching": caching}
        | {op: min(times) for op, times in ns.items()}
        | {op + "_rounds": times for op, times in ns.items()}
        for (live, caching), ns in rounds.items()
    ]
    setup = {"block_size": BLOCK_SIZE, "prompt_tokens": PROMPT, "ops_per_round": OPS}
    setup |= {"rounds": ROUNDS, "sweeps": sweeps, "gc": "disabled while timing"}
    setup["statistic"] = "fastest round's mean time per op, over every round of every sweep "
    setup["statistic"] += "(timeit's advice: the slower rounds measure interference)"
    record = {"environment": environment(), "setup": setup, "results": results}
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

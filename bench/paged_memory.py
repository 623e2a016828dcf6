"""Lab 03's memory experiment ("The memory experiment"): the share of a fixed KV budget that holds
token states when a stream of requests is served with a contiguous reservation of the maximum
length per request and with minimodel's BlockManager (blocks of 8 to 64, without and with prefix
sharing), under the page's simplified vLLM v0 scheduler.

    python -m bench.paged_memory                  # under a minute: data/paged-memory.json
    python -m bench.paged_memory --out /tmp/x.json --requests 150   # a smoke run
"""

import math
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from bench.core import DATA, arguments, environment, save
from minimodel.block_manager import AllocStatus, BlockManager
from minimodel.verbs import corpus, tokenizer

BLOCK_SIZES = (8, 16, 32, 64)
SEED = 0


@dataclass
class Request:
    rid: int
    prompt: list[int]  # what is allocated at admission (grows with the tokens of a preemption)
    output_len: int  # tokens to generate in total
    generated: int = 0
    tokens: list[int] = field(default_factory=list)  # every token with a slot, once admitted


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    max_len: int  # the contiguous reservation per request, and the longest request allowed
    budget: int  # KV budget in token slots (the same for every layout)
    requests: tuple[tuple[tuple[int, ...], int], ...]  # (prompt tokens, output length)


def verb_workload(n: int) -> Workload:
    """Each prompt the corpus's first line, then the head of a line drawn from the other 59
    ('cantar pretérito: '); its output the rest of that line."""
    tok, lines = tokenizer(), corpus().splitlines()
    rng, requests = random.Random(SEED), []
    for _ in range(n):
        head, rest = lines[rng.randrange(1, len(lines))].split(": ", 1)
        requests.append((tuple(tok.encode(lines[0] + "\n" + head + ": ")), len(rest) + 1))
    what = "verb corpus: a shared one-line example, the head of a line as prompt, the rest of "
    what += "the line as output"
    return Workload("verbs", what, 256, 16 * 256, tuple(requests))


def long_tail_workload(n: int) -> Workload:
    """Prompt lengths clipped to [1, 960] after the 64 shared tokens, outputs to [1, 1024]: at
    most 2,048 tokens in all."""
    rng = random.Random(SEED + 1)
    lognormal = lambda median, top: min(top, max(1, round(rng.lognormvariate(math.log(median), 1))))
    system, requests = tuple(rng.randrange(32000) for _ in range(64)), []
    for _ in range(n):
        p, o = lognormal(128, 960), lognormal(256, 1024)
        requests.append((system + tuple(rng.randrange(32000) for _ in range(p)), o))
    what = "synthetic: a shared 64-token system prompt, then log-normal prompt and output "
    what += "lengths (medians 128 and 256 tokens, sigma 1)"
    return Workload("long-tail", what, 2048, 16 * 2048, tuple(requests))


class Contiguous(BlockManager):
    """A reservation of max_len slots per request, taken whole at admission: one block of max_len
    each, admitted while one is free (no watermark), and never outgrown (no request is longer),
    so a running request never needs another slot and is never preempted."""

    def __init__(self, budget: int, max_len: int):
        super().__init__(budget // max_len, max_len, watermark=0)

    def can_append_slot(self, seq_id: int) -> bool:
        return True

    def append_slot(self, seq_id: int, token: int) -> None:
        super().append_slot(seq_id, token)  # no copy-on-write: nothing is shared
        assert len(self.block_table(seq_id)) == 1, f"request {seq_id} outgrew max_len"


def reserved_slots(manager: BlockManager) -> int:
    return (manager.num_blocks - manager.num_free_blocks) * manager.block_size


def token_states(manager: BlockManager, running: list[Request]) -> int:
    """The token states held, each physical slot counted once: only full blocks are shared
    (prefix hits), so each extra holder of a block repeats b token states stored once."""
    b = manager.block_size
    logical = sum(len(r.tokens) for r in running)
    holders = sum(math.ceil(len(r.tokens) / b) for r in running)
    return logical - b * (holders - reserved_slots(manager) // b)


def simulate(workload: Workload, manager: BlockManager, label: str) -> dict:
    waiting = deque(Request(i, list(p), o) for i, (p, o) in enumerate(workload.requests))
    running: list[Request] = []
    rng = random.Random(SEED + 2)  # the generated tokens (they matter only to prefix hashes)
    steps = saturated = preemptions = rejected = used = reserved = in_flight = 0
    max_running = computed = cached = 0
    t0 = time.perf_counter()
    while waiting or running:
        steps += 1
        # Decode: every running request appends one token, preempting from the back if needed.
        for req in list(running):
            if req not in running or req.generated >= req.output_len:
                continue  # preempted earlier in this step, or done
            while not manager.can_append_slot(req.rid):
                victim = running.pop()
                manager.free(victim.rid)
                victim.prompt, victim.tokens = victim.tokens, []
                waiting.appendleft(victim)
                preemptions += 1
                if victim is req:
                    break
            if req not in running:
                continue
            token = rng.randrange(32000)
            manager.append_slot(req.rid, token)
            req.tokens.append(token)
            manager.mark_computed(req.rid, len(req.tokens))  # the step computes it
            req.generated += 1
        for req in [r for r in running if r.generated >= r.output_len]:
            running.remove(req)
            manager.free(req.rid)
        # Admit: first come, first served, while the next request fits above the watermark.
        while waiting:
            status = manager.can_allocate(waiting[0].rid, waiting[0].prompt)
            if status is AllocStatus.LATER:
                break
            req = waiting.popleft()
            if status is AllocStatus.NEVER:
                rejected += 1
                continue
            manager.allocate(req.rid, req.prompt)
            manager.mark_computed(req.rid, len(req.prompt))  # prefilled in this step
            hit = manager.num_cached_tokens(req.rid)
            cached, computed = cached + hit, computed + len(req.prompt) - hit
            req.tokens = list(req.prompt)
            req.generated += 1  # the prefill yields the next output token
            running.append(req)
        if waiting:  # the server is saturated: the figures that describe capacity
            saturated += 1
            used += token_states(manager, running)
            reserved += reserved_slots(manager)
            in_flight += len(running)
        max_running = max(max_running, len(running))
        if steps % 2000 == 0:
            said = (
                f"{len(waiting)} waiting, {len(running)} running, {time.perf_counter() - t0:.1f} s"
            )
            print(f"  {label}: step {steps}, {said}", file=sys.stderr, flush=True)
    if not saturated:
        raise SystemExit(f"{label}: every request fit at once; use more requests")
    return {
        "steps": steps,
        "saturated_steps": saturated,
        "token_states_of_reserved": used / reserved,
        "token_states_of_budget": used / (saturated * workload.budget),
        "mean_running": in_flight / saturated,
        "max_running": max_running,
        "preemptions": preemptions,
        "rejected": rejected,
        "prefill_tokens_computed": computed,
        "prefill_tokens_cached": cached,
    }


def main() -> None:
    parser = arguments(__doc__, DATA / "paged-memory.json")
    parser.add_argument("--requests", type=int, default=400, help="requests per workload")
    args = parser.parse_args()
    record = {"environment": environment(), "seed": SEED, "requests": args.requests}
    record |= {"block_sizes": list(BLOCK_SIZES), "workloads": []}
    layouts = [(None, False)] + [(b, sharing) for sharing in (False, True) for b in BLOCK_SIZES]
    for w in (verb_workload(args.requests), long_tail_workload(args.requests)):
        prompts, outputs = [len(p) for p, _ in w.requests], [o for _, o in w.requests]
        runs = []
        for b, sharing in layouts:
            kind = "contiguous" if b is None else "paged"
            label = f"{w.name} {kind}" + (f" b={b}" if b else "") + (" +sharing" * sharing)
            print(f"{label} ...", file=sys.stderr, flush=True)
            if b is None:
                manager = Contiguous(w.budget, w.max_len)
            else:
                manager = BlockManager(w.budget // b, b, enable_prefix_caching=sharing)
            result = simulate(w, manager, label)
            runs.append({"layout": kind, "block_size": b, "prefix_sharing": sharing, **result})
            held = f"{result['token_states_of_reserved']:.1%} of reserved slots hold token states"
            said = f"{result['mean_running']:.1f} running, {result['preemptions']} preemptions"
            print(f"  {held}, {said}", file=sys.stderr, flush=True)
        record["workloads"].append(
            {"name": w.name, "description": w.description, "max_len": w.max_len}
            | {"budget_slots": w.budget, "mean_prompt": sum(prompts) / len(prompts)}
            | {"max_prompt": max(prompts), "mean_output": sum(outputs) / len(outputs)}
            | {"max_output": max(outputs), "runs": runs}
        )
    save(args.out, record, indent=2)


if __name__ == "__main__":
    main()

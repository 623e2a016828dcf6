# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_block_manager_solution.py>>[init]
"""The solution's own invariants of the block manager (tangled from
docs/lab/03-paged-attn-reading.md; not run by `make check-mine`)."""

import math
from collections import Counter

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from minimodel.block_manager import AllocStatus, BlockManager, OutOfBlocks

# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-machine>>[init]
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=8)  # few ids: prefixes repeat


class BlockManagerMachine(RuleBasedStateMachine):
    """Random operations on a small pool, checked against the machine's own record of every
    sequence's tokens and a shadow pool (slot -> the prefix a model would have stored there)."""

    @initialize(num_blocks=st.integers(2, 32), block_size=st.integers(1, 4),
                mode=st.sampled_from(["plain", "prefix", "window"]), window=st.integers(1, 9),
                watermark=st.sampled_from([0.0, 0.01, 0.25]))
    def setup(self, num_blocks, block_size, mode, window, watermark):
        self.m = BlockManager(num_blocks, block_size, watermark=watermark,
                              enable_prefix_caching=mode == "prefix",
                              sliding_window=window if mode == "window" else None)
        self.num_blocks, self.b, self.mode = num_blocks, block_size, mode
        self.window = window if mode == "window" else None
        self.wm = int(watermark * num_blocks)
        self.live: dict[int, list[int]] = {}  # the machine's own record of each sequence
        self.released: dict[int, int] = {}  # leading entries the window must have released
        self.preempted: dict[int, list[int]] = {}
        self.pool: dict[int, tuple[int, ...]] = {}  # slot -> prefix of the token stored there
        self.next_id = 0

    def snapshot(self):
        return {s: self.m.block_table(s) for s in self.live}, self.m.num_free_blocks

    def pick(self, data, ids):
        return data.draw(st.sampled_from(sorted(ids)))

    def try_allocate(self, seq_id, tokens):
        required = math.ceil(len(tokens) / self.b)
        status = self.m.can_allocate(seq_id, tokens)
        if self.num_blocks - required < self.wm:
            assert status is AllocStatus.NEVER
        elif self.m.num_free_blocks - required >= self.wm:
            assert status is AllocStatus.OK
        else:
            assert status is AllocStatus.LATER
        before = self.snapshot()
        try:
            self.m.allocate(seq_id, tokens)
        except OutOfBlocks:
            assert status is not AllocStatus.OK
            assert self.snapshot() == before  # nothing changed
            return False
        cached = self.m.num_cached_tokens(seq_id)
        assert cached % self.b == 0 and 0 <= cached <= len(tokens) - 1
        assert cached == 0 or self.mode == "prefix"
        if cached:
            event("prefix hit")
        self.live[seq_id], self.released[seq_id] = list(tokens), 0
        positions = range(cached, len(tokens))  # the cached ones were written by someone else
        for p, slot in zip(positions, self.m.slot_mapping(seq_id, positions), strict=True):
            self.pool[slot] = tuple(tokens[: p + 1])
        return True

    def append_one(self, seq_id, token):
        mine, b = self.live[seq_id], self.b
        can = self.m.can_append_slot(seq_id)
        tables, free = before = self.snapshot()
        assert can == (free >= 1)
        try:
            cow = self.m.append_slot(seq_id, token)
        except OutOfBlocks:  # only when the token needed a block: a new one, or a copy
            assert free == 0
            last_shared = any(tables[seq_id][-1] in t for s, t in tables.items() if s != seq_id)
            assert len(mine) % b == 0 or last_shared
            assert self.snapshot() == before
            return False
        if cow is not None:  # only a shared block is copied, into one no table held
            src, dst = cow
            event("copy-on-write")
            assert tables[seq_id][-1] == src and len(mine) % b != 0
            assert any(src in t for s, t in tables.items() if s != seq_id)
            assert all(dst not in t for t in tables.values())
            for i in range(b):
                if src * b + i in self.pool:
                    self.pool[dst * b + i] = self.pool[src * b + i]
        n = len(mine)
        mine.append(token)
        (slot,) = self.m.slot_mapping(seq_id, [n])
        self.pool[slot] = tuple(mine)
        if self.window is not None:  # the next query stands at n and sees n - W + 1 ... n
            self.released[seq_id] = max(self.released[seq_id], (n + 1 - self.window) // b)
        return True

    @rule(tokens=TOKENS)
    def allocate(self, tokens):
        self.try_allocate(self.next_id, tokens)
        self.next_id += 1

    @rule(data=st.data(), tail=TOKENS)
    def prefix_hit(self, data, tail):
        """A request that starts like a live one."""
        if not self.live:
            return
        tokens = self.live[self.pick(data, self.live)]
        k = data.draw(st.integers(0, len(tokens)))
        self.try_allocate(self.next_id, tokens[:k] + tail)
        self.next_id += 1

    @rule(data=st.data(), tokens=st.lists(st.integers(0, 2), min_size=1, max_size=6))
    def append(self, data, tokens):
        """Decode steps of one sequence, a token at a time."""
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        for token in tokens:
            if not self.append_one(seq_id, token):
                return

    @rule(data=st.data())
    def fork(self, data):
        if not self.live:
            return
        parent = self.pick(data, self.live)
        free = self.m.num_free_blocks
        self.m.fork(parent, self.next_id)
        assert self.m.num_free_blocks == free  # sharing costs no block
        self.live[self.next_id] = list(self.live[parent])
        self.released[self.next_id] = self.released[parent]
        self.next_id += 1

    @rule(data=st.data())
    def free(self, data):
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        self.m.free(seq_id)
        del self.live[seq_id], self.released[seq_id]

    @rule(data=st.data())
    def preempt(self, data):
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        assert self.m.preempt(seq_id) == self.live[seq_id]
        self.preempted[seq_id] = self.live.pop(seq_id)
        del self.released[seq_id]

    @rule(data=st.data())
    def resume(self, data):
        """A preempted sequence comes back, to be recomputed (with prefix caching: a hit)."""
        if not self.preempted:
            return
        seq_id = self.pick(data, self.preempted)
        if self.try_allocate(seq_id, self.preempted[seq_id]):
            del self.preempted[seq_id]

    @invariant()
    def tables_hold_exactly_the_tokens(self):
        held, b = Counter(), self.b
        for seq_id, tokens in self.live.items():
            table, n, released = self.m.block_table(seq_id), len(tokens), self.released[seq_id]
            assert len(table) == math.ceil(n / b)
            assert table[:released] == [-1] * released  # released exactly what no query sees
            mine = table[released:]
            assert all(0 <= x < self.num_blocks for x in mine) and len(set(mine)) == len(mine)
            held.update(mine)
            positions = range(released * b, n)
            slots = self.m.slot_mapping(seq_id, positions)
            assert slots == [table[p // b] * b + p % b for p in positions]
            for p, slot in zip(positions, slots, strict=True):  # read the sequence back
                assert self.pool.get(slot) == tuple(tokens[: p + 1]), (seq_id, p)
            if released:
                with pytest.raises(ValueError, match="released"):
                    self.m.slot_mapping(seq_id, [released * b - 1])
        # free xor held, and a block's count is its number of holders (see the page)
        assert self.m.num_free_blocks == self.num_blocks - len(held)

    def teardown(self):
        """Free everything: no block is lost, and one sequence can then hold them all."""
        if not hasattr(self, "m"):
            return
        for seq_id in list(self.live):
            self.m.free(seq_id)
        assert self.m.num_free_blocks == self.num_blocks
        self.m.allocate(self.next_id, [3] * (self.num_blocks * self.b))  # evicts every cached block
        assert sorted(self.m.block_table(self.next_id)) == list(range(self.num_blocks))
        assert self.m.num_free_blocks == 0
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-internals>>[init]
class InternalsMachine(BlockManagerMachine):
    @invariant()
    def counts_and_lists_agree_with_the_tables(self):
        m, n = self.m, self.num_blocks
        held = Counter(b for s in self.live for b in m.block_table(s) if b >= 0)
        assert m._refs == [held[b] for b in range(n)]
        free, evictable = list(m._free), list(m._evictable)
        assert len(set(free)) == len(free) and not set(free) & set(evictable)
        assert set(free) | set(evictable) == {b for b in range(n) if held[b] == 0}
        assert all(m._hash[b] is not None for b in evictable)
        assert all(m._hash[block] == name for name, block in m._cached.items())
        assert sum(h is not None for h in m._hash) == len(m._cached)


InternalsMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50,
                                              deadline=None)
test_internal_state = InternalsMachine.TestCase
# ~/~ end
# ~/~ end

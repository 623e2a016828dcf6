# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_block_manager.py>>[init]
"""Checks of the block manager (tangled from docs/lab/03-paged-attn-reading.md)."""

import math
import re
from collections import Counter

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from minimodel.block_manager import AllocStatus, BlockManager, OutOfBlocks

pytestmark = pytest.mark.lab("03")  # the task's tests: `make check-mine LAB=03` runs them

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
        self.computed: dict[int, int] = {}  # leading tokens whose K/V the "model" has written
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
        assert self.m.num_computed_tokens(seq_id) == cached  # a hit's K/V is already there
        if cached:
            event("prefix hit")
        self.live[seq_id], self.released[seq_id] = list(tokens), 0
        self.computed[seq_id] = cached  # nothing written yet: the hit's blocks must hold it
        return True

    def compute_to(self, seq_id, c):
        """A forward pass writes the K/V of positions computed ... c - 1, then says so."""
        mine, old = self.live[seq_id], self.computed[seq_id]
        positions = range(old, c)
        for p, slot in zip(positions, self.m.slot_mapping(seq_id, positions), strict=True):
            self.pool[slot] = tuple(mine[: p + 1])
        self.m.mark_computed(seq_id, c)
        self.computed[seq_id] = c

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
        if self.window is not None:  # the first query not computed stands at c: sees c - W + 1 ...
            c = self.computed[seq_id]
            self.released[seq_id] = max(self.released[seq_id], (c + 1 - self.window) // b)
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

    @rule(data=st.data(), tokens=st.lists(st.integers(0, 2), min_size=1, max_size=6),
          step=st.booleans())
    def append(self, data, tokens, step):
        """Decode steps of one sequence, a token at a time, each computed at once (step), or
        slots for a chunk that a later forward pass computes (`compute`)."""
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        for token in tokens:
            if step:
                self.compute_to(seq_id, len(self.live[seq_id]))
            if not self.append_one(seq_id, token):
                return

    @rule(data=st.data())
    def compute(self, data):
        """A forward pass over some or all of a sequence's tokens not computed yet."""
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        n = len(self.live[seq_id])
        self.compute_to(seq_id, data.draw(st.one_of(st.just(n),
                                                    st.integers(self.computed[seq_id], n))))

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
        self.computed[self.next_id] = self.computed[parent]
        self.next_id += 1

    @rule(data=st.data())
    def free(self, data):
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        self.m.free(seq_id)
        del self.live[seq_id], self.released[seq_id], self.computed[seq_id]

    @rule(data=st.data())
    def preempt(self, data):
        if not self.live:
            return
        seq_id = self.pick(data, self.live)
        assert self.m.preempt(seq_id) == self.live[seq_id]
        self.preempted[seq_id] = self.live.pop(seq_id)
        del self.released[seq_id], self.computed[seq_id]

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
            assert self.m.num_computed_tokens(seq_id) == self.computed[seq_id]
            positions = range(released * b, n)
            slots = self.m.slot_mapping(seq_id, positions)
            assert slots == [table[p // b] * b + p % b for p in positions]
            for p, slot in zip(positions, slots, strict=True):  # read the computed ones back
                if p < self.computed[seq_id]:
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


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-machine-run>>[init]
BlockManagerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50,
                                                 deadline=None)
test_block_manager_state_machine = BlockManagerMachine.TestCase
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-behaviours>>[init]
def test_prefix_hit_reuses_leading_full_blocks():
    m = BlockManager(16, 4, enable_prefix_caching=True)
    a = list(range(10))  # blocks [0..3] [4..7] and a partial [8, 9]
    m.allocate(1, a)
    m.mark_computed(1, 10)  # its prefill ran: its full blocks are hits from now on
    free = m.num_free_blocks
    m.allocate(2, a[:8] + [7, 7, 7])  # the same two full blocks, another tail
    assert m.num_cached_tokens(1) == 0 and m.num_cached_tokens(2) == 8
    assert m.block_table(2)[:2] == m.block_table(1)[:2]
    assert m.block_table(2)[2] not in m.block_table(1)
    assert m.num_free_blocks == free - 1  # only the tail's block is new
    m.allocate(3, a[:4] + [9] * 4 + a[8:])  # the same first block, then a different one
    assert m.num_cached_tokens(3) == 4
    m.allocate(4, [9] * 4 + a[4:])  # the second block's tokens after another first block
    assert m.num_cached_tokens(4) == 0  # a block's name includes everything before it


def test_a_fully_cached_prompt_still_computes_its_last_token():
    m = BlockManager(16, 4, enable_prefix_caching=True)
    m.allocate(1, list(range(8)))
    m.mark_computed(1, 8)
    m.allocate(2, list(range(8)))
    assert m.num_cached_tokens(2) == 4  # the model needs one token's logits
    m.allocate(3, list(range(9)))
    assert m.num_cached_tokens(3) == 8


def test_blocks_filled_by_decoding_are_cached_too():
    m = BlockManager(16, 4, enable_prefix_caching=True)
    m.allocate(1, [1, 2, 3])
    m.mark_computed(1, 3)
    m.append_slot(1, 4)  # fills the first block
    m.allocate(2, [1, 2, 3, 4, 6])
    assert m.num_cached_tokens(2) == 0  # not before the decode step has computed it
    m.mark_computed(1, 4)
    m.append_slot(1, 5)
    m.allocate(3, [1, 2, 3, 4, 6])
    assert m.num_cached_tokens(3) == 4
    assert m.block_table(3)[0] == m.block_table(1)[0]
    m.free(2)
    m.allocate(2, [1, 2, 3, 4, 6])
    assert m.num_cached_tokens(2) == 4
    assert m.block_table(2)[0] == m.block_table(1)[0]


def test_freed_cached_blocks_are_evicted_least_recently_used_first():
    m = BlockManager(8, 2, watermark=0.0, enable_prefix_caching=True)
    prompts = {1: [1, 1, 0], 2: [2, 2, 0], 3: [3, 3, 0]}  # one full block each, and a tail
    for seq_id, prompt in prompts.items():
        m.allocate(seq_id, prompt)
        m.mark_computed(seq_id, 3)
    first = m.block_table(1)[0]
    for seq_id in (1, 2, 3):
        m.free(seq_id)
    assert m.num_free_blocks == 8  # cached blocks that can be evicted count as free
    m.allocate(4, [1, 1, 5])  # a hit on sequence 1's block: now the most recently used
    assert m.block_table(4)[0] == first
    m.free(4)
    m.allocate(5, [7] * 11)  # 6 blocks: the 5 free ones, then one eviction
    m.mark_computed(5, 11)
    m.free(5)  # its full blocks are now the most recently used
    for probe, seq_id, cached in ((11, 1, 2), (13, 3, 2), (12, 2, 0)):
        m.allocate(probe, prompts[seq_id])  # sequence 2's block was the least recently used
        assert m.num_cached_tokens(probe) == cached, seq_id


def test_a_freed_sequence_keeps_its_prefix_longer_than_its_tail():
    m = BlockManager(3, 2, watermark=0.0, enable_prefix_caching=True)
    m.allocate(1, [1, 1, 2, 2, 0])  # two full blocks and a tail
    m.mark_computed(1, 5)
    m.free(1)
    m.allocate(2, [5, 5, 5])  # the tail's block, then one eviction: the second block
    m.free(2)
    m.allocate(3, [1, 1, 2, 2, 0])
    assert m.num_cached_tokens(3) == 2  # the first block survived


def test_hits_are_revived_before_new_blocks_are_taken():
    m = BlockManager(4, 2, watermark=0.0, enable_prefix_caching=True)
    m.allocate(1, [1, 1, 0])
    m.allocate(3, [2, 2, 0])
    m.mark_computed(1, 3)
    m.mark_computed(3, 3)
    m.free(1)
    m.free(3)  # evictable, oldest first: [1, 1], then [2, 2]
    m.allocate(2, [1, 1, 5, 5, 5, 5, 5])  # hits [1, 1], takes 2 free blocks and evicts [2, 2]
    assert m.num_cached_tokens(2) == 2
    assert len(set(m.block_table(2))) == 4 and m.num_free_blocks == 0  # the hit was not evicted


def test_a_block_whose_parent_was_evicted_is_no_hit():
    m = BlockManager(6, 2, watermark=0.0, enable_prefix_caching=True)
    m.allocate(1, [1, 1])
    m.mark_computed(1, 2)  # block P, named
    m.allocate(2, [1, 1])  # a duplicate of P (its last block is never looked up): unnamed
    m.append_slot(2, 3)
    m.append_slot(2, 4)
    m.mark_computed(2, 4)  # [3, 4] after [1, 1]: a named child of P's name
    m.free(1)
    m.free(2)  # evictable, oldest first: P, the child
    m.allocate(3, [9] * 9)  # the 4 free blocks, then P is evicted: the child is an orphan
    m.free(3)
    m.allocate(4, [1, 1, 3, 4, 0])
    assert m.num_cached_tokens(4) == 0  # a hit is a run of blocks from the first one


def test_out_of_blocks_with_an_evictable_hit_changes_nothing():
    m = BlockManager(3, 2, watermark=0.0, enable_prefix_caching=True)
    m.allocate(1, [1, 1, 0])
    m.mark_computed(1, 3)
    m.free(1)  # [1, 1] evictable: it counts as free, and reviving it uses it up
    with pytest.raises(OutOfBlocks):
        m.allocate(2, [1, 1, 5, 5, 5, 5, 5])  # 4 blocks, one of them a hit: 4 > 3
    assert m.num_free_blocks == 3
    m.allocate(3, [1, 1, 0])
    assert m.num_cached_tokens(3) == 2 and m.num_free_blocks == 1


def test_out_of_blocks_with_a_window_and_a_fork_changes_nothing():
    m = BlockManager(3, 2, watermark=0.0, sliding_window=2)
    m.allocate(1, [1, 2, 3])  # a full block and a half-full one
    m.mark_computed(1, 3)  # the next query sees 2, 3: block 0 is dead once 1 appends
    m.fork(1, 2)
    m.allocate(3, [9])  # the last free block
    table = m.block_table(1)
    with pytest.raises(OutOfBlocks):  # a copy is needed; the dead block 0 is still the fork's
        m.append_slot(1, 4)
    assert m.block_table(1) == table and m.num_free_blocks == 0


def test_cached_blocks_are_evicted_only_when_a_block_is_needed():
    m = BlockManager(8, 2, watermark=0.0, enable_prefix_caching=True)
    m.allocate(1, [1, 1, 2, 2, 0])
    m.mark_computed(1, 5)
    m.free(1)
    m.allocate(2, [5] * 10)  # 5 blocks: exactly the free ones
    m.allocate(3, [1, 1, 2, 2, 0])
    assert m.num_cached_tokens(3) == 4


def test_fork_shares_blocks_and_the_first_write_copies():
    m = BlockManager(8, 4)
    m.allocate(1, [1, 2, 3, 4, 5, 6])  # a full block and a partial one
    free = m.num_free_blocks
    m.fork(1, 2)
    assert m.block_table(2) == m.block_table(1) and m.num_free_blocks == free
    shared = m.block_table(1)[-1]
    src, dst = m.append_slot(2, 9)  # the child writes first: it gets the copy
    assert src == shared and dst not in m.block_table(1)
    assert m.block_table(2) == m.block_table(1)[:1] + [dst]
    assert m.append_slot(1, 7) is None  # the parent is now the block's only holder
    assert m.block_table(1)[-1] == shared
    assert m.slot_mapping(1, [6]) != m.slot_mapping(2, [6])


def test_fork_at_a_block_boundary_needs_no_copy():
    m = BlockManager(8, 2)
    m.allocate(1, [1, 2, 3, 4])
    m.fork(1, 2)
    assert m.append_slot(1, 5) is None and m.append_slot(2, 6) is None
    assert m.block_table(1)[:2] == m.block_table(2)[:2]
    assert m.block_table(1)[2] != m.block_table(2)[2]


def test_window_releases_what_no_query_can_see():
    m = BlockManager(8, 2, sliding_window=3)
    m.allocate(1, [1, 2, 3, 4, 5])  # the prefill's queries see every block
    assert m.block_table(1).count(-1) == 0
    free = m.num_free_blocks
    m.append_slot(1, 6)  # nothing computed yet: the prefill's queries still need everything
    assert m.block_table(1).count(-1) == 0 and m.num_free_blocks == free
    m.free(1)
    m.allocate(1, [1, 2, 3, 4, 5])
    m.mark_computed(1, 5)  # the prefill ran
    m.append_slot(1, 6)  # the query at 5 sees 3, 4, 5: block 0 (positions 0, 1) is dead
    assert m.block_table(1)[0] == -1 and m.num_free_blocks == free + 1
    assert len(m.slot_mapping(1, [2, 3, 4, 5])) == 4  # position 2 still held (block 1)
    with pytest.raises(ValueError, match="released"):
        m.slot_mapping(1, [1])
    m.mark_computed(1, 6)
    m.append_slot(1, 7)  # the query at 6 sees 4, 5, 6: block 1 (2, 3) is dead
    assert m.block_table(1)[:2] == [-1, -1]


def test_window_of_one_keeps_only_the_new_token():
    m = BlockManager(4, 1, sliding_window=1)
    m.allocate(1, [1, 2, 3])
    for t in range(10):  # a pool of 4 blocks serves any length
        m.mark_computed(1, 3 + t)  # the previous token's decode step ran
        m.append_slot(1, t)
    assert m.block_table(1)[:-1] == [-1] * 12 and m.num_free_blocks == 3


def test_append_takes_the_block_the_window_releases():
    m = BlockManager(2, 2, watermark=0.0, sliding_window=2)
    m.allocate(1, [1, 2, 3, 4])  # both blocks
    m.mark_computed(1, 4)
    assert not m.can_append_slot(1)  # no block is free (vLLM's answer too)
    m.append_slot(1, 5)  # position 4 needs a block; block 0 (0, 1) is released first
    assert m.block_table(1)[0] == -1 and len(m.block_table(1)) == 3


def test_can_append_slot_assumes_the_token_needs_a_block():
    m = BlockManager(2, 4, watermark=0.0)
    m.allocate(1, [1] * 5)  # both blocks, three free slots in the second
    assert not m.can_append_slot(1)
    assert m.append_slot(1, 2) is None  # yet the token fits


def test_out_of_blocks_changes_nothing():
    m = BlockManager(2, 2, watermark=0.0)
    m.allocate(1, [1, 2, 3, 4])
    table = m.block_table(1)
    with pytest.raises(OutOfBlocks):
        m.append_slot(1, 5)
    assert m.block_table(1) == table and m.num_free_blocks == 0
    with pytest.raises(ValueError, match=r"\b4\b"):
        m.slot_mapping(1, [4])  # the failed append gave position 4 no slot
    with pytest.raises(OutOfBlocks):
        m.allocate(2, [1])
    with pytest.raises(ValueError, match="no live sequence"):
        m.block_table(2)
    m.fork(1, 3)
    m.free(1)
    assert m.num_free_blocks == 0  # the fork still holds both blocks
    m.free(3)
    assert m.num_free_blocks == 2


def test_can_allocate_keeps_the_watermark_free():
    m = BlockManager(100, 1, watermark=0.05)  # 5 blocks of watermark
    assert m.can_allocate(1, [0] * 96) is AllocStatus.NEVER  # 100 - 96 < 5, even empty
    assert m.can_allocate(1, [0] * 95) is AllocStatus.OK
    m.allocate(1, [0] * 90)
    assert m.can_allocate(2, [0] * 5) is AllocStatus.OK  # 10 free - 5 >= 5
    assert m.can_allocate(2, [0] * 6) is AllocStatus.LATER
    m.free(1)
    assert m.can_allocate(2, [0] * 6) is AllocStatus.OK


def test_preempted_tokens_come_back_as_a_prefix_hit():
    m = BlockManager(8, 2, enable_prefix_caching=True)
    m.allocate(1, [1, 2, 3])
    for t in (4, 5, 6):
        m.mark_computed(1, t - 1)
        m.append_slot(1, t)
    tokens = m.preempt(1)
    assert tokens == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="no live sequence"):
        m.append_slot(1, 7)
    m.allocate(1, tokens)  # recompute: the full blocks are still cached
    assert m.num_cached_tokens(1) == 4


def test_a_block_is_a_hit_only_once_its_kv_is_computed():
    prompt = list(range(16)) + [20, 21, 22]  # two full blocks of 8, and a tail
    m = BlockManager(16, 8, enable_prefix_caching=True)
    m.allocate(1, prompt)
    m.allocate(2, prompt)  # before the owner's prefill: nothing has been written
    assert m.num_cached_tokens(2) == 0 and m.num_computed_tokens(2) == 0
    m.free(2)
    m.free(1)  # the owner freed unrun
    m.allocate(3, prompt)
    assert m.num_cached_tokens(3) == 0
    m.mark_computed(3, 12)  # a first chunk: block 0 computed, block 1 not yet
    m.allocate(4, prompt)
    assert m.num_cached_tokens(4) == 8 and m.num_computed_tokens(4) == 8
    m.mark_computed(3, 19)
    m.allocate(5, prompt)  # the same prompt after the first has run: 16 cached tokens
    assert m.num_cached_tokens(5) == 16 and m.num_computed_tokens(5) == 16
    assert m.block_table(5)[:2] == m.block_table(3)[:2]


def test_block_names_do_not_collide():
    m = BlockManager(16, 4, enable_prefix_caching=True)
    m.allocate(1, [0] * 4 + [5])
    m.mark_computed(1, 5)
    m.allocate(2, [2**61 - 1] * 4 + [5])  # hash(0) == hash(2**61 - 1) in CPython
    m.allocate(3, [0, 0, 1] + [5])  # a block boundary elsewhere, the same digits
    m.allocate(4, [0] * 4 + [5])
    assert [m.num_cached_tokens(s) for s in (2, 3, 4)] == [0, 0, 4]
    m.allocate(5, [1, 23, 4, 5, 9])
    m.mark_computed(5, 5)
    m.allocate(6, [12, 3, 4, 5, 9])  # the same digits, another split into token ids
    assert m.num_cached_tokens(6) == 0


def test_the_window_releases_by_computed_tokens():
    m = BlockManager(8, 8, watermark=0.0, sliding_window=4)
    m.allocate(1, list(range(16)))
    m.mark_computed(1, 16)
    for t in range(16, 24):  # slots for a chunk of 8, fed later in one forward pass
        m.append_slot(1, t)
    assert m.block_table(1)[0] == -1 and m.block_table(1)[1] >= 0  # the query at 16 sees 13
    assert len(m.slot_mapping(1, range(13, 24))) == 11
    m.mark_computed(1, 24)
    m.append_slot(1, 24)  # now the first query not computed stands at 24: sees 21 ...
    assert m.block_table(1)[:2] == [-1, -1]
    m.fork(1, 2)
    assert m.num_computed_tokens(2) == 24


def test_mark_computed_refuses_what_is_not_so():
    m = BlockManager(8, 4)
    m.allocate(1, [1, 2, 3])
    m.mark_computed(1, 2)
    for bad in (1, 4, -1, 2.0, True, "3"):  # back, past the tokens held, not an int
        raises_naming(lambda bad=bad: m.mark_computed(1, bad), "num_tokens", bad)
    raises_naming(lambda: m.mark_computed(7, 1), 7)
    raises_naming(lambda: m.num_computed_tokens(7), 7)
    raises_naming(lambda: m.allocate(2, 5), "prompt_tokens", error=TypeError)
    m.mark_computed(1, 2)  # the same count again is no change
    assert m.num_computed_tokens(1) == 2


def named(value: object, message: str) -> bool:
    """Whether the message names value as a whole word or number: 3 is not named by 30 or 2.3,
    and a name may follow a dot. The words around it are the learner's."""
    value = str(value)
    before = r"(?<!\w)(?<!\d\.)" if value[:1].isdigit() else r"(?<!\w)"
    return re.search(rf"{before}{re.escape(value)}(?![\w]|\.\d)", message) is not None


def raises_naming(call, *values, error=ValueError):
    """call() raises `error` whose message names every value (the wording is not checked)."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert all(named(v, message) for v in values), f"{message!r} should name {values}"


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: BlockManager(0, 16), ["num_blocks", 0]),
        (lambda: BlockManager(8, 0), ["block_size", 0]),
        (lambda: BlockManager(8, 2.5), ["block_size", 2.5]),
        (lambda: BlockManager(2**31, 4), ["num_blocks", 2**31]),  # block tables are int32
        (lambda: BlockManager(8, 4, watermark=1.0), ["watermark", 1.0]),
        (lambda: BlockManager(8, 4, sliding_window=0), ["sliding_window", 0]),
        (lambda: BlockManager(8, 4, enable_prefix_caching=True, sliding_window=8), []),
    ],
)
def test_bad_sizes_raise(make, names):
    raises_naming(make, *names)


def test_bad_sequences_raise():
    m = BlockManager(8, 4)
    m.allocate(1, [1, 2])
    table, free = m.block_table(1), m.num_free_blocks
    for call, names in [
        (lambda: m.allocate(1, [3]), ["already live", 1]),
        (lambda: m.can_allocate(1, [3]), ["already live", 1]),
        (lambda: m.allocate(2, []), [2]),  # an empty prompt: its sequence
        (lambda: m.allocate(2, [1, -1]), [-1]),  # a bad token: its value
        (lambda: m.allocate("x", [1]), ["x"]),
        (lambda: m.append_slot(1, 1.5), [1.5]),
        (lambda: m.append_slot(7, 1), ["no live sequence", 7]),
        (lambda: m.can_append_slot(7), ["no live sequence", 7]),
        (lambda: m.fork(7, 8), ["no live sequence", 7]),
        (lambda: m.fork(1, 1), ["already live", 1]),
        (lambda: m.free(7), ["no live sequence", 7]),
        (lambda: m.preempt(7), ["no live sequence", 7]),
        (lambda: m.num_cached_tokens(7), ["no live sequence", 7]),
        (lambda: m.slot_mapping(1, [2]), [2]),
        (lambda: m.slot_mapping(1, [-1]), [-1]),
    ]:
        raises_naming(call, *names)
    assert m.block_table(1) == table and m.num_free_blocks == free  # nothing changed
# ~/~ end
# ~/~ end

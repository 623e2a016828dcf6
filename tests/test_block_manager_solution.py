# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_block_manager_solution.py>>[init]
"""The solution's own invariants of the block manager, and its messages word for word (tangled
from docs/lab/03-paged-attn-reading.md; not run by `make check-mine`: a learner's wording may
differ)."""

from collections import Counter

import pytest
import test_block_manager as lab  # the lab's state machine, extended (a module: not re-collected)
from hypothesis import settings
from hypothesis.stateful import invariant

from minimodel.block_manager import BlockManager


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-internals>>[init]
class InternalsMachine(lab.BlockManagerMachine):
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


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-check-solution-messages>>[init]
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: BlockManager(0, 16), r"num_blocks must be an int >= 1, got 0"),
        (lambda: BlockManager(8, 0), r"block_size must be an int >= 1, got 0"),
        (lambda: BlockManager(8, 2.5), r"block_size must be an int >= 1, got 2.5"),
        (lambda: BlockManager(2**31, 4), r"num_blocks must be below 2\*\*31, got 2147483648"),
        (lambda: BlockManager(8, 4, watermark=1.0), r"watermark must be a number in \[0, 1\)"),
        (lambda: BlockManager(8, 4, sliding_window=0), r"sliding_window must be an int >= 1"),
        (lambda: BlockManager(8, 4, enable_prefix_caching=True, sliding_window=8),
         r"prefix caching with a sliding window is refused"),
    ],
)
def test_the_solutions_size_messages(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_the_solutions_sequence_messages():
    m = BlockManager(8, 4)
    m.allocate(1, [1, 2])
    for call, match in [
        (lambda: m.allocate(1, [3]), r"sequence 1 is already live"),
        (lambda: m.can_allocate(1, [3]), r"sequence 1 is already live"),
        (lambda: m.allocate(2, []), r"prompt of sequence 2 is empty"),
        (lambda: m.allocate(2, [1, -1]), r"a token id of sequence 2 must be an int >= 0, got -1"),
        (lambda: m.allocate("x", [1]), r"seq_id must be an int, got 'x'"),
        (lambda: m.append_slot(1, 1.5), r"token must be an int >= 0, got 1\.5"),
        (lambda: m.append_slot(7, 1), r"no live sequence with id 7"),
        (lambda: m.can_append_slot(7), r"no live sequence with id 7"),
        (lambda: m.fork(7, 8), r"no live sequence with id 7"),
        (lambda: m.fork(1, 1), r"sequence 1 is already live"),
        (lambda: m.free(7), r"no live sequence with id 7"),
        (lambda: m.preempt(7), r"no live sequence with id 7"),
        (lambda: m.num_cached_tokens(7), r"no live sequence with id 7"),
        (lambda: m.slot_mapping(1, [2]),
         r"a position of sequence 1 must be an int in \[0, 1\], got 2"),
        (lambda: m.slot_mapping(1, [-1]), r"a position of sequence 1 .*, got -1"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_the_solutions_mark_computed_messages():
    m = BlockManager(8, 4)
    m.allocate(1, [1, 2, 3])
    m.mark_computed(1, 2)
    for bad in (1, 4, -1, 2.0, True, "3"):  # the value as repr shows it: '3' for a string
        with pytest.raises(ValueError) as info:
            m.mark_computed(1, bad)
        assert str(info.value) == f"num_tokens of sequence 1 must be an int in [2, 3], got {bad!r}"
# ~/~ end
# ~/~ end

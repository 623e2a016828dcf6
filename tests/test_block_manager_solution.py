# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_block_manager_solution.py>>[init]
"""The solution's own invariants of the block manager (tangled from
docs/lab/03-paged-attn-reading.md; not run by `make check-mine`)."""

from collections import Counter

import test_block_manager as lab  # the lab's state machine, extended (a module: not re-collected)
from hypothesis import settings
from hypothesis.stateful import invariant


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
# ~/~ end

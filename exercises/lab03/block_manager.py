# ~/~ begin <<docs/lab/03-paged-attn-reading.md#exercises/lab03/block_manager.py>>[init]
"""Lab 03: the block manager. Fill in every body that raises NotImplementedError.

Skeleton tangled from docs/lab/03-paged-attn-reading.md (`make exercise LAB=03` copies it to
mywork/); check it with `make check-mine LAB=03`.
"""

import enum
from collections.abc import Iterable, Sequence


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-types>>[init]
class AllocStatus(enum.Enum):
    """The answer of `can_allocate`: allocate now, after some sequences finish, or never."""

    OK = "ok"
    LATER = "later"
    NEVER = "never"


class OutOfBlocks(RuntimeError):
    """An operation needed a free block and there was none; nothing was changed."""
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-class>>[init]
class BlockManager:
    """Which physical KV blocks hold each sequence's tokens: block tables, reference counts,
    copy-on-write, a watermark, a sliding window, prefix caching with LRU eviction.

    Physical blocks are numbered 0 ... num_blocks - 1. Entry i of a sequence's block table is
    the physical block holding its positions i * block_size ... (i + 1) * block_size - 1. The
    cache that owns the K/V pools asks where each token goes (`slot_mapping`) and performs the
    block copies that `append_slot` returns.
    """
# ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-init-interface>>[init]
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        watermark: float = 0.01,
        enable_prefix_caching: bool = False,
        sliding_window: int | None = None,
    ) -> None:
        """`num_blocks` physical blocks of `block_size` token slots each (ints >= 1).

        watermark: the fraction of the blocks that `can_allocate` keeps free for running sequences
        to grow into, `int(watermark * num_blocks)` blocks; 0 <= watermark < 1.
        enable_prefix_caching: a full block is cached under its content (its tokens and every
        token before it) once its K/V is computed (`mark_computed`); a new prompt reuses its cached
        leading blocks; a freed cached block stays cached (and counts as free) until a block is
        needed, then the least recently used goes.
        sliding_window=W (an int >= 1): a query sees its W most recent keys, itself included
        (`attention_ref`'s window); blocks that no query can see any more are released.
        Raises ValueError for a bad size, and for prefix caching together with a window.
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: BlockManager.__init__: the free list, the reference counts and "
            "the tables (and the prefix cache)"
        )

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-num-free-blocks-interface>>[init]
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: the free ones and, with prefix caching, the cached blocks
        that no sequence holds (they are evicted when needed), as in vLLM."""
    # ~/~ end
        raise NotImplementedError("not written yet: num_free_blocks")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-can-allocate-interface>>[init]
    def can_allocate(self, seq_id: int, prompt_tokens: Sequence[int]) -> AllocStatus:
        """Whether a new sequence with this prompt may be admitted, keeping the watermark free.

        With required = ceil(len(prompt_tokens) / block_size) (cached blocks not counted off, as in
        vLLM) and wm = int(watermark * num_blocks): NEVER if num_blocks - required < wm (it would
        not fit even in an empty pool); else OK if num_free_blocks - required >= wm; else LATER.
        Changes nothing. Raises ValueError for a bad or live seq_id, an empty prompt, or a token
        that is not an int >= 0; TypeError naming prompt_tokens when it is not iterable.
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: can_allocate: the blocks the prompt needs against the free ones "
            "and the watermark"
        )

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-allocate-interface>>[init]
    def allocate(self, seq_id: int, prompt_tokens: Sequence[int]) -> None:
        """Blocks for a new sequence's whole prompt: it then holds len(prompt_tokens) tokens.

        With prefix caching, the prompt's leading full blocks whose content is cached, hence
        computed, are reused (reference count up: nothing copied, nothing to compute), at most
        floor((len(prompt_tokens) - 1) / block_size) of them, so that the model computes at least
        the last token (it needs its logits); `num_cached_tokens` says how many tokens that is, and
        they count as computed. The prompt's other blocks are cached only once `mark_computed`
        covers them. Does not apply the watermark (that is
        `can_allocate`'s admission policy). Raises OutOfBlocks, changing nothing, when there are
        not enough free blocks; ValueError as `can_allocate`.
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: allocate: a block table for the prompt, cached blocks reused"
        )

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-can-append-slot-interface>>[init]
    def can_append_slot(self, seq_id: int) -> bool:
        """Whether a block is free (num_free_blocks >= 1), in case the next token needs one.

        As in vLLM this assumes the worst: a token that fits in an unshared last block needs no
        block, so `append_slot` may succeed when this is False. Raises ValueError for an unknown
        sequence.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: can_append_slot")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-append-slot-interface>>[init]
    def append_slot(self, seq_id: int, token: int) -> tuple[int, int] | None:
        """Give `token`, the token about to be fed to the model, the sequence's next slot: position
        n, n being the tokens it holds so far.

        First, with a window W, the blocks that no query still to be computed can see are
        released: with c the tokens computed so far (`num_computed_tokens`), the first such query
        stands at c and sees c - W + 1 onwards, so entry i goes when (i + 1) * block_size <=
        c + 1 - W; the entry becomes -1. (At a decode step c = n: the token before is computed.
        Before a chunk of several new tokens c < n, and the chunk's first queries keep their keys.)
        Then, if position n opens a new
        block, a block is taken; if it falls in the last block and another sequence holds that block
        too (a fork), copy-on-write: this sequence gets a new block, and the copy to perform is
        returned as (src_block, dst_block): copy all of src into dst before writing. Otherwise
        returns None. The token is not computed yet: a block it fills is cached by `mark_computed`.
        Raises OutOfBlocks, changing nothing, when a block is needed and none is free after the
        window's release; ValueError for an unknown sequence or a token that is not an int >= 0.
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: append_slot: release what the window hides, then a new block, "
            "a copy-on-write, or nothing"
        )

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-fork-interface>>[init]
    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence `child_id` with the parent's tokens, computed tokens and block table
        (entries released by the window included): every block shared, reference counts up, no block
        taken, nothing copied. Raises ValueError for an unknown parent or a live child id.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: fork: share every block of the parent")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-free-interface>>[init]
    def free(self, seq_id: int) -> None:
        """Forget the sequence. A block no other table holds becomes free; with prefix caching a
        cached block becomes evictable instead, the sequence's last blocks the least recently used
        (a prefix outlives its tail). Raises ValueError for an unknown sequence.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: free: every block's count down by one")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-preempt-interface>>[init]
    def preempt(self, seq_id: int) -> list[int]:
        """Free the sequence now and return its tokens (the prompt, then one per append_slot), to
        allocate again later and recompute: vLLM's default preemption. Swapping to CPU memory is
        not modelled. Raises ValueError for an unknown sequence.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: preempt")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-block-table-interface>>[init]
    def block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's block table: the physical block of each logical block, -1
        where the window released it. Raises ValueError for an unknown sequence."""
    # ~/~ end
        raise NotImplementedError("not written yet: block_table")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-slot-mapping-interface>>[init]
    def slot_mapping(self, seq_id: int, positions: Iterable[int]) -> list[int]:
        """The physical slot, block * block_size + offset, of each position of the sequence: where
        a kernel writes and reads that token's K and V. Raises ValueError for a position outside
        [0, tokens held), a position the window released, or an unknown sequence.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: slot_mapping: block * block_size + offset")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-cached-tokens-interface>>[init]
    def num_cached_tokens(self, seq_id: int) -> int:
        """How many leading prompt tokens were found in the prefix cache at allocation: a multiple
        of block_size, 0 without prefix caching. Their K/V are in the pools already (only computed
        blocks are cached): the model computes only the rest. A fork has its parent's count.
        Raises ValueError for an unknown sequence."""
    # ~/~ end
        raise NotImplementedError("not written yet: num_cached_tokens")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-mark-computed-interface>>[init]
    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """A forward pass has stored the K/V of the sequence's first `num_tokens` tokens, in every
        layer. With prefix caching, each full block they cover is cached now, and not before: a
        block whose K/V was never written is never a hit. Raises ValueError for an unknown sequence
        (naming its id), or a num_tokens that is not an int from `num_computed_tokens` (counts never
        go back) to the tokens the sequence holds (naming num_tokens and the value given).
        """
    # ~/~ end
        raise NotImplementedError(
            "not written yet: mark_computed: the computed count, and the blocks it names"
        )

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-computed-tokens-interface>>[init]
    def num_computed_tokens(self, seq_id: int) -> int:
        """How many leading tokens of the sequence have their K/V stored: its cached tokens at
        allocation, then what `mark_computed` said; a fork has its parent's. Raises ValueError for
        an unknown sequence."""
    # ~/~ end
        raise NotImplementedError("not written yet: num_computed_tokens")
# ~/~ end

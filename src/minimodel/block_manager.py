# ~/~ begin <<docs/lab/03-paged-attn-reading.md#src/minimodel/block_manager.py>>[init]
"""The block manager: which physical KV blocks hold each sequence's tokens. A model of vLLM's
(v0.10.2, vllm/core/block_manager.py and vllm/core/block/), role-named like it and nano-vllm.

Tangled from docs/lab/03-paged-attn-reading.md; edit the page, not this file.
"""

import dataclasses
import enum
import hashlib
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from minimodel.checks import check_int

__all__ = ["AllocStatus", "BlockManager", "OutOfBlocks"]

# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-types>>[init]
class AllocStatus(enum.Enum):
    """The answer of `can_allocate`: allocate now, after some sequences finish, or never."""

    OK = "ok"
    LATER = "later"
    NEVER = "never"


class OutOfBlocks(RuntimeError):
    """An operation needed a free block and there was none; nothing was changed."""
# ~/~ end


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-record>>[init]
@dataclass(slots=True)
class _Seq:
    """What the manager knows of one live sequence."""

    tokens: list[int]  # every token that has a slot: the prompt, then one per append_slot
    table: list[int]  # logical block i -> physical block, -1 once the window released it
    num_cached: int = 0  # leading tokens found in the prefix cache at allocation
    computed: int = 0  # leading tokens whose K/V are stored (mark_computed)
    released: int = 0  # leading table entries released by the window
    named: int = 0  # leading full blocks offered to the prefix cache (computed ones only)
    chain: bytes | None = None  # the name of block `named - 1`: the parent of the next one


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _name(parent: bytes | None, block: Sequence[int]) -> bytes:
    """A full block's name: SHA-256 over its parent's name and its own token ids, so that one
    name stands for the whole prefix up to the block's end. A tag byte tells the first block
    from the others and the parent's 32 bytes come first, so two different prefixes give two
    different inputs; a collision of the digest is what it would take to share a block wrongly.
    """
    head = b"\x00" if parent is None else b"\x01" + parent
    return hashlib.sha256(head + ",".join(map(str, block)).encode()).digest()
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

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-init>>[init]
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
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        if num_blocks >= 2**31:  # a block table is int32 in the kernels, and a count per block here
            raise ValueError(f"num_blocks must be below 2**31, got {num_blocks}")
        if isinstance(watermark, bool) or not isinstance(watermark, int | float) \
                or not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a number in [0, 1), got {watermark!r}")
        if sliding_window is not None:
            check_int("sliding_window", sliding_window, 1)
        if not isinstance(enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        if enable_prefix_caching and sliding_window is not None:
            raise ValueError(
                "prefix caching with a sliding window is refused: the window releases a sequence's "
                "first blocks while a cache hit needs every block of the prefix (vLLM's v0 engine "
                "refused the combination too)"
            )
        self.watermark_blocks = int(watermark * num_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.sliding_window = sliding_window
        self._refs = [0] * num_blocks  # how many block tables hold each block
        self._free: deque[int] = deque(range(num_blocks))  # a stack: the last freed goes first
        self._cached: dict[bytes, int] = {}  # a computed full block's name -> the block
        self._hash: list[bytes | None] = [None] * num_blocks  # block -> its name, if cached
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, held by none: LRU first
        self._seqs: dict[int, _Seq] = {}
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-pool>>[init]
    def _take(self) -> int:
        """A block for new content: a free one, else evict the least recently used cached one."""
        if self._free:
            block = self._free.popleft()
        elif self._evictable:
            block, _ = self._evictable.popitem(last=False)
            del self._cached[self._hash[block]]
            self._hash[block] = None
        else:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        assert self._refs[block] == 0, f"block {block} was handed out while referenced"
        self._refs[block] = 1
        return block


    def _incref(self, block: int) -> None:
        """One more table holds `block` (a fork, or a prefix hit, which may revive it)."""
        if self._refs[block] == 0:
            del self._evictable[block]  # a hit on a freed cached block: no longer evictable
        self._refs[block] += 1


    def _decref(self, block: int) -> None:
        """One table fewer holds `block`; at zero it is free, or evictable if cached."""
        assert self._refs[block] > 0, f"block {block} freed more often than it was held"
        self._refs[block] -= 1
        if self._refs[block] == 0:
            if self._hash[block] is not None:
                self._evictable[block] = None  # the most recently used end
            else:
                self._free.appendleft(block)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-num-free-blocks>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-num-free-blocks-interface>>[init]
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: the free ones and, with prefix caching, the cached blocks
        that no sequence holds (they are evicted when needed), as in vLLM."""
    # ~/~ end
        return len(self._free) + len(self._evictable)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-prefix-cache>>[init]
    def _block_name(self, parent: bytes | None, tokens: Sequence[int], i: int) -> bytes:
        """The name of logical block i of `tokens` (a full block), chained from `parent`."""
        b = self.block_size
        return _name(parent, tokens[i * b : (i + 1) * b])


    def _register(self, block: int, name: bytes) -> None:
        """A full block's K/V is computed: make it findable, unless a copy already is."""
        if name not in self._cached and self._hash[block] is None:
            self._cached[name] = block
            self._hash[block] = name


    def _name_computed(self, seq: _Seq) -> None:
        """Offer to the prefix cache, in order, each full block that the computed tokens cover."""
        for i in range(seq.named, seq.computed // self.block_size):
            seq.chain = self._block_name(seq.chain, seq.tokens, i)
            self._register(seq.table[i], seq.chain)
            seq.named = i + 1
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-validate>>[init]
    def _seq(self, seq_id: int) -> _Seq:
        check_int("seq_id", seq_id)  # also keeps a list out of get
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise ValueError(f"no live sequence with id {seq_id!r}")
        return seq


    def _check_new_id(self, seq_id: int) -> None:
        check_int("seq_id", seq_id)
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already live")


    def _check_prompt(self, seq_id: int, prompt_tokens: Iterable[int]) -> list[int]:
        self._check_new_id(seq_id)
        try:
            tokens = list(prompt_tokens)
        except TypeError:
            raise TypeError(f"prompt_tokens must be an iterable of token ids, got "
                            f"{type(prompt_tokens).__name__}") from None
        if not tokens:
            raise ValueError(f"the prompt of sequence {seq_id} is empty")
        for t in tokens:
            check_int(f"a token id of sequence {seq_id}", t, 0)
        return tokens
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-can-allocate>>[init]
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
        tokens = self._check_prompt(seq_id, prompt_tokens)
        required = _cdiv(len(tokens), self.block_size)
        if self.num_blocks - required < self.watermark_blocks:
            return AllocStatus.NEVER
        if self.num_free_blocks - required >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-allocate>>[init]
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
        tokens = self._check_prompt(seq_id, prompt_tokens)
        b, hits, chain = self.block_size, [], None
        if self.enable_prefix_caching:
            for i in range((len(tokens) - 1) // b):  # never the last token's block
                name = self._block_name(chain, tokens, i)
                if name not in self._cached:  # only computed blocks are ever in the cache
                    break
                hits.append(self._cached[name])
                chain = name
        required = _cdiv(len(tokens), b)
        live_hits = sum(self._refs[block] > 0 for block in hits)  # the others count as free
        if required - live_hits > self.num_free_blocks:
            raise OutOfBlocks(f"sequence {seq_id} needs {required} blocks ({len(hits)} cached), "
                              f"{self.num_free_blocks} free")
        for block in hits:  # revive the hits first, so that _take cannot evict them
            self._incref(block)
        table = hits + [self._take() for _ in range(required - len(hits))]
        # The hits' K/V are in the pools: they count as computed. The other blocks are named by
        # mark_computed, once a forward pass has written them.
        self._seqs[seq_id] = _Seq(tokens, table, num_cached=len(hits) * b, computed=len(hits) * b,
                                  named=len(hits), chain=chain)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-window>>[init]
    def _dead(self, computed: int) -> int:
        """Leading entries that no query still to be computed can see: the first one stands at
        position `computed` and sees computed - W + 1 ... onwards."""
        if self.sliding_window is None:
            return 0
        return max(0, (computed + 1 - self.sliding_window) // self.block_size)


    def _release(self, seq: _Seq, dead: int) -> None:
        while seq.released < dead:
            self._decref(seq.table[seq.released])
            seq.table[seq.released] = -1
            seq.released += 1
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-can-append-slot>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-can-append-slot-interface>>[init]
    def can_append_slot(self, seq_id: int) -> bool:
        """Whether a block is free (num_free_blocks >= 1), in case the next token needs one.

        As in vLLM this assumes the worst: a token that fits in an unshared last block needs no
        block, so `append_slot` may succeed when this is False. Raises ValueError for an unknown
        sequence.
        """
    # ~/~ end
        self._seq(seq_id)
        return self.num_free_blocks >= 1
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-copy-on-write>>[init]
    def _copy_on_write(self, seq: _Seq) -> tuple[int, int] | None:
        """Before writing into a shared last block, move this sequence to a copy of it."""
        src = seq.table[-1]
        if self._refs[src] == 1:
            return None
        dst = self._take()
        self._decref(src)  # the other holders keep it
        seq.table[-1] = dst
        return src, dst
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-append-slot>>[init]
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
        seq = self._seq(seq_id)
        check_int("token", token, 0)
        n, b = len(seq.tokens), self.block_size
        dead = self._dead(seq.computed)  # not n: a chunk's first queries may stand before n
        needs = n % b == 0 or self._refs[seq.table[-1]] > 1  # a new block, or a copy
        released = sum(self._refs[block] == 1 for block in seq.table[seq.released : dead])
        if needs and self.num_free_blocks + released == 0:
            raise OutOfBlocks(f"sequence {seq_id} needs a block for position {n}, none is free")
        self._release(seq, dead)
        cow = None
        if n % b == 0:
            seq.table.append(self._take())
        else:
            cow = self._copy_on_write(seq)
        seq.tokens.append(token)  # its block is named once mark_computed says its K/V is stored
        assert len(seq.table) == _cdiv(n + 1, b)
        return cow
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-fork>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-fork-interface>>[init]
    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence `child_id` with the parent's tokens, computed tokens and block table
        (entries released by the window included): every block shared, reference counts up, no block
        taken, nothing copied. Raises ValueError for an unknown parent or a live child id.
        """
    # ~/~ end
        parent = self._seq(parent_id)
        self._check_new_id(child_id)
        for block in parent.table[parent.released :]:
            self._incref(block)
        self._seqs[child_id] = dataclasses.replace(parent, tokens=list(parent.tokens),
                                                   table=list(parent.table))
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-free>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-free-interface>>[init]
    def free(self, seq_id: int) -> None:
        """Forget the sequence. A block no other table holds becomes free; with prefix caching a
        cached block becomes evictable instead, the sequence's last blocks the least recently used
        (a prefix outlives its tail). Raises ValueError for an unknown sequence.
        """
    # ~/~ end
        seq = self._seq(seq_id)
        del self._seqs[seq_id]
        for block in reversed(seq.table[seq.released :]):
            self._decref(block)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-preempt>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-preempt-interface>>[init]
    def preempt(self, seq_id: int) -> list[int]:
        """Free the sequence now and return its tokens (the prompt, then one per append_slot), to
        allocate again later and recompute: vLLM's default preemption. Swapping to CPU memory is
        not modelled. Raises ValueError for an unknown sequence.
        """
    # ~/~ end
        tokens = self._seq(seq_id).tokens
        self.free(seq_id)
        return tokens
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-block-table>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-block-table-interface>>[init]
    def block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's block table: the physical block of each logical block, -1
        where the window released it. Raises ValueError for an unknown sequence."""
    # ~/~ end
        return list(self._seq(seq_id).table)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-slot-mapping>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-slot-mapping-interface>>[init]
    def slot_mapping(self, seq_id: int, positions: Iterable[int]) -> list[int]:
        """The physical slot, block * block_size + offset, of each position of the sequence: where
        a kernel writes and reads that token's K and V. Raises ValueError for a position outside
        [0, tokens held), a position the window released, or an unknown sequence.
        """
    # ~/~ end
        seq, b = self._seq(seq_id), self.block_size
        n, slots = len(seq.tokens), []
        if not isinstance(positions, Iterable):
            raise TypeError(f"positions must be an iterable of ints, got "
                            f"{type(positions).__name__}")
        for p in positions:
            check_int(f"a position of sequence {seq_id}", p, 0, n - 1)
            block = seq.table[p // b]
            if block < 0:
                raise ValueError(f"position {p} of sequence {seq_id} was released by the window")
            slots.append(block * b + p % b)
        return slots
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-cached-tokens>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-cached-tokens-interface>>[init]
    def num_cached_tokens(self, seq_id: int) -> int:
        """How many leading prompt tokens were found in the prefix cache at allocation: a multiple
        of block_size, 0 without prefix caching. Their K/V are in the pools already (only computed
        blocks are cached): the model computes only the rest. A fork has its parent's count.
        Raises ValueError for an unknown sequence."""
    # ~/~ end
        return self._seq(seq_id).num_cached
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-mark-computed>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-mark-computed-interface>>[init]
    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """A forward pass has stored the K/V of the sequence's first `num_tokens` tokens, in every
        layer. With prefix caching, each full block they cover is cached now, and not before: a
        block whose K/V was never written is never a hit. Raises ValueError for an unknown sequence
        (naming its id), or a num_tokens that is not an int from `num_computed_tokens` (counts never
        go back) to the tokens the sequence holds (naming num_tokens and the value given).
        """
    # ~/~ end
        seq = self._seq(seq_id)
        n = len(seq.tokens)
        # from the tokens already computed to the tokens held
        check_int(f"num_tokens of sequence {seq_id}", num_tokens, seq.computed, n)
        seq.computed = num_tokens
        if self.enable_prefix_caching:
            self._name_computed(seq)


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#block-manager-computed-tokens-interface>>[init]
    def num_computed_tokens(self, seq_id: int) -> int:
        """How many leading tokens of the sequence have their K/V stored: its cached tokens at
        allocation, then what `mark_computed` said; a fork has its parent's. Raises ValueError for
        an unknown sequence."""
    # ~/~ end
        return self._seq(seq_id).computed
    # ~/~ end
# ~/~ end

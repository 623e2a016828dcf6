# ~/~ begin <<docs/lab/03-paged-attn-reading.md#src/minimodel/paged_kv_cache.py>>[init]
"""A paged KV cache that MiniGPT decodes through: K/V pools of blocks, managed by BlockManager.

Tangled from docs/lab/03-paged-attn-reading.md; edit the page, not this file.
"""

import copy
from collections.abc import Sequence

import torch

from minimodel.block_manager import BlockManager
from minimodel.minigpt import AttentionFn, MiniGPTConfig
from minimodel.reference import attention_ref

__all__ = ["PagedKVCache"]


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-class>>[init]
class PagedKVCache:
    """A paged KV cache behind MiniGPT's cache interface.

    k, v: (n_layers, num_blocks, block_size, Hkv, d), one K pool and one V pool per layer;
    a sequence's token at position p lives in slot `manager.slot_mapping(seq, [p])` of each,
    i.e. at [layer, slot // block_size, slot % block_size]. `manager` is the BlockManager that
    decides the slots; the cache wraps its lifecycle operations and performs their copies. On
    the CPU, attention gathers each sequence's keys and values through its block table and
    calls `attn`.
    """
# ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-init>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-init-interface>>[init]
    def __init__(self, config: MiniGPTConfig, num_blocks: int, block_size: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 watermark: float = 0.01, enable_prefix_caching: bool = False) -> None:
        """Pools of `num_blocks` blocks of `block_size` slots per layer, zeros of `dtype` on
        `device`, and their BlockManager, whose sliding window is the model's (`config.window`).
        No sequence is selected yet (`rows == ()`)."""
    # ~/~ end
        self.config = config
        self.manager = BlockManager(num_blocks, block_size, watermark=watermark,
                                    enable_prefix_caching=enable_prefix_caching,
                                    sliding_window=config.window)
        shape = (config.n_layers, num_blocks, block_size, config.n_kv_heads, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.rows: tuple[int, ...] = ()
        self._slots: dict[int, int] = {}  # positions that have a slot (the manager: the computed)
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-lifecycle>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-allocate-interface>>[init]
    def allocate(self, seq_id: int, prompt_tokens: Sequence[int]) -> int:
        """Slots for a new prompt (`manager.allocate`). Returns how many leading prompt tokens have
        their K/V in the pools already (a prefix hit): feed the model the rest, from that position.
        """
    # ~/~ end
        if not isinstance(prompt_tokens, Sequence):  # an iterator would be used up by the manager
            raise TypeError(f"prompt_tokens must be a sequence of token ids, got "
                            f"{type(prompt_tokens).__name__}")
        self.manager.allocate(seq_id, prompt_tokens)
        self._slots[seq_id] = len(prompt_tokens)
        return self.manager.num_cached_tokens(seq_id)


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-append-slot-interface>>[init]
    def append_slot(self, seq_id: int, token: int) -> None:
        """A slot for the token about to be fed (`manager.append_slot`), with the copy-on-write it
        returns performed in every layer's K and V pools."""
    # ~/~ end
        cow = self.manager.append_slot(seq_id, token)
        if cow is not None:
            src, dst = cow
            self.k[:, dst] = self.k[:, src]  # the block's earlier tokens, in every layer
            self.v[:, dst] = self.v[:, src]
        self._slots[seq_id] += 1


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-fork-interface>>[init]
    def fork(self, parent_id: int, child_id: int) -> None:
        """`manager.fork`: the child shares the parent's blocks and its computed tokens."""
    # ~/~ end
        self.manager.fork(parent_id, child_id)
        self._slots[child_id] = self._slots[parent_id]


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-free-interface>>[init]
    def free(self, seq_id: int) -> None:
        """`manager.free`."""
    # ~/~ end
        self.manager.free(seq_id)
        del self._slots[seq_id]


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-preempt-interface>>[init]
    def preempt(self, seq_id: int) -> list[int]:
        """`manager.preempt`: returns the tokens to allocate and recompute later."""
    # ~/~ end
        tokens = self.manager.preempt(seq_id)
        del self._slots[seq_id]
        return tokens


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-select-interface>>[init]
    def select(self, seq_ids: Sequence[int]) -> "PagedKVCache":
        """This cache feeding `seq_ids` (distinct, live) in the next forward pass: row r of the
        tokens continues sequence seq_ids[r]. A view: pools, manager and lengths are shared.
        Raises ValueError for an empty, repeated or unknown id."""
    # ~/~ end
        seq_ids = tuple(seq_ids)
        unknown = [s for s in seq_ids if s not in self._slots]
        if not seq_ids or unknown or len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"select needs distinct live sequence ids, got {seq_ids} "
                             f"(not live: {unknown})")
        view = copy.copy(self)
        view.rows = seq_ids
        return view
    # ~/~ end

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-attend>>[init]
    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-check-positions-interface>>[init]
    def check_positions(self, positions: torch.Tensor) -> None:
        """Raise ValueError unless sequences are selected, positions (B, n) has one row per
        selected sequence, and row r starts at the tokens sequence rows[r] has computed (its K/V
        stored) and ends below the tokens it has slots for."""
    # ~/~ end
        if not self.rows:
            raise ValueError("no sequences selected: pass cache.select(seq_ids) to the model")
        if positions.shape[0] != len(self.rows):
            raise ValueError(f"{positions.shape[0]} rows of tokens for {len(self.rows)} selected "
                             f"sequences {self.rows}")
        for seq, first, last in zip(self.rows, positions[:, 0].tolist(),
                                    positions[:, -1].tolist(), strict=True):
            computed = self.manager.num_computed_tokens(seq)
            if first != computed:
                raise ValueError(f"sequence {seq} has computed {computed} tokens: its "
                                 f"next position is {computed}, got {first}")
            if last >= self._slots[seq]:
                raise ValueError(f"sequence {seq} has slots for {self._slots[seq]} tokens, got "
                                 f"position {last}: call append_slot first")


    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """Store k, v: (B, Hkv, n, d) of the selected sequences at their slots."""
        k_pool, v_pool = self.k[layer].flatten(0, 1), self.v[layer].flatten(0, 1)  # views
        for r, seq in enumerate(self.rows):
            slots = self.manager.slot_mapping(seq, positions[r].tolist())
            index = torch.tensor(slots, device=k_pool.device)
            k_pool[index] = k[r].transpose(0, 1).to(k_pool.dtype)  # (n, Hkv, d)
            v_pool[index] = v[r].transpose(0, 1).to(v_pool.dtype)


    def gather(self, layer: int, seq: int, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of positions lo ... hi - 1 of one sequence, through its block table:
        (1, Hkv, hi - lo, d) each."""
        k_pool, v_pool = self.k[layer].flatten(0, 1), self.v[layer].flatten(0, 1)
        index = torch.tensor(self.manager.slot_mapping(seq, range(lo, hi)), device=k_pool.device)
        return k_pool[index].transpose(0, 1)[None], v_pool[index].transpose(0, 1)[None]


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-attend-interface>>[init]
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, attn: AttentionFn = attention_ref) -> torch.Tensor:
        """Write k, v: (B, Hkv, n, d) of `layer` at the selected sequences' slots (every row
        before any read); then for each row gather, through its block table, the keys and values
        from the first position any of its queries sees to its last new one, and return
        attn(q_row, k_row, v_row, causal=True, window=config.window) for all rows: (B, Hq, n, d).
        """
    # ~/~ end
        self.write(layer, k, v, positions)  # every row first, as a batched kernel would
        n, w = q.shape[2], self.config.window
        out = []
        for r, (seq, p0) in enumerate(zip(self.rows, positions[:, 0].tolist(), strict=True)):
            lo = 0 if w is None else max(0, p0 - w + 1)  # older keys: out of every query's view
            k_seq, v_seq = self.gather(layer, seq, lo, p0 + n)
            out.append(attn(q[r : r + 1], k_seq, v_seq, causal=True, window=w))
        return torch.cat(out)


    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-commit-interface>>[init]
    def commit(self, positions: torch.Tensor) -> None:
        """Every layer has stored these positions: each selected sequence has computed them
        (`manager.mark_computed`, which also makes its newly computed full blocks prefix hits)."""
    # ~/~ end
        for seq, last in zip(self.rows, positions[:, -1].tolist(), strict=True):
            self.manager.mark_computed(seq, last + 1)  # names the blocks now filled with K/V
    # ~/~ end
# ~/~ end

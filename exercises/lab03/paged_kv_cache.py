# ~/~ begin <<docs/lab/03-paged-attn-reading.md#exercises/lab03/paged_kv_cache.py>>[init]
"""Lab 03: a paged KV cache behind MiniGPT's cache interface. Fill in every body that raises
NotImplementedError.

Skeleton tangled from docs/lab/03-paged-attn-reading.md (`make exercise LAB=03` copies it to
mywork/); check it with `make check-mine LAB=03`.
"""

from collections.abc import Sequence

import torch

from minimodel.block_manager import BlockManager  # noqa: F401  (yours, or the solution's)
from minimodel.minigpt import AttentionFn, MiniGPTConfig
from minimodel.reference import attention_ref


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

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-init-interface>>[init]
    def __init__(self, config: MiniGPTConfig, num_blocks: int, block_size: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 watermark: float = 0.01, enable_prefix_caching: bool = False) -> None:
        """Pools of `num_blocks` blocks of `block_size` slots per layer, zeros of `dtype` on
        `device`, and their BlockManager, whose sliding window is the model's (`config.window`).
        No sequence is selected yet (`rows == ()`)."""
    # ~/~ end
        raise NotImplementedError("not written yet: PagedKVCache.__init__: the pools and the "
                                  "manager")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-allocate-interface>>[init]
    def allocate(self, seq_id: int, prompt_tokens: Sequence[int]) -> int:
        """Slots for a new prompt (`manager.allocate`). Returns how many leading prompt tokens have
        their K/V in the pools already (a prefix hit): feed the model the rest, from that position.
        """
    # ~/~ end
        raise NotImplementedError("not written yet: allocate: manager.allocate, and where the "
                                  "sequence's computed tokens end")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-append-slot-interface>>[init]
    def append_slot(self, seq_id: int, token: int) -> None:
        """A slot for the token about to be fed (`manager.append_slot`), with the copy-on-write it
        returns performed in every layer's K and V pools."""
    # ~/~ end
        raise NotImplementedError("not written yet: append_slot, with its copy-on-write")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-fork-interface>>[init]
    def fork(self, parent_id: int, child_id: int) -> None:
        """`manager.fork`: the child shares the parent's blocks and its computed tokens."""
    # ~/~ end
        raise NotImplementedError("not written yet: fork")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-free-interface>>[init]
    def free(self, seq_id: int) -> None:
        """`manager.free`."""
    # ~/~ end
        raise NotImplementedError("not written yet: free")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-preempt-interface>>[init]
    def preempt(self, seq_id: int) -> list[int]:
        """`manager.preempt`: returns the tokens to allocate and recompute later."""
    # ~/~ end
        raise NotImplementedError("not written yet: preempt")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-select-interface>>[init]
    def select(self, seq_ids: Sequence[int]) -> "PagedKVCache":
        """This cache feeding `seq_ids` (distinct, live) in the next forward pass: row r of the
        tokens continues sequence seq_ids[r]. A view: pools, manager and lengths are shared.
        Raises ValueError for an empty, repeated or unknown id."""
    # ~/~ end
        raise NotImplementedError("not written yet: select: a view feeding these sequences")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-check-positions-interface>>[init]
    def check_positions(self, positions: torch.Tensor) -> None:
        """Raise ValueError unless sequences are selected, positions (B, n) has one row per
        selected sequence, and row r starts at the tokens sequence rows[r] has computed (its K/V
        stored) and ends below the tokens it has slots for."""
    # ~/~ end
        raise NotImplementedError("not written yet: check_positions")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-attend-interface>>[init]
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, attn: AttentionFn = attention_ref) -> torch.Tensor:
        """Write k, v: (B, Hkv, n, d) of `layer` at the selected sequences' slots (every row
        before any read); then for each row gather, through its block table, the keys and values
        from the first position any of its queries sees to its last new one, and return
        attn(q_row, k_row, v_row, causal=True, window=config.window) for all rows: (B, Hq, n, d).
        """
    # ~/~ end
        raise NotImplementedError("not written yet: attend: write through slot_mapping, gather "
                                  "through the block table, call attn")

    # ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-cache-commit-interface>>[init]
    def commit(self, positions: torch.Tensor) -> None:
        """Every layer has stored these positions: each selected sequence has computed them
        (`manager.mark_computed`, which also makes its newly computed full blocks prefix hits)."""
    # ~/~ end
        raise NotImplementedError("not written yet: commit")
# ~/~ end

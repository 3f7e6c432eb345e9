"""Beam search in the running batch: every beam row is one sequence of the batch, with its own cache.

With continuous batching on, `LocalEngine.beam_start` and `beam_step` give the search's forwards
to the batcher (engine/batcher.py), so a search's N rows ride in the same iterations as everyone
else's decodes. Run on their own, the beams took the model lock between iterations: with 32 users
on 2 cores, beam forwards held it for about 60 % of the wall time and every chat stream's next
token waited for them (bench/bench_crowd.py).

The prompt is read once and its cache copied to every row (transformers' beam search reads N
copies; the rows are the same). Reordering (row i <- old row reorder[i], after every step) moves
each cache to its new row; a row taken twice is copied, a row not taken is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from playground.engine.cache import copy_cache
from playground.engine.control import Control, run_to_end
from playground.engine.kv_store import CacheEntry

if TYPE_CHECKING:
    from playground.engine.batcher import Batcher


@dataclass
class BatchedBeams:
    """num_beams rows, each a sequence of the running batch (what beam_start returns when batching)."""

    entries: list[CacheEntry]
    length: int  # tokens per row so far
    control: Control | None
    name: str = "beam"

    @property
    def rows(self) -> int:
        return len(self.entries)


def start_beams(
    batcher: Batcher, new_cache: Callable[[], Any], ids: Sequence[int], rows: int, control: Control | None
) -> tuple[BatchedBeams, torch.Tensor]:
    """Read the prompt once in the batch, copy its cache to every row; scores (rows, vocab)."""
    entry = CacheEntry(new_cache())
    first, _ = run_to_end(batcher.forward(entry, list(ids), 1, control, "beam"))
    entries = [entry, *(_copied(entry) for _ in range(rows - 1))]
    return BatchedBeams(entries, len(ids), control), first[-1:].expand(rows, -1).clone()


def step_beams(
    batcher: Batcher, beams: BatchedBeams, reorder: torch.Tensor, token_ids: torch.Tensor
) -> torch.Tensor:
    """Rows reordered (row i <- old row reorder[i]), then one token each, in one iteration when the
    batch has the places; scores (rows, vocab)."""
    taken: set[int] = set()
    entries = []
    for source in reorder.tolist():
        entry = beams.entries[source]
        entries.append(_copied(entry) if source in taken else entry)
        taken.add(source)
    beams.entries = entries
    tokens = [[int(t)] for t in token_ids.reshape(-1).tolist()]
    rows, _ = batcher.forward_rows(entries, tokens, beams.control, beams.name)
    beams.length += 1
    return rows


def _copied(entry: CacheEntry) -> CacheEntry:
    return CacheEntry(copy_cache(entry.cache), list(entry.ids))

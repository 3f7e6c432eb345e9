"""Beam search in the running batch: every beam row is one sequence of the batch, with its own cache.

With continuous batching on, `LocalEngine.beam_start` and `beam_step` give the search's forwards
to the batcher (engine/batcher.py), so a search's N rows ride in the same iterations as everyone
else's decodes. Run on their own, the beams took the model lock between iterations, and in a crowd
(bench/bench_crowd.py) every chat stream's next token waited for them.

The prompt is read once (transformers' beam search reads N copies; the rows are the same) and every
row starts on that one cache. Reordering (row i <- old row reorder[i], before every step) moves
each cache to its new row; a cache taken twice is copied (under the memory guard), a row not taken
is dropped. A step's rows go to the front of the queue and are scheduled with the decodes: they
are one token each on a sequence already read, as a decode is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from playground.engine.control import Control, run_to_end
from playground.engine.kv_store import CacheEntry

if TYPE_CHECKING:
    from playground.engine.batcher import Batcher


@dataclass
class BatchedBeams:
    """num_beams rows, each a sequence of the running batch (what beam_start returns when batching)."""

    batcher: Batcher
    entries: list[CacheEntry]  # row i's cache (at the start every row holds the prompt's one cache)
    length: int  # tokens per row so far
    control: Control | None

    @property
    def rows(self) -> int:
        return len(self.entries)


def start_beams(
    batcher: Batcher, new_cache: Callable[[], Any], ids: Sequence[int], rows: int, control: Control | None
) -> tuple[BatchedBeams, torch.Tensor]:
    """Read the prompt once in the batch; every row starts on its cache; scores (rows, vocab)."""
    entry = CacheEntry(new_cache())
    first, _ = run_to_end(batcher.forward(entry, list(ids), 1, control, "beam", ahead=True))
    return BatchedBeams(batcher, [entry] * rows, len(ids), control), first[-1:].expand(rows, -1).clone()


def step_beams(beams: BatchedBeams, reorder: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Rows reordered (row i <- old row reorder[i]), then one token each, in one iteration when the
    batch has the places and the budget; scores (rows, vocab)."""
    taken: set[int] = set()  # caches (by identity) already given to a row
    entries = []
    with beams.batcher.forwarder.memory_guard(None):  # a copy out of memory: the clear message
        for source in reorder.tolist():
            entry = beams.entries[source]
            entries.append(entry.copy() if id(entry) in taken else entry)
            taken.add(id(entry))
    beams.entries = entries
    tokens = [[int(t)] for t in token_ids.reshape(-1).tolist()]
    rows = beams.batcher.forward_rows(entries, tokens, beams.control, "beam")
    beams.length += 1
    return rows

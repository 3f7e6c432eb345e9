"""Beam search's rows: the one beam path of the in-process engine.

num_beams rows live in ONE cache whose batch dimension is the rows (as `generate` keeps them). The
prompt is read once, as a plain sequence (in the running batch when batching, `ahead` of other
reads), and its cache repeated to the rows. Before every step the rows are reordered in place (row i
<- old row reorder[i], `reorder_cache` on every layer, as `generate` does); then every row takes one
token at the same position: in the running batch as ONE job of that many rows (engine/ragged.py
attends each row over its own keys), or, with batching off or on a model the batch cannot run, as
one forward of the rows (`rows_inputs`). Either way the forward is the engine's one model call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.engine.control import Control
from playground.engine.kv_store import CacheEntry
from playground.engine.model_call import ModelInputs


@dataclass
class BeamRows:
    """num_beams rows decoded together (what beam_start returns)."""

    entry: CacheEntry  # one cache of `rows` rows; its ids are the prompt's
    rows: int
    length: int  # tokens per row so far
    control: Control | None = None


def repeat_rows(entry: CacheEntry, rows: int) -> None:
    """A one-row cache becomes `rows` copies of itself (the prompt read once, every beam starts on it)."""
    for layer in entry.cache.layers:
        layer.batch_repeat_interleave(rows)


def reorder_rows(beams: BeamRows, reorder: torch.Tensor) -> None:
    """Row i becomes old row reorder[i], in every layer."""
    for layer in beams.entry.cache.layers:
        layer.reorder_cache(reorder)


def rows_inputs(beams: BeamRows, tokens: torch.Tensor) -> ModelInputs:
    """One token per row (rows,) at the rows' next position, into their cache: scores after each."""
    ids = tokens.reshape(beams.rows, 1).to(dtype=torch.long)
    positions = torch.full((beams.rows, 1), beams.length, dtype=torch.long, device=ids.device)
    return ModelInputs(ids.contiguous(), positions, beams.entry.cache, keep=1)

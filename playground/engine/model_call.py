"""The one place a model is called.

Every forward of the engine, whatever it serves (a prompt chunk, one decode token, a packed batch of
many sequences, beam rows, a padded batch, the attention or hidden-state probes, a CUDA graph's
recorded step), builds a `ModelInputs` and hands it to `run_model`, as gpt-fast's `model_forward`
serves prefill and decode alike: only the inputs differ. The variants are input builders next to
what they serve (engine/forward.py, ragged.py, slots.py, probes.py, beams.py).

`run_model` refuses to run outside a Forwarder turn (engine/forward.py: the model lock, Stop, the
out-of-memory guard, timing), and marks the calling thread while it runs, so the forward-hook test
(tests/test_forward_primitive.py) sees that every model forward came from here.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

_state = threading.local()  # per thread: Forwarder turns open, run_model frames running


@dataclass(frozen=True)
class ModelInputs:
    """One forward's inputs (rows = sequences in the batch, q = new tokens per row)."""

    ids: torch.Tensor  # (rows, q) token ids on the model's device
    positions: torch.Tensor | None = None  # (rows, q) each token's position; None: after the cache
    cache: Any = None  # the KV cache the new keys and values go to; None: nothing is kept
    mask: torch.Tensor | None = None  # (rows, kv) padding mask, or a 4D mask; None: causal
    # logits rows to compute: the last `keep` of each row (0: all), or these indices of the q tokens
    keep: int | torch.Tensor = 1
    options: Mapping[str, Any] = field(default_factory=dict)  # output_attentions, ragged=plan, ...


def run_model(model: Any, inputs: ModelInputs) -> Any:
    """The model's forward on these inputs; transformers' output, whose `logits` hold exactly the kept
    rows (rows, kept, vocab) in the model's dtype. Runs only inside a Forwarder turn."""
    if not in_turn():
        raise RuntimeError("run_model outside a Forwarder turn: every forward takes the engine's turn")
    kwargs: dict[str, Any] = {"input_ids": inputs.ids, "past_key_values": inputs.cache}
    kwargs["use_cache"] = inputs.cache is not None
    if inputs.positions is not None:
        kwargs["position_ids"] = inputs.positions
    if inputs.mask is not None:
        kwargs["attention_mask"] = inputs.mask
    takes_keep = _takes_logits_to_keep(type(model))
    if takes_keep:
        kwargs["logits_to_keep"] = inputs.keep
    _state.calls = getattr(_state, "calls", 0) + 1
    try:
        out = model(**kwargs, **inputs.options)
    finally:
        _state.calls -= 1
    if not takes_keep:  # a model without logits_to_keep computed every row: keep the ones asked for
        out.logits = _kept(out.logits, inputs.keep)
    return out


def _kept(logits: torch.Tensor, keep: int | torch.Tensor) -> torch.Tensor:
    if isinstance(keep, torch.Tensor):
        return logits[:, keep]
    return logits if keep == 0 else logits[:, -keep:]


_takes: dict[type, bool] = {}


def _takes_logits_to_keep(cls: type) -> bool:
    if cls not in _takes:
        _takes[cls] = "logits_to_keep" in inspect.signature(cls.forward).parameters
    return _takes[cls]


def sequence_inputs(model: Any, cache: Any, ids: list[int], keep: int) -> ModelInputs:
    """One sequence's next ids (seq,) after its cache (None: a forward that keeps nothing)."""
    device = model.get_input_embeddings().weight.device
    return ModelInputs(torch.tensor([ids], dtype=torch.long, device=device), cache=cache, keep=keep)


def sequence_logits(model: Any, cache: Any, ids: list[int], keep: int) -> torch.Tensor:
    """float32 scores (keep, vocab) after the last `keep` of ids, read into the cache (one forward)."""
    return run_model(model, sequence_inputs(model, cache, ids, keep)).logits[0].float()


# --- the turn and the call, as the forward-hook test sees them -----------------------------------


@contextmanager
def turn_open() -> Iterator[None]:
    """Marks a Forwarder turn on this thread (engine/forward.py opens it)."""
    _state.turns = getattr(_state, "turns", 0) + 1
    try:
        yield
    finally:
        _state.turns -= 1


def in_turn() -> bool:
    """True while this thread holds a Forwarder turn."""
    return getattr(_state, "turns", 0) > 0


def calling() -> bool:
    """True while this thread runs run_model (the forward-hook test asks)."""
    return getattr(_state, "calls", 0) > 0

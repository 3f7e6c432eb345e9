"""Weight-sharing twins of a model: its module tree and config copied, every weight tensor shared.

A twin lets one kind of forward change what the model is without anyone else seeing it: the
attention view's twin switches to eager attention (it returns weights), the running batch's twin to
the batched attention (engine/ragged.py), an early-exit draft's twin keeps only the first k layers.
The engine's own model keeps its attention and its layers, so no other request ever sees a changed
config. Nothing is copied but module objects, so a few are kept (least recently used dropped).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import torch

from playground.engine.lru import LRU
from playground.engine.ragged import IMPLEMENTATION
from playground.errors import PlaygroundError

MAX_TWINS = 5  # eager, ragged + a few early-exit depths; each is module objects only (weights shared)


class Twins:
    """The twins of one model, made on first use and kept (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._kept: LRU[tuple[str, int], Any] = LRU(max_items=MAX_TWINS)
        self._lock = threading.Lock()

    @property
    def num_layers(self) -> int:
        return int(self.model.config.get_text_config().num_hidden_layers)

    def eager(self) -> Any:
        """The model with eager attention (returns weights)."""
        return self._twin(("eager", 0), lambda twin: twin.set_attn_implementation("eager"))

    def ragged(self) -> Any:
        """The model with the running batch's attention (engine/ragged.py)."""
        return self._twin(("ragged", 0), lambda twin: twin.set_attn_implementation(IMPLEMENTATION))

    def early_exit(self, exit_layer: int) -> Any:
        """The model cut after its first exit_layer decoder layers; the final norm and the head follow
        as usual."""
        total = self.num_layers
        if isinstance(exit_layer, bool) or not isinstance(exit_layer, int) or not 1 <= exit_layer < total:
            raise PlaygroundError(
                "Early exit needs k between 1 and {last} layers (the model has {total}; k = {total} "
                "would be the model itself), got {k!r}.",
                key="hood.error.early_exit",
                last=total - 1,
                total=total,
                k=exit_layer,
            )
        return self._twin(("exit", exit_layer), lambda twin: _cut_layers(twin, exit_layer))

    def _twin(self, key: tuple[str, int], adjust: Callable[[Any], None]) -> Any:
        with self._lock:
            twin = self._kept.get(key)
            if twin is None:
                twin = shared_weights_copy(self.model)
                adjust(twin)
                self._kept.put(key, twin)
            return twin


def shared_weights_copy(model: Any) -> Any:
    """A copy of the model's module tree and config whose parameters and buffers ARE the
    original's tensors (deepcopy with a memo that maps each tensor to itself)."""
    memo: dict[int, Any] = {id(t): t for t in (*model.parameters(), *model.buffers())}
    try:
        return copy.deepcopy(model, memo)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise PlaygroundError(
            "Cannot make a weight-sharing copy of {model}: {why}",
            key="engine.error.twin_copy",
            model=type(model).__name__,
            why=str(exc),
        ) from None


def _cut_layers(twin: Any, keep: int) -> None:
    """Keep the first `keep` decoder layers of a twin (its config says so too, for its cache)."""
    text = twin.config.get_text_config()
    total = int(text.num_hidden_layers)
    parent, name, layers = _layer_list(twin, total)
    setattr(parent, name, torch.nn.ModuleList(list(layers)[:keep]))
    text.num_hidden_layers = keep
    if isinstance(getattr(text, "layer_types", None), list):
        text.layer_types = text.layer_types[:keep]


def _layer_list(model: Any, total: int) -> tuple[Any, str, torch.nn.ModuleList]:
    """The ModuleList holding the decoder layers: (its parent, its attribute name, the list)."""
    for qualified, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == total and qualified:
            parent_name, _, name = qualified.rpartition(".")
            return model.get_submodule(parent_name), name, module
    raise PlaygroundError(
        "Cannot find the decoder layers of {model}: no early exit for it.",
        key="engine.error.no_layers",
        model=type(model).__name__,
    )

"""Which engine serves which model name: what the API is given when it is mounted.

`/v1/models` lists `names()`; a request names its model and gets `engine(name)`'s answer (None: the
API answers 404 model_not_found). Today the app serves one loaded engine (`OneModel`); a registry of
several loaded models can be given instead, as anything with these two methods.
"""

from __future__ import annotations

from typing import Protocol

from playground.engine.base import Engine


class ModelLookup(Protocol):
    def names(self) -> list[str]:
        """The model names served now, the default first."""
        ...

    def engine(self, name: str) -> Engine | None:
        """The engine that serves name (None: no such model)."""
        ...


class OneModel:
    """One engine under its model id (the engine's name without its note: "SmolLM2-135M-Instruct"),
    also found by its full name."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def names(self) -> list[str]:
        return [model_id(self._engine)]

    def engine(self, name: str) -> Engine | None:
        return self._engine if name in (model_id(self._engine), self._engine.name) else None


def model_id(engine: Engine) -> str:
    """An engine's model id for the API: its name up to a note in brackets ("x (embedded ...)" -> "x")."""
    return engine.name.split(" (", 1)[0].strip() or engine.name

"""Which engine serves which model name: what the API is given when it is mounted.

`/v1/models` lists `names()`; a request names its model and gets `engine(name)`'s answer (None: the
API answers 404 model_not_found), and `keep(engine)` holds that model loaded while it answers. The app
serves the models its registry holds (`RegistryModels`: its own model first, then any a browser tab
loaded with the model picker); `OneModel` serves one engine (a script, a test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

from playground.engine.base import Engine
from playground.errors import PlaygroundError
from playground.models import ModelRegistry


class ModelLookup(Protocol):
    def names(self) -> list[str]:
        """The model names served now, the default first."""
        ...

    def engine(self, name: str) -> Engine | None:
        """The engine that serves name (None: no such model)."""
        ...

    def keep(self, engine: Engine) -> AbstractContextManager[object]:
        """engine stays loaded while the block runs (a request answering on it)."""
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

    def keep(self, engine: Engine) -> AbstractContextManager[object]:
        return nullcontext()


class RegistryModels:
    """The models a registry holds now: the app's own (`default`) first, under its model id, then the
    others under their registry keys, the model picker's names ("gemma-3-270m",
    "smollm2-135m-instruct@int8": unique, where two formats of one model share a model id); the full
    name and the key reach a model too. Lists and answers with loaded models only: the API loads
    nothing (the model picker does); a request holds its model while it answers, so the registry's
    bound never unloads it mid-answer."""

    def __init__(self, registry: ModelRegistry, default: Engine) -> None:
        self.registry, self.default = registry, default

    def _served(self) -> list[tuple[str, str, Engine]]:
        """(the id listed, the registry key, the engine), the app's own first."""
        held = sorted(self.registry.held(), key=lambda pair: pair[1] is not self.default)
        return [(model_id(e) if e is self.default else key, key, e) for key, e in held]

    def names(self) -> list[str]:
        return [listed for listed, _, _ in self._served()]

    def engine(self, name: str) -> Engine | None:
        return next((e for listed, key, e in self._served() if name in (listed, key, e.name)), None)

    @contextmanager
    def keep(self, engine: Engine) -> Iterator[None]:
        key = self.registry.key_of(engine)
        if key is None:
            raise PlaygroundError(
                "{model} was unloaded: ask again, or for another model.",
                key="api.error.unloaded",
                model=model_id(engine),
            )
        self.registry.hold(key)
        try:
            yield
        finally:
            self.registry.let_go(key)


def model_id(engine: Engine) -> str:
    """An engine's model id for the API: its name up to a note in brackets ("x (embedded ...)" -> "x")."""
    return engine.name.split(" (", 1)[0].strip() or engine.name

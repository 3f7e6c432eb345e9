"""Helpers shared by the "Under the hood" views (cost, attention, lens, speculative, batching)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playground.engine.control import Control
from playground.engine.probes import Probes, probes_for
from playground.errors import PlaygroundError


def probes_needing(lm: Any, *needs: str) -> Probes:
    """The engine's probes, after refusing (with the engine's one-line reason) what it cannot do."""
    capabilities = lm.capabilities
    for need in ("probes", *needs):
        if not getattr(capabilities, need, False):
            reason = capabilities.reasons.get(need) or (
                f"This view runs and times the model's own forward passes, which the {lm.kind} engine does "
                "not expose: start the app with an in-process model (without --engine) to use it."
                if need == "probes"
                else capabilities.why_not(need)
            )
            raise PlaygroundError(reason)
    return probes_for(lm)


def whole_in_range(value: Any, low: int, high: int, what: str) -> int:
    """An int in [low, high], or a PlaygroundError naming what and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PlaygroundError(f"{what} must be a whole number from {low} to {high}, got {value!r}.")
    return value


def run_to_end(iterator: Iterator[Any]) -> Any:
    """Run an iter_* generator to its end and return its result (its return value)."""
    while True:
        try:
            next(iterator)
        except StopIteration as done:
            return done.value


class Stopwatch:
    """Seconds of a request's own work: wall time since start, minus the time it waited for the
    shared model (other requests) and the time it was paused (a consumer drawing a progress
    update between two steps)."""

    def __init__(self, control: Control) -> None:
        self.control = control
        self.started = time.perf_counter()
        self.excluded = -control.wait_seconds

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started - self.excluded - self.control.wait_seconds

    @contextmanager
    def paused(self) -> Iterator[None]:
        stopped = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - stopped

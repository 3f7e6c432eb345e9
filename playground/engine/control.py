"""Cancellation, progress and wait accounting for one request's model work.

A `Control` travels with a request into the engine. The engine checks it between prefill
chunks and between decode steps, so Stop (or a closed browser tab) ends the model's work
within one chunk, and it reports progress ("prefill 1,536 / 4,468 tokens") as it goes.
It also adds up the time spent waiting for the shared model, so statistics can show queue
wait apart from prefill.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from playground.errors import Cancelled

R = TypeVar("R")
# (phase, done, total): e.g. ("prefill", 1536, 4468) or ("decode", 12, 256)
ProgressFn = Callable[[str, int, int], None]


@dataclass
class Control:
    """Cancel flag, progress callback and timing counters for one request (thread-safe flag)."""

    progress: ProgressFn | None = None
    wait_seconds: float = 0.0  # time spent waiting for the model lock (other requests running)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)

    def cancel(self) -> None:
        """Ask the engine to stop at its next check; calling it twice is harmless."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self) -> None:
        """Raise Cancelled if cancel() was called."""
        if self._cancelled.is_set():
            raise Cancelled()

    def report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)


def check(control: Control | None) -> None:
    """control.check() for an optional control."""
    if control is not None:
        control.check()


def report(control: Control | None, phase: str, done: int, total: int) -> None:
    if control is not None:
        control.report(phase, done, total)


@contextmanager
def holding(lock: Any, control: Control | None) -> Iterator[None]:
    """Hold the model lock, adding the time spent waiting for it to control.wait_seconds."""
    started = time.perf_counter()
    with lock:
        if control is not None:
            control.wait_seconds += time.perf_counter() - started
        yield


def run_to_end(iterator: Generator[Any, Any, R]) -> R:
    """Drive a generator (a chunked forward, a lesson's run) to its end; its return value."""
    while True:
        try:
            next(iterator)
        except StopIteration as done:
            return done.value

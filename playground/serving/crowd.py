"""The "Serving many" lesson's crowd: requests sent at a rate to the app's own running batch, watched
live. Every refresh gives what has happened so far: each request's TTFT and TPOT, and the batch's
schedule since the crowd began (its own requests and anyone else's).

    for view in iter_crowd(engine, rate=1.0, count=16):
        view.summary.latency["ttft"]["p95"], view.schedule[-1]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.schedule import Iteration
from playground.errors import PlaygroundError
from playground.serving.load import LoadRequest, arrival_times, mixed_requests, run_load
from playground.serving.metrics import LoadSummary, RequestTiming, Slo, summarize

MAX_RATE = 8.0  # arrivals per second
MAX_REQUESTS = 32
CHAT_TOKENS = 48  # the crowd's chat turns ask 16 to this many tokens (a live view: short answers)
LONG_PROMPT_TOKENS = 512
REFRESH_S = 0.5
TIMEOUT_S = 180.0  # a crowd still running then is stopped (the batch's places are needed)


@dataclass
class CrowdView:
    """The crowd so far."""

    rate: float
    burstiness: float
    requests: list[LoadRequest]
    arrivals: list[float]  # seconds after the start, when each request is due
    stamp: str  # the crowd's requests are the batch's jobs named "<stamp>-<i>"
    timings: list[RequestTiming] = field(default_factory=list)  # each request's, filled as its tokens come
    ended: list[bool] = field(default_factory=list)  # per request: answered (or failed)
    schedule: list[Iteration] = field(default_factory=list)  # the batch's iterations since the start
    first_iteration: int = 0  # the batch's iteration count when the crowd began
    elapsed: float = 0.0  # seconds since the crowd began
    done: bool = False

    @property
    def finished(self) -> list[RequestTiming]:
        return [t for t, end in zip(self.timings, self.ended, strict=True) if end]

    def summary(self, slo: Slo) -> LoadSummary:
        return summarize(self.finished, self.rate, self.burstiness, slo)


def iter_crowd(
    engine: Engine,
    rate: float,
    count: int,
    burstiness: float = 1.0,
    control: Control | None = None,
    seed: int = 0,
) -> Iterator[CrowdView]:
    """Send count mixed requests (chat turns, steps, a long prompt) at `rate` per second to the engine's
    running batch; a view every REFRESH_S seconds and one at the end."""
    batcher = _checked(engine, rate, count, burstiness)
    control = control or Control()
    requests = mixed_requests(engine.tokenizer, count, seed, LONG_PROMPT_TOKENS, CHAT_TOKENS)
    view = CrowdView(
        rate, burstiness, requests, arrival_times(rate, count, burstiness, seed), f"crowd{time.time_ns()}"
    )
    view.first_iteration, view.ended = batcher.iterations, [False] * count
    view.timings = [RequestTiming(r.kind, at) for r, at in zip(requests, view.arrivals, strict=True)]

    def ended(i: int, _timing: RequestTiming, _ids: list[int]) -> None:
        view.ended[i] = True

    runner = threading.Thread(
        target=_run, args=(engine, view, control, ended), name="playground-crowd", daemon=True
    )
    start = time.monotonic()
    runner.start()
    while runner.is_alive():
        runner.join(REFRESH_S)
        if time.monotonic() - start > TIMEOUT_S:
            control.cancel()  # its requests stop at their next token
        _refresh(view, batcher, start)
        yield view
    view.done = True
    _refresh(view, batcher, start)
    yield view


def _run(engine: Engine, view: CrowdView, control: Control, ended: Callable[..., None]) -> None:
    run_load(engine, view.requests, view.arrivals, control, ended, view.stamp, view.timings)


def _refresh(view: CrowdView, batcher: Any, start: float) -> None:
    view.elapsed = time.monotonic() - start
    log = list(batcher.log)
    view.schedule = [it for it in log if it.index >= view.first_iteration]


def _checked(engine: Engine, rate: float, count: int, burstiness: float) -> Any:
    if engine.schedule is None:
        raise PlaygroundError(
            "This app runs without continuous batching (PLAYGROUND_BATCHING=off or a remote engine): "
            "there is no running batch to send a crowd to.",
            key="serving.crowd.no_batch",
        )
    if not 0 < rate <= MAX_RATE:
        raise PlaygroundError(
            "The arrival rate must be above 0 and at most {most:g} per second, got {rate}.",
            key="serving.crowd.rate",
            most=MAX_RATE,
            rate=rate,
        )
    if not 1 <= count <= MAX_REQUESTS:
        raise PlaygroundError(
            "The crowd takes 1 to {most} requests, got {count}.",
            key="serving.crowd.count",
            most=MAX_REQUESTS,
            count=count,
        )
    if not 0 < burstiness <= 1:
        raise PlaygroundError(
            "Burstiness must be in (0, 1], got {burstiness}.",
            key="serving.crowd.burstiness",
            burstiness=burstiness,
        )
    return engine.schedule

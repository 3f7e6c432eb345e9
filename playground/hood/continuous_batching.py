"""Continuous batching, measured live: requests arriving at different times, served by the engine's
own scheduler (engine/batcher.py) iteration by iteration, against one static padded batch.

    result = run(engine, [Arrival(ids_a, 12, 0), Arrival(ids_b, 4, 3)], budget=16)
    result.schedule[3]            # iteration 3: who read how many prompt tokens, who decoded
    result.finished               # per request: the iteration (and second) it was done
    result.padding_tokens         # what the static batch computed for nothing
    result.identical              # every request's tokens equal its solo run

A static batch waits for its last member before it starts, pads every prompt to the longest and
keeps every row until the longest answer is done. The running batch admits a request at the next
iteration, reads its prompt in chunks that share the iteration's token budget with the others'
decodes, and lets a finished request go at once. Greedy decoding: the tokens are the same both ways.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.engine.base import Engine
from playground.engine.control import Control, check, run_to_end
from playground.engine.probes import Picker, greedy_picker
from playground.engine.protocols import Probes
from playground.engine.schedule import Iteration, Job
from playground.errors import PlaygroundError
from playground.hood.common import NEW_TOKENS, Lesson, Stopwatch, fits_context, require, whole_in_range
from playground.messages import Message

MAX_REQUESTS = 12
MAX_NEW_TOKENS = 64
MAX_BUDGET = 512


@dataclass(frozen=True)
class Arrival:
    """One request: its prompt, how many tokens it wants, and the iteration it arrives at."""

    prompt: list[int]
    new_tokens: int
    at: int = 0  # iteration of the running batch it arrives at (the static batch waits for the last)


@dataclass
class ContinuousBatching:
    requests: list[Arrival]
    budget: int  # tokens per iteration of the running batch
    schedule: list[Iteration] = field(default_factory=list)  # the running batch, iteration by iteration
    tokens: list[list[int]] = field(default_factory=list)  # each request's tokens (running batch)
    finished_at: list[int] = field(default_factory=list)  # iteration each was done in
    finished_seconds: list[float] = field(default_factory=list)  # seconds from the first iteration
    seconds: float = 0.0  # the running batch's model time, all iterations
    static_tokens: list[list[int]] = field(default_factory=list)  # the same requests in one padded batch
    static_steps: list[int] = field(default_factory=list)  # the batch step each was done in
    static_seconds: float = 0.0  # the padded batch, from its start (after the last arrival) to its end
    solo_tokens: list[list[int]] = field(default_factory=list)  # each request alone
    phase: str = ""

    @property
    def padding_tokens(self) -> int:
        """Tokens the static batch computes for nothing: each prompt padded to the longest, each
        finished row fed pads until the longest answer is done."""
        width = max(len(r.prompt) for r in self.requests)
        longest = max((len(t) for t in self.static_tokens), default=0)
        prompts = sum(width - len(r.prompt) for r in self.requests)
        return prompts + sum(longest - len(t) for t in self.static_tokens)

    @property
    def generated(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_second(self) -> float:
        return self.generated / self.seconds if self.seconds else 0.0

    @property
    def static_tokens_per_second(self) -> float:
        total = sum(len(t) for t in self.static_tokens)
        return total / self.static_seconds if self.static_seconds else 0.0

    @property
    def identical(self) -> bool:
        return bool(self.solo_tokens) and self.tokens == self.solo_tokens == self.static_tokens


def run(
    lm: Engine, requests: Sequence[Arrival], budget: int = 16, control: Control | None = None
) -> ContinuousBatching:
    """Run the requests through the engine's scheduler, then as one static padded batch, then alone."""
    return run_to_end(iter_run(lm, requests, budget, control))


def iter_run(
    lm: Engine, requests: Sequence[Arrival], budget: int = 16, control: Control | None = None
) -> Iterator[ContinuousBatching]:
    """continuous_batching, yielding after every iteration of the running batch and each later part."""
    probes = require(lm, "batched")
    result = ContinuousBatching(_checked(lm, requests, budget), budget)
    control = control or Control()
    yield from _running_batch(lm, probes, result, control)
    yield from _static_batch(lm, probes, result, control)
    result.phase = Message("hood.continuous_batching.phase.alone", "each request alone (the reference)")
    yield result
    result.solo_tokens = [
        _alone(lm, probes, r, greedy_picker(lm, r.prompt), control) for r in result.requests
    ]
    result.phase = Message(
        "hood.continuous_batching.phase.done",
        "{count} requests, batched both ways and each alone",
        count=len(result.requests),
    )
    return result


def _checked(lm: Engine, requests: Sequence[Arrival], budget: int) -> list[Arrival]:
    whole_in_range(len(requests), 1, MAX_REQUESTS, Message("hood.name.requests", "The number of requests"))
    whole_in_range(budget, 1, MAX_BUDGET, Message("hood.name.budget", "Tokens per iteration"))
    for r in requests:
        if not r.prompt:
            raise PlaygroundError(
                "Every request needs a prompt: one of them is empty.",
                key="hood.continuous_batching.error.empty",
            )
        whole_in_range(r.new_tokens, 1, MAX_NEW_TOKENS, NEW_TOKENS)
        whole_in_range(r.at, 0, 1000, Message("hood.name.arrival", "Arrival (iteration)"))
        fits_context(lm, len(r.prompt), r.new_tokens)
    return list(requests)


def _running_batch(
    lm: Engine, probes: Probes, result: ContinuousBatching, control: Control
) -> Iterator[ContinuousBatching]:
    """The engine's scheduler, unthreaded: arrivals submitted at their iteration, one step each."""
    batcher = probes.replay_batch(result.budget, len(result.requests))
    jobs: dict[int, Job] = {}
    watch, iteration = Stopwatch(control), 0
    while len(jobs) < len(result.requests) or batcher.busy:
        for i, r in enumerate(result.requests):
            if r.at == iteration:
                jobs[i] = batcher.add(r.prompt, r.new_tokens, f"#{i + 1}")
        check(control)
        logged = len(batcher.log)
        batcher.step()  # nothing to run (every request still to come): an empty iteration
        ran = len(batcher.log) > logged
        result.schedule.append(batcher.log[-1] if ran else Iteration(iteration, 0.0, 0.0, ()))
        result.seconds = watch.seconds
        _collect(result, jobs, iteration)
        result.phase = Message(
            "hood.continuous_batching.phase.running", "running batch: iteration {i}", i=iteration + 1
        )
        with watch.paused():
            yield result
        iteration += 1


def _collect(result: ContinuousBatching, jobs: dict[int, Job], iteration: int) -> None:
    """Read what the finished requests produced (their records) once they are done."""
    while len(result.tokens) < len(result.requests):
        result.tokens.append([])
        result.finished_at.append(-1)
        result.finished_seconds.append(0.0)
    for i, job in jobs.items():
        while not job.out.empty():
            message = job.out.get()
            if isinstance(message, BaseException):
                raise message
            if hasattr(message, "id"):
                result.tokens[i].append(message.id)
        if job.gone.is_set() and result.finished_at[i] < 0:
            result.finished_at[i], result.finished_seconds[i] = iteration, result.seconds


def _static_batch(
    lm: Engine, probes: Probes, result: ContinuousBatching, control: Control
) -> Iterator[ContinuousBatching]:
    """The same requests in one left-padded batch that starts once the last has arrived: a finished
    row is fed pads until every row is done."""
    prompts = [r.prompt for r in result.requests]
    pickers = [greedy_picker(lm, p) for p in prompts]
    batch, watch = probes.batch(prompts, control), Stopwatch(control)
    result.static_tokens, result.static_steps = [[] for _ in prompts], [0] * len(prompts)
    rows, _ = batch.prefill()
    step = 0
    while True:
        step += 1
        for i, r in enumerate(result.requests):
            ids = result.static_tokens[i]
            if not _done(lm, ids, r.new_tokens):
                ids.append(pickers[i](rows[i], r.prompt + ids))
                result.static_steps[i] = step
        result.static_seconds = watch.seconds
        result.phase = Message("hood.continuous_batching.phase.static", "static batch: step {i}", i=step)
        with watch.paused():
            yield result
        if all(
            _done(lm, ids, r.new_tokens) for ids, r in zip(result.static_tokens, result.requests, strict=True)
        ):
            return
        pad = max(lm.pad_token_id, 0)
        rows, _ = batch.step(
            [
                pad if _done(lm, ids, r.new_tokens) else ids[-1]
                for ids, r in zip(result.static_tokens, result.requests, strict=True)
            ]
        )


def _done(lm: Engine, ids: list[int], wanted: int) -> bool:
    return len(ids) >= wanted or bool(ids and ids[-1] in lm.eos_token_ids)


def _alone(lm: Engine, probes: Probes, request: Arrival, pick: Picker, control: Control) -> list[int]:
    """The request by itself, one greedy token per forward (the reference both batches must equal)."""
    sequence, ids = probes.sequence(control=control), []
    while not _done(lm, ids, request.new_tokens):
        rows, _ = sequence.advance(request.prompt + ids)
        ids.append(pick(rows[-1], request.prompt + ids))
    return ids


LESSON = Lesson(
    "continuous_batching",
    Message("hood.continuous_batching.title", "Continuous batching"),
    ("batched",),
    iter_run,
)

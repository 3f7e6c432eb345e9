"""Continuous batching: every running request of the engine in one batch, scheduled per iteration.

The batcher is the engine's serving loop on every device. A request is a `Job` (engine/schedule.py):
ids to read (a prompt, a step's new tokens, a beam search's next token per row) and, for a chat
stream, a decode that follows. Each iteration is ONE forward over every scheduled job's tokens
(engine/ragged.py packs them into one row, each attending over its own cache), scheduled as
engine/schedule.py says: decodes and one-token reads first, then prompt chunks up to the budget.

While any job takes one token, the budget is `decoding_budget` (the engine's on a CPU: 128 tokens, at
least the batch size + 16): every iteration stays short, so everyone's next token comes quickly; when
none does, it is `budget` (the prefill chunk), so a prompt read alone goes at full speed. The
figure trades the streams' next token against a waiting prompt's first: in a closed-loop crowd
(bench/bench_crowd.py, 32 users on 2 cores) 48 gave the best p95 (10.2-11.1 s against 13.2 s at 256),
but under open-loop arrivals (bench/bench_serving.py) a 512-token prompt read 48 tokens at a time
missed the 2 s TTFT while others decoded, and 128 kept 94-100 % of requests within the SLO up to
1.6 requests/s (48: 81 % at 0.4): an audience arrives on its own clock, so 128 is the default.
A long prompt is read a chunk at a time and never stalls anyone's next token, and a job that
finishes leaves at once: the next iteration has a place for a waiting one (at most `max_jobs` run
together). Every job keeps its own cache (its KV store entry), settings and seeded RNG: its tokens
and records are those it would get alone. Stop (or a closed tab) takes a job out at the next
iteration; out of memory refuses the newest job, never the others.

A job alone taking one token may run on a `SoloPath` instead (the static KV slot replayed as a CUDA
graph, engine/static.py): on a GPU a lone stream gets graph steps, two or more are batched.

Callers block on their job's queue: `forward` (yields Progress, returns rows and seconds),
`forward_rows` (a beam search's rows, one token each) and `decode` (yields a TokenRecord per token).
`Batcher(threaded=False)` runs `step()` by hand (the "Continuous batching" lesson replays arrivals
at set iterations). `log` keeps the schedule.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from playground.engine.control import Control, check
from playground.engine.decode_step import Decoding, check_room, decode_step, finished
from playground.engine.forward import Advance, Forwarder, drop_cache
from playground.engine.kv_store import CacheEntry
from playground.engine.model_call import run_model
from playground.engine.plans import DecodePlan, Progress
from playground.engine.ragged import packed_inputs, unsupported, warm_attention
from playground.engine.records import TokenRecord
from playground.engine.schedule import Iteration, Job, Scheduled, kept, packed_part, schedule, took
from playground.engine.static import zero_gpu
from playground.errors import Cancelled, PlaygroundError
from playground.messages import Message

logger = logging.getLogger(__name__)
LOG_ITERATIONS = 4096  # iterations the schedule log keeps
MODES = ("continuous", "off")
_DONE = object()  # a job's last message
STOP_POLL_S = 0.2  # how often a caller waiting for its next token checks its Stop
DECODING_TOKENS = 128  # the engine's tokens per iteration while any job decodes, on a CPU (docstring)
PREFILL_ROOM = 16  # the engine's decoding budget leaves this many tokens beside a full batch's decodes


@dataclass(frozen=True)
class BatchConfig:
    """How the in-process engine batches (PLAYGROUND_BATCHING, _BATCH_SIZE, _BATCH_TOKENS)."""

    mode: str = "off"  # "continuous": every request in one running batch; "off": one forward each
    size: int = 32  # requests in the batch at once (more wait for a place)
    tokens: int = 0  # tokens per iteration while any request decodes; 0: DECODING_TOKENS on a CPU,
    # the prefill chunk on a GPU (not measured there); at least size + PREFILL_ROOM, at most the chunk

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise PlaygroundError(
                "Unknown batching {mode!r}: use one of {modes}.",
                key="batching.error.unknown",
                mode=self.mode,
                modes=", ".join(MODES),
            )
        if self.size < 1 or self.tokens < 0:
            raise PlaygroundError(
                "Batching needs a batch size >= 1 and tokens >= 0, got {size}, {tokens}.",
                key="batching.error.sizes",
                size=self.size,
                tokens=self.tokens,
            )


class SoloPath(Protocol):
    """Another way to run the one token of a job that is alone in the batch (engine/static.py)."""

    def takes(self, entry: CacheEntry) -> bool:
        """This entry's next token can run here."""
        ...

    def step(self, entry: CacheEntry, token_id: int) -> torch.Tensor:
        """Append one token to the entry's sequence; float32 scores (1, vocab). Runs in a forwarder
        turn. The entry's own cache may lag behind until `release`."""
        ...

    def release(self, entry: CacheEntry) -> None:
        """The entry's cache holds every token again (before anything else reads it)."""
        ...


def make_batcher(
    model: Any,
    twin: Callable[[], Any],
    forwarder: Forwarder,
    tokenizer: Any,
    config: BatchConfig,
    solo: SoloPath | None = None,
) -> tuple[Batcher | None, str]:
    """The engine's batcher when asked for and possible (twin: the model with the batched attention),
    and the header's line on batching."""
    if config.mode == "off":
        return None, Message("batching.off", "Batching: off (each request its own forwards)")
    if zero_gpu():
        return None, Message(
            "batching.zero_gpu",
            "Batching: off (ZeroGPU: no loop can hold the GPU between requests)",
        )
    reason = unsupported(model)
    if reason:
        return None, Message("batching.unsupported", "Batching: off ({reason})", reason=reason)
    cpu = forwarder.device.type == "cpu"
    wanted = config.tokens or (DECODING_TOKENS if cpu else forwarder.prefill_chunk)
    batcher = Batcher(
        twin(),
        forwarder,
        tokenizer,
        budget=0,
        max_jobs=config.size,
        decoding_budget=max(wanted, config.size + PREFILL_ROOM),  # a full batch's decodes never wait
        solo=solo,
    )
    warm_attention()  # compiled now, not in the first user's turn
    lone = Message("batching.lone", ", a lone request on the static path") if solo is not None else ""
    line = Message(
        "batching.continuous",
        "Batching: continuous (up to {size} requests, {decoding} tokens per iteration while any decodes, "
        "{alone} alone{lone})",
        size=config.size,
        decoding=batcher.decoding_budget,
        alone=batcher.budget,
        lone=lone,
    )
    return batcher, line


class Batcher:
    """The engine's running batch (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        forwarder: Forwarder,
        tokenizer: Any,
        *,
        budget: int,
        max_jobs: int,
        decoding_budget: int | None = None,
        threaded: bool = True,
        solo: SoloPath | None = None,
    ) -> None:
        if budget < 0 or max_jobs < 1 or (decoding_budget is not None and decoding_budget < 1):
            raise PlaygroundError(
                "Batching needs token budgets and a batch size >= 1, got "
                f"{budget}, {decoding_budget} while decoding, {max_jobs}."
            )
        self.model, self.forwarder, self.tokenizer = model, forwarder, tokenizer  # model: a ragged twin
        self._budget, self.max_jobs, self.threaded = int(budget), int(max_jobs), threaded
        self._decoding_budget = decoding_budget
        self.solo = solo
        self.waiting: deque[Job] = deque()
        self.running: list[Job] = []
        self.log: deque[Iteration] = deque(maxlen=LOG_ITERATIONS)
        self.iterations = 0
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False  # close(): the loop thread ends once nothing is left to serve

    @property
    def budget(self) -> int:
        """Tokens per iteration when no job takes one token (0 at construction: the engine's prefill
        chunk, as it is now)."""
        return self._budget or self.forwarder.prefill_chunk

    @property
    def decoding_budget(self) -> int:
        """Tokens per iteration while any job takes one token (None at construction: the budget; never
        more than it)."""
        return min(self._decoding_budget or self.budget, self.budget)

    # --- what callers use ---------------------------------------------------------------------

    def forward(
        self,
        entry: CacheEntry,
        new_ids: list[int],
        last: int,
        control: Control | None,
        name: str,
        ahead: bool = False,
    ) -> Advance:
        """Read new_ids into entry's cache in the batch; Progress while it does (long inputs), then
        (rows (last, vocab), seconds). ahead: many iterations follow this read (a stream's prompt,
        a beam search's), so it goes before the other reads."""
        job = Job(name, entry, list(new_ids), last, control, ahead=ahead)
        self._submit(job)
        try:
            while True:
                message = self._next(job)
                if isinstance(message, Progress):
                    yield message
                elif message is _DONE:
                    return torch.stack(job.got), job.seconds
        finally:
            self._withdraw(job)

    def forward_rows(
        self, entry: CacheEntry, tokens: list[int], position: int, control: Control | None, name: str
    ) -> torch.Tensor:
        """One token for each row of a cache of len(tokens) rows (a beam search's), all at `position`,
        at the front of the queue with the decodes; scores (rows, vocab)."""
        job = Job(name, entry, list(tokens), len(tokens), control, rows=len(tokens), start=position)
        self._submit(job, front=True)
        try:
            while self._next(job) is not _DONE:
                pass
            return torch.stack(job.got)
        finally:
            self._withdraw(job)

    def decode(
        self,
        entry: CacheEntry,
        first: torch.Tensor,
        spent: float,
        plan: DecodePlan,
        eos: tuple[int, ...],
        context: int,
        control: Control | None,
        name: str,
    ) -> Iterator[TokenRecord]:
        """Choose, record and feed back one token per iteration from the row `first` on (the one decode
        step, engine/decode_step.py): the tokens and records the request gets alone."""
        decoding = Decoding.start(plan, eos, context, first.device)
        job = Job(name, entry, [], 1, control, decoding, got=[first], seconds=spent, phase="choose")
        self._submit(job, front=True)  # its prompt was read in the batch: it goes on before newcomers
        try:
            while (message := self._next(job)) is not _DONE:
                yield message
        finally:
            self._withdraw(job)

    def stream_job(
        self,
        entry: CacheEntry,
        prompt: list[int],
        plan: DecodePlan,
        eos: tuple[int, ...],
        context: int,
        name: str,
    ) -> Job:
        """Submit a whole stream (read the prompt, then decode) and return its job: its records come
        on job.out (the lesson steps an unthreaded batcher and reads them afterwards)."""
        decoding = Decoding.start(plan, eos, context, self.forwarder.device)
        job = Job(name, entry, list(prompt), 1, None, decoding, ahead=True)
        self._submit(job)
        return job

    def _submit(self, *jobs: Job, front: bool = False) -> None:
        with self._wake:  # one lock for the queue and the thread: two arrivals start one thread
            if front:
                self.waiting.extendleft(reversed(jobs))
            else:
                self.waiting.extend(jobs)
            self._wake.notify()
            if self.threaded and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._serve, name="playground-batcher", daemon=True)
                self._thread.start()

    def _next(self, job: Job) -> Any:
        """The job's next message; Stop raises at once, even while the job waits for its next
        iteration (what was made since is not handed out)."""
        while True:
            check(job.control)
            try:
                message = job.out.get(timeout=STOP_POLL_S)
            except queue.Empty:
                continue
            if isinstance(message, BaseException):
                raise message
            return message

    def _withdraw(self, job: Job) -> None:
        """The caller is done (or gone): the job leaves at the next iteration; wait until it has, so
        its cache goes back to the store untouched by the batch afterwards."""
        if not job.gone.is_set():
            job.withdrawn = True
            with self._wake:
                self._wake.notify()
            job.gone.wait()

    # --- the loop -------------------------------------------------------------------------------

    def close(self) -> None:
        """End the loop thread as soon as nothing is left to serve (the engine is being unloaded: its
        weights are freed without waiting for the idle minute). A later job starts a new thread."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not (self.waiting or self.running):
                    if self._closing:
                        self._thread, self._closing = None, False
                        return
                    idle = not self._wake.wait(timeout=60)
                    if idle and not (self.waiting or self.running):  # idle a minute: the thread ends
                        self._thread = None
                        return
            try:
                self.step()
            except Exception as exc:  # a bug must not leave every caller waiting: all hear of it
                self._fail_all(exc)

    def _fail_all(self, error: BaseException) -> None:
        with self._wake:
            jobs = [*self.running, *self.waiting]
            self.waiting.clear()
        for job in jobs:
            rewind(job)
            self._finish(job, error)

    def step(self) -> bool:
        """One iteration: admit, schedule, one forward, hand out rows and tokens. False: nothing to do."""
        self._admit()
        plan = schedule(self.running, self.budget, self.decoding_budget)
        if not plan:
            return False
        newest = max((job for job, _ in plan), key=lambda job: job.submitted)
        try:
            logits, seconds, path = self._forward(plan, on_oom=lambda: drop_cache(newest.entry))
        except PlaygroundError as exc:  # out of memory: the newest job is refused, the others retry
            for job, _ in plan:
                if job is not newest and not rewind(job):
                    self._finish(job, exc)
            self._finish(newest, exc)
            return True
        except Exception as exc:  # never leave a caller waiting: the iteration's jobs get the error
            for job, _ in plan:
                rewind(job)
                self._finish(job, exc)
            return True
        self._hand_out(plan, logits, seconds, path)
        return True

    def _admit(self) -> None:
        with self._wake:
            for job in [j for j in self.running if j.cancelled]:
                self._finish(job, Cancelled())
            for job in [j for j in self.waiting if j.cancelled]:
                self.waiting.remove(job)
                self._finish(job, Cancelled())
            while self.waiting and len(self.running) < self.max_jobs:
                job = self.waiting.popleft()
                if job.control is not None:  # the wait for a place counts as a wait for the model
                    job.control.wait_seconds += time.perf_counter() - job.submitted
                self.running.append(job)
        for job in [j for j in self.running if j.phase == "choose"]:
            self._choose(job)  # a decode's first token: from the row it came with

    def _forward(
        self, plan: list[tuple[Job, int]], on_oom: Callable[[], None]
    ) -> tuple[torch.Tensor, float, str]:
        """The iteration's one forward: rows (kept, vocab) float32 in plan order, its seconds, and its
        path ("static": a lone job's one token on the solo path; "packed": one forward of all)."""
        lone = self._lone(plan)
        if lone is not None:
            token = lone.pending[lone.read]
            rows, seconds = self.forwarder.run(lambda: self.solo.step(lone.entry, token), on_oom=on_oom)
            return rows, seconds, "static"
        if self.solo is not None:
            for job, _ in plan:
                self.solo.release(job.entry)  # a lone job's cache catches up before it is batched
        inputs = packed_inputs([packed_part(job, n) for job, n in plan], self.forwarder.device)
        wanted = sum(len(kept(job, n)) for job, n in plan)  # none wanted: the forward still keeps one row
        rows, seconds = self.forwarder.run(lambda: run_model(self.model, inputs).logits[0], on_oom=on_oom)
        return rows[:wanted].float(), seconds, "packed"

    def _lone(self, plan: list[tuple[Job, int]]) -> Job | None:
        """The job of a one-job, one-token iteration, when the solo path takes it."""
        if self.solo is None or len(plan) != 1 or len(self.running) != 1:
            return None
        job, n = plan[0]
        if n != 1 or job.rows != 1 or not job.entry.ids or not self.solo.takes(job.entry):
            return None
        return job

    def _hand_out(self, plan: list[tuple[Job, int]], logits: torch.Tensor, seconds: float, path: str) -> None:
        row, done = 0, []
        for job, n in plan:
            wanted = len(kept(job, n))
            took(job, n)
            job.seconds += seconds
            job.got.extend(logits[row : row + wanted])
            row += wanted
            kind = "decode" if job.phase == "decode" else "prefill"
            done.append(Scheduled(job.name, kind, n, bool(wanted)))
            self._after(job)
        started = time.perf_counter() - seconds
        self.log.append(Iteration(self.iterations, started, seconds, tuple(done), path))
        self.iterations += 1

    def _after(self, job: Job) -> None:
        """A job after its part of an iteration: progress, its rows, its next token."""
        if job.phase == "decode" or (job.decoding is not None and not job.reading):
            job.entry.remember(len(job.entry.ids), job.got[-1])
            self._choose(job)  # a decode step done, or a stream's prompt read to its end
            return
        if len(job.pending) > self.forwarder.prefill_chunk:  # a long read says how far it is
            job.out.put(Progress("prefill", job.read, len(job.pending)))
        if not job.reading:
            job.out.put(_DONE)
            self._leave(job)

    def _choose(self, job: Job) -> None:
        """The decoding job's next token from its last row (the one decode step)."""
        decoding = job.decoding
        assert decoding is not None
        try:
            record = decode_step(self.tokenizer, decoding, job.got[-1], job.entry.ids, job.seconds)
        except Exception as exc:  # this request's step failed (its scores, its sampling): it alone ends
            logger.exception("A decode step failed: its request ends, the batch goes on.")
            self._finish(job, exc)
            return
        job.out.put(record)
        job.seconds, job.got = 0.0, []
        if finished(decoding, record):
            self._finish(job, None)
            return
        try:
            check_room(len(job.entry.ids) + 1, decoding.context)
        except PlaygroundError as exc:
            self._finish(job, exc)
            return
        job.pending, job.read, job.phase = [record.id], 0, "decode"

    def _finish(self, job: Job, error: BaseException | None) -> None:
        job.out.put(error if error is not None else _DONE)
        self._leave(job)

    def _leave(self, job: Job) -> None:
        if job in self.running:
            self.running.remove(job)
        try:
            if self.solo is not None:  # its cache holds every token before the caller has it
                self.solo.release(job.entry)
        except Exception:  # a cache that could not catch up is recomputed from its ids, never half-used
            logger.exception("The static path could not copy a sequence back: its cache is dropped.")
            drop_cache(job.entry)
        finally:
            job.gone.set()


def rewind(job: Job) -> bool:
    """After a forward that failed part way: some of the job's layers already hold this iteration's
    keys and values, its ids don't. Cut each layer back to its length (else later tokens would attend
    to them twice). False: the cache could not be cut (then it is dropped)."""
    cache, length = job.entry.cache, job.position
    if cache is None:
        return False
    try:
        for layer in cache.layers:
            extra = layer.get_seq_length() - length if layer.is_initialized else 0
            if extra > 0:
                layer.crop(-extra)
    except (AttributeError, RuntimeError, ValueError, NotImplementedError):
        drop_cache(job.entry)
        return False
    return True

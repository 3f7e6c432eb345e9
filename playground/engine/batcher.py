"""Continuous batching: every running request of the engine in one batch, scheduled per iteration.

A request is a `Job`: ids to read (a prompt, a step's new tokens) and, for a chat stream, a
decode that follows. Each iteration is ONE forward (engine/ragged.py) over:
1. one token for every decoding job (first come, first served);
2. then prompt chunks until the iteration's token budget is spent: first the reads that lead to
   many more iterations (a stream's prompt, a beam search's) and the reads passed over in
   PASSED_OVER iterations already, then the others, oldest first.
While any job takes one token, the budget is `decoding_budget` (the engine's on a CPU: 48 tokens,
at least the batch size + 16): every iteration stays short, so everyone's next token comes quickly;
when none does, it is `budget` (the prefill chunk), so a prompt read alone goes at full speed. In a
crowd (bench/bench_crowd.py, 32 users on 2 cores) the tail is the streams, which need an iteration
per token: with a 256-token budget while decoding the p95 latency was 13.2 s, with 48 it was
10.2-11.1 s. So a long prompt is read a chunk at a time and never stalls anyone's next token, and a
job that finishes leaves at once: the next iteration has a place for a waiting one (at most
`max_jobs` run together). Every job keeps its own cache (its KV store entry), settings and seeded
RNG: its tokens and records are those it would get alone. Stop (or a closed tab) takes a job out at
the next iteration; out of memory refuses the newest job, never the others.

Callers block on their job's queue: `forward` (yields Progress, returns rows and seconds),
`forward_rows` (several sequences' next tokens together: a beam search's rows) and `decode`
(yields a TokenRecord per token). `Batcher(threaded=False)` runs `step()` by hand (the
"Continuous batching" lesson replays arrivals at set iterations). `log` keeps the schedule.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.engine.base import DecodePlan, Progress
from playground.engine.control import Control, check
from playground.engine.forward import Advance, Forwarder, drop_cache, keep_rows
from playground.engine.kv_store import CacheEntry
from playground.engine.probes import Probes
from playground.engine.ragged import NO_MASK, RaggedCache, RaggedPlan, Segment, unsupported, warm_attention
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.sampling import choose, final_scores, seeded_generator
from playground.errors import Cancelled, PlaygroundError

LOG_ITERATIONS = 4096  # iterations the schedule log keeps
MODES = ("continuous", "off")
_DONE = object()  # a job's last message
STOP_POLL_S = 0.2  # how often a caller waiting for its next token checks its Stop
DECODING_TOKENS = 48  # the engine's tokens per iteration while any job decodes, on a CPU (docstring)
PREFILL_ROOM = 16  # the engine's decoding budget leaves this many tokens beside a full batch's decodes
PASSED_OVER = 4  # iterations a plain read may get no tokens before it goes with the reads ahead


@dataclass(frozen=True)
class BatchConfig:
    """How the in-process engine batches (PLAYGROUND_BATCHING, _BATCH_SIZE, _BATCH_TOKENS)."""

    mode: str = "off"  # "continuous": every request in one running batch; "off": one forward each
    size: int = 32  # requests in the batch at once (more wait for a place)
    tokens: int = 0  # tokens per iteration while any request decodes; 0: DECODING_TOKENS on a CPU,
    # the prefill chunk on a GPU (not measured there); at least size + PREFILL_ROOM, at most the chunk

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise PlaygroundError(f"Unknown batching {self.mode!r}: use one of {', '.join(MODES)}.")
        if self.size < 1 or self.tokens < 0:
            raise PlaygroundError(
                f"Batching needs a batch size >= 1 and tokens >= 0, got {self.size}, {self.tokens}."
            )


def make_batcher(
    probes: Probes, tokenizer: Any, config: BatchConfig, static: bool
) -> tuple[Batcher | None, str]:
    """The engine's batcher when asked for and possible, and the header's line on batching."""
    if config.mode == "off":
        return None, "Batching: off (each request its own forwards)"
    reason = "not with the static decode path (CUDA graphs) yet" if static else unsupported(probes.model)
    if reason:
        return None, f"Batching: off ({reason})"
    cpu = probes.forwarder.device.type == "cpu"
    wanted = config.tokens or (DECODING_TOKENS if cpu else probes.forwarder.prefill_chunk)
    batcher = Batcher(
        probes.ragged_twin(),
        probes.forwarder,
        tokenizer,
        budget=0,
        max_jobs=config.size,
        decoding_budget=max(wanted, config.size + PREFILL_ROOM),  # a full batch's decodes never wait
    )
    warm_attention()  # compiled now, not in the first user's turn
    budgets = f"{batcher.decoding_budget} tokens per iteration while any decodes, {batcher.budget} alone"
    return batcher, f"Batching: continuous (up to {config.size} requests, {budgets})"


@dataclass
class Decoding:
    """A stream's decode after its prompt: settings, private RNG, where it stops."""

    plan: DecodePlan
    eos: tuple[int, ...]
    context: int  # the model's context length
    generator: torch.Generator
    made: int = 0
    source: str = "sample"


@dataclass
class Job:
    """One request in the batch (see the module docstring)."""

    name: str  # shown in the schedule
    entry: CacheEntry  # its cache and the ids it covers
    pending: list[int]  # ids to forward, in order
    keep: int  # rows wanted after the last `keep` of pending (a stream: prefix + 1)
    control: Control | None
    decoding: Decoding | None = None
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    rows: list[torch.Tensor] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the iterations it was in since its last token (not a share)
    read: int = 0  # of pending, forwarded so far
    submitted: float = field(default_factory=time.perf_counter)
    gone: threading.Event = field(default_factory=threading.Event)  # left the batch
    withdrawn: bool = False
    ahead: bool = False  # a read that many more iterations follow: its chunks go before the others'
    passed_over: int = 0  # iterations it was reading and got no tokens
    # "read": ids to forward (a prompt, a step's tokens); "choose": a row to pick the next token
    # from; "decode": one token (the one it picked) to forward per iteration
    phase: str = "read"

    @property
    def reading(self) -> bool:
        return self.read < len(self.pending)

    @property
    def cancelled(self) -> bool:
        return self.withdrawn or (self.control is not None and self.control.cancelled)


@dataclass(frozen=True)
class Scheduled:
    """What one job did in one iteration (the schedule log and the lesson's Gantt chart)."""

    name: str
    kind: str  # "prefill" (reading ids) or "decode" (one token it chose)
    tokens: int
    emitted: bool  # a row came out for it (a prompt read to its end, or a decode step)


@dataclass(frozen=True)
class Iteration:
    index: int
    started: float  # perf_counter
    seconds: float  # model time of its one forward
    jobs: tuple[Scheduled, ...]


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
    ) -> None:
        if budget < 0 or max_jobs < 1 or (decoding_budget is not None and decoding_budget < 1):
            raise PlaygroundError(
                "Batching needs token budgets and a batch size >= 1, got "
                f"{budget}, {decoding_budget} while decoding, {max_jobs}."
            )
        self.model, self.forwarder, self.tokenizer = model, forwarder, tokenizer  # model: a ragged twin
        self._budget, self.max_jobs, self.threaded = int(budget), int(max_jobs), threaded
        self._decoding_budget = decoding_budget
        self.waiting: deque[Job] = deque()
        self.running: list[Job] = []
        self.log: deque[Iteration] = deque(maxlen=LOG_ITERATIONS)
        self.iterations = 0
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

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
                    return torch.stack(job.rows), job.seconds
        finally:
            self._withdraw(job)

    def forward_rows(
        self, entries: list[CacheEntry], new_ids: list[list[int]], control: Control | None, name: str
    ) -> torch.Tensor:
        """Several sequences already read each take their next ids (a beam search's rows, one token
        each), together and at the front of the queue, so they share an iteration when the batch has
        the places; the last row of each (N, vocab)."""
        pairs = zip(entries, new_ids, strict=True)
        jobs = [Job(f"{name} {i + 1}", entry, list(ids), 1, control) for i, (entry, ids) in enumerate(pairs)]
        self._submit(*jobs, front=True)
        try:
            for job in jobs:
                while self._next(job) is not _DONE:
                    pass  # progress of a long read: the caller shows none
            return torch.stack([job.rows[-1] for job in jobs])
        finally:
            for job in jobs:
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
        """Choose, record and feed back one token per iteration from the row `first` on, as
        LocalEngine's decode loop does alone: the same tokens and records."""
        source = "greedy" if plan.settings.greedy else "sample"
        decoding = Decoding(plan, eos, context, seeded_generator(plan.seed, first.device), source=source)
        job = Job(name, entry, [], 1, control, decoding, rows=[first], seconds=spent, phase="choose")
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
        source = "greedy" if plan.settings.greedy else "sample"
        decoding = Decoding(
            plan, eos, context, seeded_generator(plan.seed, self.forwarder.device), source=source
        )
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

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not (self.waiting or self.running):
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
            _rewind(job)
            self._finish(job, error)

    def step(self) -> bool:
        """One iteration: admit, schedule, one forward, hand out rows and tokens. False: nothing to do."""
        self._admit()
        plan = self._schedule()
        if not plan:
            return False
        newest = max((job for job, _ in plan), key=lambda job: job.submitted)
        try:
            logits, seconds = self._forward(plan, on_oom=lambda: _drop(newest))
        except PlaygroundError as exc:  # out of memory: the newest job is refused, the others retry
            for job, _ in plan:
                if job is not newest and not _rewind(job):
                    self._finish(job, exc)
            self._finish(newest, exc)
            return True
        except Exception as exc:  # never leave a caller waiting: the iteration's jobs get the error
            for job, _ in plan:
                _rewind(job)
                self._finish(job, exc)
            return True
        self._hand_out(plan, logits, seconds)
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

    def _schedule(self) -> list[tuple[Job, int]]:
        """(job, tokens this iteration): decodes (and one-token reads) first, then prompt chunks up to
        the budget (the decoding budget when any job takes one token), reads marked `ahead` first."""
        ones = [job for job in self.running if _one_more_token(job)]
        budget = self.decoding_budget if ones else self.budget
        plan = [(job, 1) for job in ones[:budget]]
        budget -= len(plan)
        reads = [job for job in self.running if _reads_a_chunk(job)]
        for job in sorted(reads, key=lambda job: not (job.ahead or job.passed_over >= PASSED_OVER)):
            n = min(len(job.pending) - job.read, budget)  # the sort is stable: oldest first
            if n:
                plan.append((job, n))
                budget -= n
            else:
                job.passed_over += 1
        return plan

    def _forward(self, plan: list[tuple[Job, int]], on_oom: Callable[[], None]) -> tuple[torch.Tensor, float]:
        """The iteration's one forward: rows (kept, vocab) float32, in plan order."""
        ids, positions, segments, keep = [], [], [], []
        for job, n in plan:
            start, part = len(job.entry.ids), job.pending[job.read : job.read + n]
            segments.append(Segment(len(ids), len(ids) + n, job.entry.cache))
            keep.extend(len(ids) + i for i in self._kept(job, n))
            ids.extend(part)
            positions.extend(range(start, start + n))
        ragged = RaggedPlan(tuple(segments))
        device = self.forwarder.device

        def call() -> torch.Tensor:
            out = self.model(
                input_ids=torch.tensor([ids], device=device),
                position_ids=torch.tensor([positions], device=device),
                past_key_values=RaggedCache(ragged),
                attention_mask=NO_MASK.to(device),
                ragged=ragged,
                use_cache=True,
                **keep_rows(self.model, torch.tensor(keep or [0], device=device)),
            )
            return out.logits[0].float()

        rows, seconds = self.forwarder.run(call, on_oom=on_oom)
        return rows[: len(keep)], seconds

    @staticmethod
    def _kept(job: Job, n: int) -> range:
        """Offsets in this chunk whose rows the job wants (its last `keep` pending ids)."""
        if job.phase == "decode":
            return range(n - 1, n)
        first_wanted = len(job.pending) - job.keep
        return range(max(0, first_wanted - job.read), n) if job.read + n > first_wanted else range(0)

    def _hand_out(self, plan: list[tuple[Job, int]], logits: torch.Tensor, seconds: float) -> None:
        row, done = 0, []
        for job, n in plan:
            kept = len(self._kept(job, n))
            job.entry.ids.extend(job.pending[job.read : job.read + n])
            job.read += n
            job.seconds += seconds
            job.rows.extend(logits[row : row + kept])
            row += kept
            done.append(Scheduled(job.name, "decode" if job.phase == "decode" else "prefill", n, bool(kept)))
            self._after(job)
        self.log.append(Iteration(self.iterations, time.perf_counter() - seconds, seconds, tuple(done)))
        self.iterations += 1

    def _after(self, job: Job) -> None:
        """A job after its part of an iteration: progress, its rows, its next token."""
        if job.phase == "decode" or (job.decoding is not None and not job.reading):
            job.entry.remember(len(job.entry.ids), job.rows[-1])
            self._choose(job)  # a decode step done, or a stream's prompt read to its end
            return
        if len(job.pending) > self.forwarder.prefill_chunk:  # a long read says how far it is
            job.out.put(Progress("prefill", job.read, len(job.pending)))
        if not job.reading:
            job.out.put(_DONE)
            self._leave(job)

    def _choose(self, job: Job) -> None:
        """Pick the decoding job's next token from its last row (its own settings and RNG)."""
        d = job.decoding
        assert d is not None
        started, logits = time.perf_counter(), job.rows[-1].unsqueeze(0)
        settings = d.plan.settings
        history = torch.tensor(job.entry.ids, dtype=torch.long, device=logits.device)
        scores = final_scores(logits[0], history, settings)
        token = choose(scores, settings, d.generator)
        record = describe_rows(
            self.tokenizer, logits, token, processed=scores, top=d.plan.top, source=d.source
        )[0]
        record.seconds = job.seconds + time.perf_counter() - started
        job.out.put(record)
        d.made, job.seconds, job.rows = d.made + 1, 0.0, []
        if record.id in d.eos or d.made >= d.plan.max_new_tokens:
            self._finish(job, None)
        elif len(job.entry.ids) + 1 > d.context:
            total = len(job.entry.ids) + 1
            self._finish(
                job,
                PlaygroundError(f"{total} tokens is more than the model's context of {d.context} tokens."),
            )
        else:
            job.pending, job.read, job.phase = [record.id], 0, "decode"

    def _finish(self, job: Job, error: BaseException | None) -> None:
        job.out.put(error if error is not None else _DONE)
        self._leave(job)

    def _leave(self, job: Job) -> None:
        if job in self.running:
            self.running.remove(job)
        job.gone.set()


def _one_more_token(job: Job) -> bool:
    """A decode, or one token read onto a sequence already read (a step's pick, a beam row): these
    go before prompt chunks, so a long prompt never stalls them."""
    if job.phase == "decode":
        return True
    return job.phase == "read" and job.read == 0 and len(job.pending) == 1 and bool(job.entry.ids)


def _reads_a_chunk(job: Job) -> bool:
    """A read of more than one token, or the first read of a sequence: a prompt chunk."""
    return job.phase == "read" and job.reading and not _one_more_token(job)


def _drop(job: Job) -> None:
    drop_cache(job.entry)


def _rewind(job: Job) -> bool:
    """After a forward that failed part way: some of the job's layers already hold this iteration's
    keys and values, its ids don't. Cut each layer back to its ids (else later tokens would attend
    to them twice). False: the cache could not be cut (then it is dropped)."""
    cache, length = job.entry.cache, len(job.entry.ids)
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

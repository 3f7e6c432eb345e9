"""The running batch's scheduler, apart from its thread: what a request in the batch is (`Job`), which
jobs take how many tokens in the next iteration (`schedule`), what each gives the packed forward
(`packed_part`) and what the schedule log keeps (`Iteration`). Pure data and functions: the lesson
"Continuous batching" and the tests drive it by hand; engine/batcher.py runs it in a thread.

Each iteration takes:
1. one token for every decoding job and every one-token read of a sequence already read (a step's
   pick, a beam search's rows: one token per row), first come, first served;
2. then prompt chunks until the iteration's token budget is spent: first the reads that lead to many
   more iterations (a stream's prompt, a beam search's; `Job.ahead`) and the reads passed over in
   PASSED_OVER iterations already, then the others, oldest first.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from playground.engine.control import Control
from playground.engine.decode_step import Decoding
from playground.engine.kv_store import CacheEntry
from playground.engine.ragged import PackedPart

PASSED_OVER = 4  # iterations a plain read may get no tokens before it goes with the reads ahead


@dataclass
class Job:
    """One request in the batch: ids to read into its own cache (a prompt, a step's new tokens, a beam
    search's next token per row) and, for a chat stream, a decode that follows."""

    name: str  # shown in the schedule
    entry: CacheEntry  # its cache and the ids it covers
    pending: list[int]  # ids to forward, in order
    keep: int  # rows wanted after the last `keep` of pending (a stream: prefix + 1)
    control: Control | None
    decoding: Decoding | None = None
    rows: int = 1  # its cache's rows: > 1 for a beam search (pending is one token per row)
    start: int | None = None  # the position of its first pending id (None: after the entry's ids)
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    got: list[torch.Tensor] = field(default_factory=list)  # next-token rows made for it so far
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

    @property
    def position(self) -> int:
        """The position its next pending id goes to: the length its cache has now (a beam search's rows
        say theirs: its entry's ids are the prompt's)."""
        return self.start if self.start is not None else len(self.entry.ids)

    @property
    def width(self) -> int:
        """Tokens it takes when it takes one token (per row)."""
        return self.rows


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
    path: str = "packed"  # "packed": one forward over every job; "static": a lone job's graph step


def one_more_token(job: Job) -> bool:
    """A decode, or one token read onto a sequence already read (a step's pick, a beam search's rows):
    these go before prompt chunks, so a long prompt never stalls them."""
    if job.phase == "decode":
        return True
    if job.rows > 1:
        return job.phase == "read" and job.read == 0
    return job.phase == "read" and job.read == 0 and len(job.pending) == 1 and bool(job.entry.ids)


def reads_a_chunk(job: Job) -> bool:
    """A read of more than one token, or the first read of a sequence: a prompt chunk."""
    return job.phase == "read" and job.reading and not one_more_token(job)


def schedule(running: list[Job], budget: int, decoding_budget: int) -> list[tuple[Job, int]]:
    """(job, tokens this iteration): one-token jobs first, then prompt chunks up to the budget (the
    decoding budget when any job takes one token), reads marked `ahead` first."""
    ones = [job for job in running if one_more_token(job)]
    left = decoding_budget if ones else budget
    plan: list[tuple[Job, int]] = []
    for job in ones:  # first come, first served: one that does not fit waits with those after it
        if job.width > left:
            break
        plan.append((job, job.width))
        left -= job.width
    reads = [job for job in running if reads_a_chunk(job)]
    for job in sorted(reads, key=lambda job: not (job.ahead or job.passed_over >= PASSED_OVER)):
        n = min(len(job.pending) - job.read, left)  # the sort is stable: oldest first
        if n:
            plan.append((job, n))
            left -= n
        else:
            job.passed_over += 1
    return plan


def kept(job: Job, n: int) -> range:
    """Offsets in this iteration's n ids whose next-token rows the job wants (its last `keep` pending
    ids; every row of a beam search)."""
    if job.phase == "decode" or job.rows > 1:
        return range(n - job.rows, n)
    first_wanted = len(job.pending) - job.keep
    return range(max(0, first_wanted - job.read), n) if job.read + n > first_wanted else range(0)


def packed_part(job: Job, n: int) -> PackedPart:
    """The job's share of the packed forward: its next n pending ids at their positions."""
    start, ids = job.position, job.pending[job.read : job.read + n]
    positions = [start] * n if job.rows > 1 else list(range(start, start + n))
    return PackedPart(job.entry.cache, ids, positions, kept(job, n), job.rows)


def took(job: Job, n: int) -> None:
    """After an iteration: the job's n ids are in its cache."""
    if job.rows == 1:
        job.entry.ids.extend(job.pending[job.read : job.read + n])
    job.read += n

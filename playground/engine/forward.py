"""The guard around every forward of the in-process engine: `Forwarder`.

A forward of the shared model (engine/model_call.py `run_model`, the one call site) always runs in a
Forwarder turn, which makes it:
- cancellable: the request's Control is checked before it starts (Stop acts within one chunk);
- locked: it holds the engine's model lock for that one forward, so requests interleave;
- memory-guarded: out of memory frees what the request held and says so plainly;
- timed: seconds of model work (the GPU's queued work waited for), lock waits excluded.

`Forwarder.chunks` reads a long input in prefill chunks (progress between them) and keeps only
the rows asked for; `Forwarder.advance` makes a cached sequence (a `CacheEntry`) cover a target
token list: reused rows, a crop to the common prefix, then the chunked forward of the rest. Chat,
step, beam, the static decode path and every "Under the hood" lesson use these (the forward-hook
test, tests/test_forward_primitive.py, sees every model forward inside a turn and in run_model).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from playground.engine.control import Control, check, holding
from playground.engine.kv_store import CacheEntry
from playground.engine.model_call import turn_open
from playground.engine.plans import Progress
from playground.engine.tokens import common_prefix
from playground.errors import PlaygroundError
from playground.messages import Message

T = TypeVar("T")
# (rows (last, vocab) float32 on the device, seconds of model work)
Advance = Generator[Progress, None, tuple[torch.Tensor, float]]
# (cache, ids of one chunk, rows to keep) -> float32 scores (keep, vocab)
PieceFn = Callable[[Any, Sequence[int], int], torch.Tensor]
# (entry, ids to read, rows wanted, control) -> Advance: another way to read ids (the running batch)
ReadFn = Callable[[CacheEntry, list[int], int, "Control | None"], Advance]
OOM_ADVICE = Message(
    "memory.advice",
    "Try a shorter prompt or text, fewer tokens, fewer beams or a smaller batch",
)


@dataclass
class Timing:
    seconds: float = 0.0


class Forwarder:
    """Runs model calls for one engine: its lock, its device, its prefill chunk size."""

    def __init__(self, device: torch.device, prefill_chunk: int, lock: threading.RLock | None = None) -> None:
        self.device = device
        self.prefill_chunk = int(prefill_chunk)
        # Serializes forward passes: one model, many sessions, one chunk or step at a time.
        self.lock = lock or threading.RLock()

    @contextmanager
    def turn(
        self, control: Control | None = None, *, on_oom: Callable[[], None] | None = None, wait: bool = True
    ) -> Iterator[Timing]:
        """One forward's turn: check Stop, hold the lock, guard memory, time it. wait=False: return
        once the GPU work is queued (a decode loop's one host copy waits for it)."""
        check(control)
        timing = Timing()
        with holding(self.lock, control), self.memory_guard(on_oom):
            started = time.perf_counter()
            with turn_open():
                yield timing
                if wait:
                    self.synchronize()
            timing.seconds = time.perf_counter() - started

    def run(
        self,
        call: Callable[[], T],
        control: Control | None = None,
        *,
        on_oom: Callable[[], None] | None = None,
        wait: bool = True,
    ) -> tuple[T, float]:
        """call() in one turn (see turn); returns its result and the seconds of model work."""
        with self.turn(control, on_oom=on_oom, wait=wait) as timing, torch.inference_mode():
            result = call()
        return result, timing.seconds

    def chunks(
        self,
        entry: CacheEntry,
        new_ids: list[int],
        last: int,
        control: Control | None,
        piece: PieceFn,
        wait: bool = True,
    ) -> Advance:
        """Forward new_ids into entry's cache a chunk at a time (one turn each, progress between
        them); the scores after the last `last` of them. Out of memory drops the entry's cache."""
        total, done, seconds = len(new_ids), 0, 0.0
        rows: list[torch.Tensor] = []
        while done < total:
            part = new_ids[done : done + self.prefill_chunk]
            keep = max(0, min(len(part), last - (total - done - len(part))))  # rows of this chunk to keep
            logits, spent = self.run(
                lambda part=part, keep=keep: piece(entry.cache, part, max(keep, 1)),
                control,
                on_oom=lambda: drop_cache(entry),
                wait=wait,
            )
            seconds += spent
            entry.ids.extend(part)
            if keep:
                rows.append(logits[-keep:])
            done += len(part)
            if total > self.prefill_chunk:
                yield Progress("prefill", done, total)
        return torch.cat(rows), seconds

    def advance(
        self,
        entry: CacheEntry,
        target: list[int],
        last: int,
        control: Control | None,
        piece: PieceFn,
        new_cache: Callable[[], Any],
        rest: ReadFn | None = None,
    ) -> Advance:
        """Make entry cover target; the scores after its last `last` ids and the model time.

        Rows the entry remembers are reused (all of them and a cache covering target: a crop, no
        forward). Otherwise crop to the common prefix, or to just before the first row to compute,
        and forward the rest in chunks (yielding progress), or with `rest(entry, ids, rows, control)`
        (the engine's running batch). The caller checks the ids."""
        common = common_prefix(entry.ids, target)
        lengths = range(len(target) - last + 1, len(target) + 1)
        known = 0  # leading rows the entry remembers (a pick then forwards only the new token)
        while known < last and lengths[known] <= common and lengths[known] in entry.logits:
            known += 1
        reused = [entry.logits[n] for n in lengths[:known]]
        if known == last:
            crop_entry(entry, len(target))
            return torch.stack(reused), 0.0
        crop_entry(entry, min(common, lengths[known] - 1))
        if entry.cache is None:
            entry.cache, entry.ids = new_cache(), []
        new_ids = target[len(entry.ids) :]
        if rest is not None:
            rows, seconds = yield from rest(entry, new_ids, last - known, control)
        else:
            rows, seconds = yield from self.chunks(entry, new_ids, last - known, control, piece)
        for n, row in zip(lengths[known:], rows, strict=True):
            entry.remember(n, row)
        return (torch.cat([torch.stack(reused), rows]) if reused else rows), seconds

    def synchronize(self) -> None:
        """Wait for queued GPU work, so a timing covers the model's real work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def memory_guard(self, on_oom: Callable[[], None] | None = None) -> Iterator[None]:
        """Out of memory: free what the request held (on_oom) and the allocator's cache, and say so."""
        try:
            yield
        except torch.OutOfMemoryError:
            if on_oom is not None:
                on_oom()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            raise PlaygroundError(
                "Out of memory on {device}: this request's cache was freed. {advice}.",
                key="memory.out",
                device=self.device.type,
                advice=OOM_ADVICE,
            ) from None

    def free_memory_bytes(self) -> int | None:
        """Memory free for new tensors on the device (None when it cannot be told)."""
        return free_device_memory(self.device)


def drop_cache(entry: CacheEntry) -> None:
    """Free an entry's cache now (out of memory): it is recomputed from its ids when used again."""
    entry.cache, entry.ids = None, []
    entry.logits.clear()


def crop_entry(entry: CacheEntry, length: int) -> None:
    """Cut the entry to its first `length` ids; a cache that cannot be cropped is dropped."""
    if length >= len(entry.ids):
        return
    if entry.cache is not None:
        try:
            entry.cache.crop(length - len(entry.ids))  # transformers 5: a negative count removes that many
        except (RuntimeError, ValueError, NotImplementedError):
            entry.cache, entry.ids = None, []
            entry.logits.clear()
            return
    del entry.ids[length:]
    entry.forget_after(length)


def free_device_memory(device: torch.device) -> int | None:
    """Memory free for new tensors on a device: the free GPU memory on CUDA, MemAvailable on a CPU
    (Linux); None when it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        return meminfo_available()
    return None


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    """MemAvailable from /proc/meminfo in bytes (Linux); None elsewhere."""
    try:
        with open(path, encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None

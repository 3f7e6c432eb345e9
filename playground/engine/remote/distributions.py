"""What a RemoteEngine remembers of the server's distributions, per sequence key, and how it fetches
the ones it lacks (remote/engine.py): the ids of each key and the distributions after its prefixes,
so an undo, a branch switch or a fork costs no request, and a pick costs one. Bounded by count and
bytes, least recently used forgotten first (engine/lru.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import closing

import torch

from playground.engine.control import Control, check, report
from playground.engine.lru import LRU
from playground.engine.remote.adapter import Adapter, Position, StreamProgress
from playground.engine.remote.sequences import RemoteSequence, Row
from playground.engine.tokens import common_prefix
from playground.errors import PlaygroundError

MAX_SEQUENCES = 4096  # sequence keys remembered (least recently used forgotten)
MAX_POSITION_BYTES = 256 * 2**20  # memory for remembered distributions, all keys together
MAX_PARKED = 1024  # rows kept per sequence for paths left (undo, other branches)
MAX_SCORED_ONE_BY_ONE = 64  # given tokens scored one request each (engines without prompt scoring)


class Distributions:
    """The sequences of one remote engine and their known distributions (see the module docstring)."""

    def __init__(
        self, adapter: Adapter, top_n: int, vocab_size: int, check_ids: Callable[[Sequence[int], int], None]
    ) -> None:
        self.adapter, self.top_n, self.vocab_size, self.check_ids = adapter, top_n, vocab_size, check_ids
        self._sequences: LRU[str, RemoteSequence] = LRU(
            max_items=MAX_SEQUENCES, max_size=MAX_POSITION_BYTES, size=lambda seq: seq.nbytes
        )
        self._lock = threading.Lock()

    # --- the sequences ----------------------------------------------------------------------

    def peek(self, key: str) -> RemoteSequence | None:
        with self._lock:
            return self._sequences.get(key)

    def take(self, key: str) -> RemoteSequence:
        """key's sequence, out of the store while it is worked on (a new one when absent)."""
        with self._lock:
            return self._sequences.pop(key) or RemoteSequence()

    def put(self, key: str, seq: RemoteSequence) -> None:
        """Store key's sequence; forget least recently used ones beyond the count and memory bounds."""
        with self._lock:
            self._sequences.put(key, seq)

    def drop(self, key: str) -> None:
        with self._lock:
            self._sequences.pop(key)

    # --- the distributions ------------------------------------------------------------------

    def rows_for(
        self, seq: RemoteSequence, ids: list[int], last: int, control: Control | None
    ) -> torch.Tensor:
        """Make seq cover ids; rows (last, vocab) after each of its last `last` ids, each with the
        engine's full top-N (remembered, or fetched)."""
        self.check_ids(ids, last)
        lengths = range(len(ids) - last + 1, len(ids) + 1)
        self.ensure(seq, ids, lengths, True, control)
        return torch.stack([self.row_tensor(seq.rows[m], ids[m] if m < len(ids) else None) for m in lengths])

    def ensure(
        self, seq: RemoteSequence, ids: list[int], lengths: Sequence[int], full: bool, control: Control | None
    ) -> None:
        """seq becomes ids; the distributions after ids[:m] for m in lengths are fetched unless
        remembered (full: with the engine's whole top-N; else knowing the next given token will do)."""
        cut(seq, common_prefix(seq.ids, ids))
        seq.ids = list(ids)
        missing = [m for m in lengths if not self.usable(seq.unpark(m), ids, m, full)]
        if missing:
            self.fetch(seq, ids, missing, control)

    def usable(self, row: Row | None, ids: list[int], m: int, full: bool) -> bool:
        if row is None:
            return False
        if full and row.n < min(self.top_n, self.vocab_size):
            return False
        return m == len(ids) or row.knows(ids[m])

    def fetch(self, seq: RemoteSequence, ids: list[int], missing: list[int], control: Control | None) -> None:
        """The missing distributions: one prompt-scoring request where the engine has it, else one
        one-token request per position (each a prefix-cache hit on the server)."""
        if self.adapter.has_score and (len(missing) > 1 or missing[0] < len(ids)):
            check(control)
            start = min(missing)
            for m, position in enumerate(self.adapter.score(ids, start, self.top_n), start=max(start, 1)):
                seq.rows[m] = Row.of(position)
            return
        given = [m for m in missing if m < len(ids)]
        if len(given) > MAX_SCORED_ONE_BY_ONE:
            raise PlaygroundError(
                "{label} has no prompt scoring: scoring {given} given tokens would take {given} requests (at "
                "most {limit} at once). Give a shorter text.",
                key="remote.error.too_many_scored",
                label=self.adapter.label,
                given=len(given),
                limit=MAX_SCORED_ONE_BY_ONE,
            )
        for m in missing:
            check(control)
            force = ids[m] if m < len(ids) else None
            seq.rows[m] = Row.of(self.query(ids[:m], self.top_n, force, control))

    def query(self, prefix: Sequence[int], n: int, force: int | None, control: Control | None) -> Position:
        """One position; on llama.cpp a long prefix streams its prompt progress (and Stop works)."""
        progress_query = getattr(self.adapter, "progress_query", None)
        if force is not None or progress_query is None or control is None:
            return self.adapter.next_token(prefix, n, force)
        with closing(progress_query(prefix, n)) as events:
            for event in events:
                if isinstance(event, StreamProgress):
                    report(control, "prefill", event.done, event.total)
                    check(control)
                else:
                    return event
        raise PlaygroundError(
            "{label} ended the request without a distribution.",
            key="remote.error.no_distribution",
            label=self.adapter.label,
        )

    def row_tensor(self, row: Row, given: int | None) -> torch.Tensor:
        return row.tensor(self.vocab_size, given)


def cut(seq: RemoteSequence, length: int) -> None:
    """Keep the first `length` ids; the distributions after longer prefixes are parked (by prefix)."""
    for m in sorted(m for m in seq.rows if m > length):
        seq.parked[tuple(seq.ids[:m])] = seq.rows.pop(m)
    while len(seq.parked) > MAX_PARKED:
        seq.parked.popitem(last=False)
    del seq.ids[length:]

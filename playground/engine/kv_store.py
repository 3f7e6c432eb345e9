"""The engine's KV caches between calls: one entry per sequence key, bounded in bytes.

A feature names its sequence with a key (a step session, a chat answer, a view). The entry
keeps the cache, the token ids it covers and the next-token logits after its last few
lengths, so an undo is a crop with no forward. Least recently used entries are evicted once
their bytes exceed the bound; a sequence whose entry was evicted is recomputed from its ids
on its next call. Thread-safe: an entry is taken out while the engine works on it; a key
dropped meanwhile (its tab closed) stays dropped when the entry is checked in. A cache only changes
size while taken out, so its size is measured when put back (engine/lru.py keeps the bound).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.engine.cache import copy_cache, storage_bytes
from playground.engine.lru import LRU
from playground.errors import PlaygroundError

MIB = 1024 * 1024
REMEMBERED_LOGITS = 16  # next-token rows kept per entry: undo this far without a forward


@dataclass
class CacheEntry:
    """One sequence's cache and what it covers."""

    cache: Any = None  # the KV cache for exactly `ids` (None: nothing computed yet)
    ids: list[int] = field(default_factory=list)
    # length n -> next-token logits (vocab,) after ids[:n]; only for n <= len(ids)
    logits: OrderedDict[int, torch.Tensor] = field(default_factory=OrderedDict)

    def remember(self, length: int, row: torch.Tensor) -> None:
        # A row is often a view into the scores of many positions: keep only its own bytes.
        self.logits[length] = row.clone() if _shares_storage(row) else row
        self.logits.move_to_end(length)
        while len(self.logits) > REMEMBERED_LOGITS:
            self.logits.popitem(last=False)

    def copy(self) -> CacheEntry:
        """An independent copy (a fork): the cache copied, the same ids and remembered rows."""
        return CacheEntry(copy_cache(self.cache), list(self.ids), self.logits.copy())

    def forget_after(self, length: int) -> None:
        """Drop what no longer holds once the sequence is cut to `length` tokens."""
        for n in [n for n in self.logits if n > length]:
            del self.logits[n]

    def nbytes(self) -> int:
        """Bytes held: the cache's storage (spare room included) plus the remembered logits."""
        return self.cache_bytes() + self.logits_bytes()

    def cache_bytes(self) -> int:
        return storage_bytes(self.cache)

    def logits_bytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in self.logits.values())


def _shares_storage(row: torch.Tensor) -> bool:
    return row.untyped_storage().nbytes() > row.numel() * row.element_size()


class KVStore:
    """LRU store of CacheEntry by key, bounded in bytes. The entry just stored is never evicted
    by its own put (a single sequence larger than the bound still works, alone)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise PlaygroundError(f"The KV store bound must be > 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._entries: LRU[str, CacheEntry] = LRU(max_size=self.max_bytes, size=CacheEntry.nbytes)
        self._out: dict[str, int] = {}  # key -> how many of its entries are checked out now
        self._drops: dict[str, int] = {}  # key -> drops while checked out (a check-out's ticket)
        self._lock = threading.Lock()

    @property
    def evictions(self) -> int:
        return self._entries.evictions

    def check_out(self, key: str) -> tuple[CacheEntry | None, int]:
        """Take key's entry out to work on it; returns it (None when absent) and the ticket that
        check_in needs."""
        with self._lock:
            self._out[key] = self._out.get(key, 0) + 1
            return self._entries.pop(key), self._drops.get(key, 0)

    def check_in(self, key: str, entry: CacheEntry, ticket: int) -> None:
        """Store a checked-out entry again, unless key was dropped since (its tab closed)."""
        with self._lock:
            dropped = self._drops.get(key, 0) != ticket
            left = self._out.pop(key, 1) - 1
            if left > 0:
                self._out[key] = left
            else:
                self._drops.pop(key, None)
        if not dropped and entry.cache is not None:  # an entry with nothing computed is not kept
            self.put(key, entry)

    def peek(self, key: str) -> CacheEntry | None:
        """The entry for key, left in place (marked most recently used)."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store (or re-measure) an entry, then evict least recently used others over the bound."""
        with self._lock:
            self._entries.put(key, entry)

    def drop(self, key: str) -> None:
        """Forget key's entry, also one checked out now (check_in will not store it again)."""
        with self._lock:
            self._entries.pop(key)
            if key in self._out:
                self._drops[key] = self._drops.get(key, 0) + 1

    def keys(self) -> list[str]:
        with self._lock:
            return self._entries.keys()

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._entries.total

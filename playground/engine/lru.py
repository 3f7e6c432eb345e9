"""A least-recently-used map bounded by a count and by a total size: the one LRU behind the engine's
stores (the KV store's caches, the twins of a model, a remote engine's remembered distributions).

Not thread-safe on its own: each store holds its own lock around it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """Entries by key, least recently used first. `put` evicts from the old end until at most
    `max_items` entries and `max_size` in total remain (each entry's size measured when put, by
    `size`), and never the entry just put: one entry larger than the bound still works, alone."""

    def __init__(
        self,
        max_items: int | None = None,
        max_size: int | None = None,
        size: Callable[[V], int] | None = None,
    ) -> None:
        self.max_items, self.max_size = max_items, max_size
        self._size = size or (lambda _value: 0)
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.total = 0  # sizes of the entries held
        self.evictions = 0

    def get(self, key: K) -> V | None:
        """The value for key, marked most recently used (None: absent)."""
        item = self._entries.get(key)
        if item is None:
            return None
        self._entries.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Store (or replace) key's value as the most recent; returns what was evicted, oldest first."""
        self.pop(key)
        size = self._size(value)
        self._entries[key] = (value, size)
        self.total += size
        evicted = []
        while len(self._entries) > 1 and self._over():
            old, (dropped, dropped_size) = self._entries.popitem(last=False)
            self.total -= dropped_size
            self.evictions += 1
            evicted.append((old, dropped))
        return evicted

    def pop(self, key: K) -> V | None:
        """Remove and return key's value (None: absent)."""
        item = self._entries.pop(key, None)
        if item is None:
            return None
        self.total -= item[1]
        return item[0]

    def _over(self) -> bool:
        too_many = self.max_items is not None and len(self._entries) > self.max_items
        return too_many or (self.max_size is not None and self.total > self.max_size)

    def keys(self) -> list[K]:
        return list(self._entries)

    def values(self) -> Iterator[V]:
        return (value for value, _ in self._entries.values())

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

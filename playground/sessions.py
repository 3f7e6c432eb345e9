"""Per-browser-tab objects by id: a tab's gr.State holds only the id, the object lives here.

LRU by count; an object dropped from the store is released (its KV caches freed in the
engine). Thread-safe.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar

from playground.errors import PlaygroundError


class Releasable(Protocol):
    def release(self) -> None: ...


T = TypeVar("T", bound=Releasable)


class SessionStore(Generic[T]):
    """Objects by random id, least recently used released beyond max_sessions."""

    def __init__(
        self, max_sessions: int = 256, what: str = "session", hint: str = "press Start first"
    ) -> None:
        self.max_sessions = max_sessions
        self.what, self.hint = what, hint
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, item: T) -> str:
        """Register under a fresh random id and return the id."""
        item_id = uuid.uuid4().hex
        self.put(item_id, item)
        return item_id

    def put(self, item_id: str, item: T) -> None:
        """Put an object under an id (replacing and releasing any other object there)."""
        dropped = []
        with self._lock:
            old = self._items.get(item_id)
            self._items[item_id] = item
            self._items.move_to_end(item_id)
            if old is not None and old is not item:
                dropped.append(old)
            while len(self._items) > self.max_sessions:
                dropped.append(self._items.popitem(last=False)[1])
        for gone in dropped:
            gone.release()

    def get(self, item_id: str | None) -> T:
        """The object, or a clear error when it was never made or has expired."""
        with self._lock:
            item = self._items.get(item_id or "")
            if item is None:
                raise PlaygroundError(
                    "No {what} yet (or it expired): {hint}.",
                    key="sessions.error.expired",
                    what=self.what,
                    hint=self.hint,
                )
            self._items.move_to_end(item_id)
            return item

    def find(self, item_id: str | None) -> T | None:
        with self._lock:
            return self._items.get(item_id or "")

    def release(self, item_id: str | None) -> None:
        """Drop and release one object (a closed browser tab)."""
        with self._lock:
            item = self._items.pop(item_id or "", None)
        if item is not None:
            item.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

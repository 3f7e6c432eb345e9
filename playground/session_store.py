"""Engine-side stores for step-by-step sessions: KV caches under a memory bound, sessions by id.

Gradio keeps only a session id per browser tab; the heavy parts live here:

- `KVStore` holds one `CacheEntry` (a DynamicCache, the ids it covers and a few next-token
  logits) per session key, evicting the least recently used entries once their bytes exceed
  a bound. A session whose entry was evicted rebuilds it from its ids on the next step.
- `SessionStore` maps session ids to `StepSession` objects (small: ids and a tree), LRU by count.

Both are thread-safe: the store lock only guards the dictionaries; each session serializes
its own work with its own lock, and forward passes with the model's lock.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from playground.errors import PlaygroundError
from playground.settings import load_settings

if TYPE_CHECKING:
    from playground.stepper import StepSession

MIB = 1024 * 1024


@dataclass
class CacheEntry:
    """What one session keeps between steps."""

    cache: Any  # a transformers DynamicCache with keys/values for exactly `ids`
    ids: list[int] = field(default_factory=list)  # tokens (prompt + path) the cache covers
    # node id -> next-token logits (vocab,) float32 after that node; most recent last.
    logits: OrderedDict[int, torch.Tensor] = field(default_factory=OrderedDict)
    max_logits: int = 16  # how many positions' logits to remember (undo without a forward)

    def remember_logits(self, node_id: int, logits: torch.Tensor) -> None:
        """Keep the logits after a node; the oldest beyond max_logits are dropped (the root's stay)."""
        self.logits[node_id] = logits
        self.logits.move_to_end(node_id)
        while len(self.logits) > self.max_logits:
            oldest = next(key for key in self.logits if key != 0)
            del self.logits[oldest]

    def nbytes(self) -> int:
        """Bytes held: every cache tensor's storage plus the remembered logits."""
        return cache_nbytes(self.cache) + sum(t.untyped_storage().nbytes() for t in self.logits.values())


def cache_nbytes(cache: Any) -> int:
    """Bytes of the storages behind a DynamicCache's keys and values (0 for None)."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", []):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.untyped_storage().nbytes()
    return total


class KVStore:
    """LRU store of CacheEntry by session key, bounded in bytes.

    The entry just stored is never evicted by its own put (a single session larger than the
    bound still works, it just evicts everyone else).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise PlaygroundError(f"The KV store bound must be > 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.evictions = 0
        self._entries: OrderedDict[str, tuple[CacheEntry, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> CacheEntry | None:
        """The entry for key (marked most recently used), or None if absent or evicted."""
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                return None
            self._entries.move_to_end(key)
            return item[0]

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store (or re-measure) an entry, then evict least recently used others over the bound."""
        size = entry.nbytes()
        with self._lock:
            self._entries[key] = (entry, size)
            self._entries.move_to_end(key)
            while self._total() > self.max_bytes and len(self._entries) > 1:
                oldest = next(iter(self._entries))
                del self._entries[oldest]
                self.evictions += 1

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total()

    def _total(self) -> int:
        return sum(size for _, size in self._entries.values())


_DEFAULT_KV_STORE: KVStore | None = None
_DEFAULT_LOCK = threading.Lock()


def default_kv_store() -> KVStore:
    """The process-wide KV store, bounded by settings.kv_store_mib (PLAYGROUND_KV_STORE_MIB)."""
    global _DEFAULT_KV_STORE
    with _DEFAULT_LOCK:
        if _DEFAULT_KV_STORE is None:
            _DEFAULT_KV_STORE = KVStore(load_settings().kv_store_mib * MIB)
        return _DEFAULT_KV_STORE


class SessionStore:
    """Step sessions by id (the only thing a browser tab keeps), least recently used dropped
    beyond max_sessions."""

    def __init__(self, max_sessions: int = 256) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, StepSession] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session: StepSession) -> str:
        """Register a session under a fresh random id and return the id."""
        session_id = uuid.uuid4().hex
        with self._lock:
            self._sessions[session_id] = session
            while len(self._sessions) > self.max_sessions:
                _, dropped = self._sessions.popitem(last=False)
                dropped.release()
        return session_id

    def get(self, session_id: str | None) -> StepSession:
        """The session, or a clear error when it was never started or has expired."""
        with self._lock:
            session = self._sessions.get(session_id or "")
            if session is None:
                raise PlaygroundError("No step-by-step session yet (or it expired): press Start first.")
            self._sessions.move_to_end(session_id)
            return session

    def replace(self, session_id: str, session: StepSession) -> None:
        """Put a new session under an existing id (restart in the same tab)."""
        with self._lock:
            old = self._sessions.get(session_id)
            self._sessions[session_id] = session
        if old is not None and old is not session:
            old.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

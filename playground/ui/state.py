"""What each browser tab's views show, kept on the server by the UI (never by the engine side).

A tab's engine objects (chat, step session, beam tree, their KV caches) are its `Workspace`
(playground/workspace.py). What its views drew (the figures and tables of an Under the hood run,
kept so "Save trace" can record them) and how they are laid out is UI state: it lives here,
keyed by the same session id, bounded, and released when the tab closes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from playground.errors import PlaygroundError
from playground.sessions import SessionStore

if TYPE_CHECKING:
    from playground.plots.beam import PlotFrame


@dataclass
class BeamView:
    """How the Beam tab's tree is drawn for this tab (its search itself is in the Workspace)."""

    unfolded: set[int] = field(default_factory=set)  # nodes whose pruned candidates show one by one
    window: tuple[float, float, float, float] | None = None  # the zoomed view; None: fit the tree
    frame: PlotFrame | None = None  # the plot's size in the browser (static/beam.js reports it)


class TabState:
    """One browser tab's view state."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.hood: dict[str, dict[str, Any]] = {}  # lesson view key -> {component name: value shown}
        self.beam = BeamView()

    def remember(self, view: str, views: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
        """Keep what a view shows now; fresh: a new run replaces the last, else it updates it."""
        with self.lock:
            shown = {} if fresh else self.hood.get(view, {})
            self.hood[view] = {**shown, **views}
        return views

    def shown(self, view: str) -> dict[str, Any]:
        with self.lock:
            return dict(self.hood.get(view, {}))

    def release(self) -> None:
        with self.lock:
            self.hood, self.beam = {}, BeamView()


class TabStates:
    """TabState by session id, made on first use; least recently used released beyond a bound."""

    def __init__(self, max_tabs: int = 512) -> None:
        if max_tabs < 1:
            raise PlaygroundError(f"The tab bound must be at least 1 tab, got {max_tabs}")
        self._store: SessionStore[TabState] = SessionStore(max_tabs, what="tab state")
        self._lock = threading.Lock()

    def get(self, session_id: str | None) -> TabState:
        key = session_id or "anonymous"
        with self._lock:
            if self._store.find(key) is None:
                self._store.put(key, TabState())
            return self._store.get(key)

    def release(self, session_id: str | None) -> None:
        self._store.release(session_id or "anonymous")

    def __len__(self) -> int:
        return len(self._store)

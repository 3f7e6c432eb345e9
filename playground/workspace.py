"""What one browser tab keeps on the server: its model, its chat, its step session, its last beam search.

The tab itself holds nothing but Gradio's session id; its objects live here, and their KV
caches in the engine. When the tab closes (or the store drops the least recently used tab),
`release` frees the caches. Moves between tabs (a beam node or a chat token opened in Step by
step, a step path continued as chat) hand over records through the workspace, never ids to
replay.

Each tab uses one model of the app's ModelRegistry (the app's own until the tab picks another:
`Workspaces.use`): its workspace is made on that model's engine and holds it in the registry while
the tab lives, so the registry's bound never unloads a model a tab uses. Every handler reads the
engine from the tab's workspace (`workspace.engine`), so each tab's chat, step session, beam search,
KV measurement and lessons run on its own model, with that model's own batch and KV store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from playground.beam import BeamTree
from playground.chat import ChatSession
from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.models import ModelRegistry, model_name
from playground.sessions import SessionStore
from playground.step import StepSession

Stopped = Literal["running", "waiting", ""]  # what a Stop found (Workspace.stop)


class Workspace:
    """One browser tab's objects."""

    def __init__(self, engine: Engine, model: str = "", on_release: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.model = model or engine.name  # the name the app's ModelRegistry holds it under
        self._on_release = on_release  # lets go of the model in the registry (once)
        self.chat = ChatSession(engine)
        self.step: StepSession | None = None
        self.step_settings = SamplingSettings()  # what the Step tab's settings widgets show
        self.step_view: tuple[int, str] = (10, "")  # candidates in its chart, stage shown ("": the last)
        self.beam: BeamTree | None = None
        self.beam_node: int | None = None  # the node chosen in the Beam tab
        self.compare: dict[str, dict] = {}  # Compare view -> the values of its last run (its link)
        self.running: dict[str, Control] = {}  # view -> the control of its running request
        # view -> the last ticket handed out, the last one that began, the last one Stop dropped
        self.tickets: dict[str, int] = {}
        self.began: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.lock = threading.RLock()  # one change at a time per tab

    def use_step(self, session: StepSession) -> StepSession:
        """Make session this tab's step session (the previous one's cache is freed)."""
        with self.lock:
            old, self.step = self.step, session
        if old is not None and old is not session:
            old.release()
        return session

    def ticket(self, view: str) -> int:
        """A number for a request of `view` about to wait in the model queue: a Stop before it
        begins drops it (its run starts cancelled), without cancelling the event in Gradio."""
        with self.lock:
            self.tickets[view] = self.tickets.get(view, 0) + 1
            return self.tickets[view]

    def begin(self, view: str, ticket: int | None) -> bool:
        """A request of `view` with this ticket begins (None: one without, an API call's): False
        when a Stop dropped it while it waited."""
        if ticket is None:
            return True
        with self.lock:
            self.began[view] = max(ticket, self.began.get(view, 0))
            return ticket > self.dropped.get(view, 0)

    @contextmanager
    def run(self, view: str, ticket: int | None = None) -> Iterator[Control]:
        """A fresh Control for this tab's request of `view` while it runs: `stop(view)` cancels it
        (the model stops at its next step); forgotten when the request ends. A ticket that a Stop
        dropped while it waited: the control is cancelled from the start."""
        control = Control()
        with self.lock:
            if not self.begin(view, ticket):
                control.cancel()
            self.running[view] = control
        try:
            yield control
        finally:
            with self.lock:
                if self.running.get(view) is control:
                    del self.running[view]

    def stop(self, view: str) -> Stopped:
        """Cancel this tab's running request of `view`, and drop its tickets still waiting: which of
        them there was ("running" before "waiting"; "" for none)."""
        with self.lock:
            control = self.running.pop(view, None)
            last = self.tickets.get(view, 0)
            waiting = last > max(self.began.get(view, 0), self.dropped.get(view, 0))
            self.dropped[view] = last
        if control is not None:
            control.cancel()
            return "running"
        return "waiting" if waiting else ""

    def release(self) -> None:
        """The tab closed (or was evicted): stop its running work and free its caches."""
        with self.lock:
            running, self.running = list(self.running.values()), {}
        for control in running:
            control.cancel()
        self.chat.release()
        if self.step is not None:
            self.step.release()
        on_release, self._on_release = self._on_release, None
        if on_release is not None:
            on_release()


class Workspaces:
    """Workspaces by session id, created on first use; least recently used released beyond a bound.

    registry: the app's models (default: one holding `engine` alone); a new tab uses `engine`."""

    def __init__(self, engine: Engine, max_tabs: int = 512, registry: ModelRegistry | None = None) -> None:
        if max_tabs < 1:
            raise PlaygroundError(
                "The workspace bound must be at least 1 tab, got {value}",
                key="workspace.error.bound",
                value=max_tabs,
            )
        self.engine = engine
        self.max_tabs = max_tabs
        self.registry = registry if registry is not None else ModelRegistry()
        self.model = self.registry.key_of(engine) or self.registry.add(model_name(engine), engine)
        self._store: SessionStore[Workspace] = SessionStore(max_tabs, what="workspace")
        self._lock = threading.Lock()

    def get(self, session_id: str | None) -> Workspace:
        key = session_id or "anonymous"
        with self._lock:
            workspace = self._store.find(key)
            if workspace is None:
                workspace = self._new(self.model)
                self._store.put(key, workspace)
            return self._store.get(key)

    def use(self, session_id: str | None, model: str) -> Workspace:
        """From now on this tab uses `model` (a name the registry holds: load it first). Another model
        than the tab's: a fresh workspace on it, and the old one released (its chat, step session and
        caches were the old model's; a request of it still running is stopped)."""
        key = session_id or "anonymous"
        with self._lock:
            workspace = self._store.find(key)
            if workspace is not None and workspace.model == model:
                return workspace
            fresh = self._new(model)
            self._store.put(key, fresh)  # releases the old one
            return fresh

    def _new(self, model: str) -> Workspace:
        engine = self.registry.hold(model)
        return Workspace(engine, model, on_release=lambda: self.registry.let_go(model))

    def release(self, session_id: str | None) -> None:
        """The tab closed: free everything it held."""
        self._store.release(session_id or "anonymous")

    def __len__(self) -> int:
        return len(self._store)

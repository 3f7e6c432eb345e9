"""A crowd on one app: what a waiting tab sees, and what a closed tab gives back.

- Queue position: every model event shows Gradio's "queue: 3/7 | 1.2/9.5s" (place, seconds
  waited / estimated) in the status line of the tab it was started from (`connect(..., status=)`).
  Gradio draws it as an overlay the size of that component, which a one-line status Markdown
  clips to nothing; components marked with QUEUE_STATUS_CLASS get it as a line of text instead
  (static/crowd.css).
- An estimate from the first wait: Gradio estimates only once every running event's function has
  a measured duration; `seed_queue_estimates` gives each model function a first guess, which its
  first real run replaces.
- A closed tab (its heartbeat connection ends): Gradio drops its queued events itself; our unload
  handler releases the tab's Workspace (its KV caches) and Gradio's per-tab state.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from typing import Any

import gradio as gr

from playground.ui.state import TabStates
from playground.workspace import Workspaces

log = logging.getLogger(__name__)

QUEUE_STATUS_CLASS = "queue-status"


def mark_queue_status(component: Any) -> None:
    """Show the queue position and estimate of the events that report to component as a line of text."""
    classes = component.elem_classes or []
    classes = [classes] if isinstance(classes, str) else list(classes)
    if QUEUE_STATUS_CLASS not in classes:
        component.elem_classes = [*classes, QUEUE_STATUS_CLASS]


def seed_queue_estimates(demo: gr.Blocks, concurrency_id: str, seconds: float) -> int:
    """Give every function of the queue `concurrency_id` that has not run yet an assumed duration, so
    that waiting users get an estimate from the first wait on. Returns how many were seeded.

    Uses Gradio's queue internals (`Queue.process_time_per_fn`); tests/test_crowd_browser.py fails
    if a Gradio upgrade stops showing the estimate."""
    from gradio.queueing import ProcessTime

    times = getattr(getattr(demo, "_queue", None), "process_time_per_fn", None)
    if times is None or seconds <= 0:
        log.warning("Gradio's queue has no per-function durations: no first estimate for waiting users")
        return 0
    seeded = 0
    for fn in demo.fns.values():
        if fn.concurrency_id == concurrency_id and fn not in times:
            prior = ProcessTime()
            prior.avg_time = float(seconds)  # count stays 0: the first measured run replaces it
            times[fn] = prior
            seeded += 1
    return seeded


def release_closed_tabs(demo: gr.Blocks, workspaces: Workspaces, states: TabStates | None = None) -> None:
    """When a browser tab closes, free what it held: its Workspace (chat, step session, beam tree and
    their KV caches), its view state and Gradio's per-tab copy of the component settings."""

    def release_tab(request: gr.Request) -> None:
        workspaces.release(request.session_hash)
        if states is not None:
            states.release(request.session_hash)
        forget_gradio_state(demo, request.session_hash)
        return_freed_memory()

    demo.unload(release_tab)


def return_freed_memory() -> None:
    """Give the C heap's freed pages back to the system (glibc keeps them otherwise, so a server's
    memory only grows as tabs come and go). A no-op where malloc_trim does not exist."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def forget_gradio_state(demo: gr.Blocks, session_hash: str | None) -> None:
    """Drop Gradio's state of a closed tab now (a copy of every component's config and last value);
    Gradio itself keeps it for an hour, up to `state_session_capacity` tabs."""
    holder = getattr(demo, "state_holder", None)
    sessions = getattr(holder, "session_data", None)
    if sessions is None or session_hash is None:
        return
    holder.delete_state(session_hash)
    with holder.lock:
        sessions.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)

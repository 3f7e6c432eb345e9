"""The toolbar's model picker: which model this browser tab uses.

It lists what the app's ModelRegistry offers (the loaded models, the embedded ones, the Hub models
in the local cache; any Hub id or local path may be typed, a Hub id only when the Hub is online).
Picking one loads it if needed, showing its memory estimate first and then each loading step with
the seconds so far (Gemma 3 270M: seconds from its cache, about 80 s converting it the first time);
a refusal says why (unknown name, won't fit, too many models) and the tab keeps its model. Once
loaded, the tab's Workspace moves to it (workspace.py): Chat, Step by step, Beam search, the KV
tab's measurement and the lessons run on it, with its own batch and KV caches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.models import LoadEvent, ModelEntry, ModelRegistry, model_key
from playground.ui.i18n import i18n, localize, session_lang, t
from playground.workspace import Workspace, Workspaces

TICK_S = 1.0  # the status line's seconds count while a load runs
KIND_KEYS = {
    "loaded": "picker.kind.loaded",
    "remote": "picker.kind.remote",
    "embedded": "picker.kind.embedded",
    "cached": "picker.kind.cached",
}


def choice_label(entry: ModelEntry, lang: str) -> str:
    """How a model reads in a list: its name and whether it is loaded ('gemma-3-270m · not loaded,
    238 MB download')."""
    if entry.kind == "embedded" and not entry.loaded:
        why = t("picker.not_installed", lang) if not entry.usable else entry.note.split(",")[0]
        return f"{entry.name} · {t('picker.kind.embedded', lang, note=why)}"
    return f"{entry.name} · {t(KIND_KEYS.get(entry.kind, 'picker.kind.loaded'), lang, note='')}"


def model_choices(registry: ModelRegistry, lang: str, current: str = "") -> list[tuple[str, str]]:
    """(label, name) for every model the registry offers, `current` among them (a name typed earlier)."""
    choices = [(choice_label(entry, lang), entry.name) for entry in registry.available()]
    if current and current not in {name for _, name in choices}:
        choices.append((current, current))
    return choices


def load_lines(registry: ModelRegistry, name: str | None, quantize: str | None = None) -> Iterator[Any]:
    """registry.iter_load(name) run in a thread: each LoadEvent as it comes, and every TICK_S a float
    (the seconds so far), so a long load (no event for a minute) still shows that it runs. Raises
    what the load raised (PlaygroundError with the reason)."""
    events: queue.Queue[Any] = queue.Queue()
    done = object()

    def work() -> None:
        try:
            for event in registry.iter_load(name, quantize):
                events.put(event)
            events.put(done)
        except BaseException as exc:  # handed to the caller
            events.put(exc)

    started = time.perf_counter()
    threading.Thread(target=work, name=f"load {name}", daemon=True).start()
    while True:
        try:
            item = events.get(timeout=TICK_S)
        except queue.Empty:
            yield time.perf_counter() - started
            continue
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


class LoadStatus:
    """The status line of a load: its estimate first, then its latest step and the seconds so far."""

    def __init__(self, name: str, lang: str) -> None:
        self.name, self.lang = name, lang
        self.estimate = ""
        self.step = ""
        self.seconds = 0.0
        self.engine: Any = None

    def add(self, item: LoadEvent | float) -> None:
        if isinstance(item, float):
            self.seconds = item
            return
        line = localize(item.message, self.lang)
        if item.estimate is not None and not self.estimate:
            self.estimate = line
        else:
            self.step = line
        self.engine = item.engine or self.engine

    def markdown(self) -> str:
        head = t("picker.loading", self.lang, model=self.name, seconds=self.seconds)
        return "  \n".join(line for line in (head, self.estimate, self.step) if line)


class ModelPicker:
    """The picker's handlers (plain methods: tests call them without a server)."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces

    @property
    def registry(self) -> ModelRegistry:
        return self.workspaces.registry

    def dropdown(self) -> gr.Dropdown:
        """The toolbar's list (the page load fills it in the page's language): a name may be typed."""
        first = self.workspaces.model
        return gr.Dropdown(
            [(first, first)],
            value=first,
            label=i18n("picker.label"),
            show_label=False,
            container=False,
            allow_custom_value=True,
            min_width=220,
            elem_id="model-picker",
        )

    def model_choices(self, request: gr.Request = None) -> dict[str, Any]:
        """The list, in the page's language, with this tab's model chosen (page load, language)."""
        ws = self._workspace(request)
        choices = model_choices(self.registry, session_lang(request), ws.model)
        return {"model": gr.Dropdown(choices=choices, value=ws.model)}

    def model_pick(self, model: str, request: gr.Request = None) -> Iterator[dict[str, Any]]:
        """Use `model` in this tab (loaded first when needed: its memory estimate, then each loading
        step). A refusal leaves the tab on its model and says why."""
        lang, ws = session_lang(request), self._workspace(request)
        try:
            key = model_key(model)
            if key == ws.model:
                yield self._done(ws, lang, t("picker.same", lang, model=key))
                return
            status = LoadStatus(key, lang)
            for item in load_lines(self.registry, model):
                status.add(item)
                if status.estimate:  # a load (a loaded model is used at once: nothing to show)
                    yield {"model_status": status.markdown()}
            ws = self.workspaces.use(_session(request), key)
        except PlaygroundError as exc:
            why = localize(exc.message, lang)
            yield {**self._done(ws, lang, t("picker.refused", lang, model=model or "", why=why))}
            raise
        yield self._done(ws, lang, t("picker.uses", lang, model=key, estimate=status.estimate))

    def _done(self, ws: Workspace, lang: str, line: str) -> dict[str, Any]:
        """The list with the tab's model chosen, and the status line."""
        choices = model_choices(self.registry, lang, ws.model)
        return {"model": gr.Dropdown(choices=choices, value=ws.model), "model_status": line}

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(_session(request))


def _session(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)

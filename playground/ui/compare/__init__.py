"""The Compare tab: two sides, each a model or the same model with other settings, on four views.

- Chat (chat.py): one question answered by both, streaming side by side, every token with its
  numbers, the first place where the answers part marked.
- Cross-scoring (scoring.py): each side's text scored by the other model, aligned by characters.
- Step by step (step.py): one prefix, both models' next-token candidates side by side.
- Tokens (tokens.py): one text under both tokenizers, drawn as the Tokens lesson draws it.

The sides (sides.py) are shared by the four views; each view is an API endpoint (/compare_chat,
/compare_score, /compare_step, /compare_tokens) and "Copy link" reopens the last comparison run.
The tab is one place for every two-model view, so the lessons stay one model each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.errors import Cancelled, PlaygroundError
from playground.settings import Settings
from playground.ui.common import as_whole, connect, connect_after_ticket
from playground.ui.compare import chat, scoring, step, tokens
from playground.ui.compare.sides import (
    SIDES,
    SideEngines,
    SidesInput,
    build_remote,
    build_sides,
    read_sides,
    remote_allowed,
)
from playground.ui.i18n import i18n, localize, session_lang, t
from playground.ui.links import link_to
from playground.ui.model_picker import model_choices
from playground.workspace import Workspace, Workspaces

VIEWS = ("chat", "score", "step", "tokens")
# What the page's language (and a model connected) changes in this tab: compare_texts
TEXT_OUTPUTS = ["model_a", "model_b", "score_a_table", "score_b_table", "step_a_table", "step_b_table"]
VIEW_TITLES = {
    "chat": "compare.view.chat",
    "score": "compare.view.score",
    "step": "compare.view.step",
    "tokens": "compare.view.tokens",
}


@dataclass
class ViewInputs:
    """Every view's own controls (a shared link sets them; the sides are SidesInput)."""

    compare_view: str
    compare_message: str
    compare_system: str
    compare_max_new_tokens: float
    score_context: str
    score_chat: bool
    score_a: str
    score_b: str
    step_prefix: str
    step_chat: bool
    step_k: float
    tokens_text: str


SIDE_STATUS = [f"status_{x}" for x in SIDES]
MODEL_LISTS = [f"model_{x}" for x in SIDES]
SCORE_INPUTS = ["score_context", "score_chat", "score_a", "score_b"]
# What a shared link may set on the page: every control, the view chosen, and what its run shows.
LINK_OUTPUTS = [
    *(f.name for f in dataclasses.fields(SidesInput)),
    *(f.name for f in dataclasses.fields(ViewInputs)),
    "compare_views",
    *chat.OUTPUTS,
    *scoring.OUTPUTS,
    *step.OUTPUTS,
    *tokens.OUTPUTS,
    *SIDE_STATUS,
]


class CompareHandlers:
    """The tab's handlers (plain methods: tests call them without a server)."""

    def __init__(self, workspaces: Workspaces, settings: Settings) -> None:
        self.workspaces, self.settings = workspaces, settings

    # --- the views ---------------------------------------------------------------------------------

    def compare_chat(
        self,
        compare_message: str,
        compare_system: str,
        compare_max_new_tokens: float,
        sides: SidesInput,
        request: gr.Request = None,
        compare_ticket: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Both sides answer the question at once, streaming; then Cross-scoring holds the question and
        both answers. compare_ticket: the Send button's (Stop drops a request still waiting)."""
        ws, lang = self._workspace(request), session_lang(request)
        message = chat.check_message(compare_message)
        max_new = as_whole(compare_max_new_tokens, "max new tokens")
        choices = read_sides(sides)
        self._remember(ws, "chat", sides, chat.link_values(message, compare_system or "", max_new))
        engines = SideEngines(self.workspaces.registry, choices, lang)
        limit = self.settings.max_new_tokens_limit
        shown: dict[str, Any] = {}
        with ws.run("compare", compare_ticket) as control:
            try:
                if control.cancelled:  # Stop while it waited in the queue
                    raise Cancelled()
                run = chat.run(engines, message, compare_system or "", max_new, limit, control)
                texts = yield from _keeping(run, shown)
            except Cancelled:
                yield {"compare_parting": t("compare.stopped", lang)}
                return
            finally:
                engines.close()
        score = {"score_context": message, "score_chat": True, "score_a": texts[0], "score_b": texts[1]}
        lists = self._lists(lang, [c.model for c in choices])  # a side loaded: the lists say so now
        yield {**shown, **score, **lists}  # the last value holds every view (what an API call returns)

    def compare_ticket(self, request: gr.Request = None) -> dict[str, Any]:
        """Before a comparison joins the model queue: a ticket Stop can drop."""
        return {"compare_ticket": self._workspace(request).ticket("compare")}

    def compare_stop(self, request: gr.Request = None) -> dict[str, Any]:
        """Stop this tab's comparison (running: both sides stop within a token; waiting: dropped)."""
        stopped = self._workspace(request).stop("compare")
        return {"compare_parting": t("compare.stopped", session_lang(request))} if stopped else {}

    def compare_score(
        self,
        score_context: str,
        score_chat: bool,
        score_a: str,
        score_b: str,
        compare_system: str,
        sides: SidesInput,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Each text scored by both models after the context (a chat: through each one's template)."""
        ws, lang = self._workspace(request), session_lang(request)
        texts = scoring.check_texts([score_a, score_b])
        choices = read_sides(sides)
        self._remember(ws, "score", sides, scoring.link_values(score_context or "", bool(score_chat), texts))
        context = scoring.context_of(score_context or "", bool(score_chat), compare_system or "")
        yield from self._run(scoring.run, choices, lang, context, texts)

    def compare_step(
        self, step_prefix: str, step_chat: bool, step_k: float, sides: SidesInput, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """Both models' most likely next tokens after one prefix."""
        ws, lang = self._workspace(request), session_lang(request)
        k, choices = step.check_k(step_k), read_sides(sides)
        self._remember(ws, "step", sides, step.link_values(step_prefix or "", bool(step_chat)))
        yield from self._run(step.run, choices, lang, step_prefix or "", bool(step_chat), k)

    def compare_tokens(
        self, tokens_text: str, sides: SidesInput, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """One text under both tokenizers."""
        ws, lang = self._workspace(request), session_lang(request)
        choices = read_sides(sides)
        self._remember(ws, "tokens", sides, tokens.link_values(tokens_text or ""))
        yield from self._run(tokens.run, choices, lang, tokens_text or "")

    def _run(self, view: Any, choices: list, lang: str, *args: Any) -> Iterator[dict[str, Any]]:
        """A view's run with both sides' engines, let go at its end."""
        engines, shown = SideEngines(self.workspaces.registry, choices, lang), {}
        try:
            yield from _keeping(view(engines, *args), shown)
        finally:
            engines.close()
        lists = self._lists(lang, [c.model for c in choices])  # a side loaded: the lists say so now
        yield {**shown, **lists}  # the last value holds every view (what an API call returns)

    # --- a server as a side, the lists, links -------------------------------------------------------------

    def compare_connect(
        self, remote_kind: str, remote_url: str, remote_name: str, request: gr.Request = None
    ) -> dict[str, Any]:
        """Connect a running llama-server, vLLM or SGLang as a model either side can pick."""
        lang = session_lang(request)
        if not remote_allowed():
            raise PlaygroundError("Connecting a server is off on a Space.", key="compare.error.remote_off")
        url = str(remote_url or "").strip()
        name = str(remote_name or "").strip() or f"{remote_kind} {url}"
        try:
            engine = self.workspaces.registry.connect(name, url, remote_kind)
        except PlaygroundError as exc:
            return {"remote_status": t("compare.remote.failed", lang, why=localize(exc.message, lang))}
        line = t("compare.remote.connected", lang, name=name, model=engine.name, kind=engine.kind)
        return {"remote_status": line, **self._lists(lang)}

    def compare_texts(self, model_a: str, model_b: str, request: gr.Request = None) -> dict[str, Any]:
        """The model lists (what is loaded now) and the tables' headers in the page's language."""
        lang = session_lang(request)
        tables = {f"{view}_{x}_table": view for view in ("score", "step") for x in SIDES}
        heads = {"score": scoring.headers(lang), "step": step.headers(lang)}
        return {
            **self._lists(lang, [model_a, model_b]),
            **{name: gr.Dataframe(headers=heads[view]) for name, view in tables.items()},
        }

    def _lists(self, lang: str, current: list[str] | None = None) -> dict[str, Any]:
        shown = current or [None, None]
        return {
            f"model_{x}": gr.Dropdown(choices=model_choices(self.workspaces.registry, lang, now or ""))
            for x, now in zip(SIDES, shown, strict=True)
        }

    def compare_from_link(
        self, sides: SidesInput, inputs: ViewInputs, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """Page load: a shared link to a comparison: its values on the controls, its view chosen and run."""
        link = link_to("compare", request)
        if link is None:
            yield {}
            return
        shown = link.over({**dataclasses.asdict(sides), **dataclasses.asdict(inputs)})
        view = shown["compare_view"] or "chat"
        yield {**shown, "compare_views": gr.Tabs(selected=f"compare-{view}")}
        linked_sides = SidesInput(**{f.name: shown[f.name] for f in dataclasses.fields(SidesInput)})
        if view == "chat":
            yield from self.compare_chat(
                shown["compare_message"],
                shown["compare_system"],
                shown["compare_max_new_tokens"],
                linked_sides,
                request,
            )
        elif view == "score":
            texts = (shown["score_context"], shown["score_chat"], shown["score_a"], shown["score_b"])
            yield from self.compare_score(*texts, shown["compare_system"], linked_sides, request)
        elif view == "step":
            yield from self.compare_step(
                shown["step_prefix"], shown["step_chat"], shown["step_k"], linked_sides, request
            )
        else:
            yield from self.compare_tokens(shown["tokens_text"], linked_sides, request)

    def link_values(self, request: gr.Request = None) -> dict[str, Any]:
        """What a link to this tab's last comparison carries: the view, both sides, the view's inputs."""
        return dict(self._workspace(request).compare.get("link", {}))

    def _remember(self, ws: Workspace, view: str, sides: SidesInput, values: dict[str, Any]) -> None:
        quantized = {f"quantize_{x}": getattr(sides, f"quantize_{x}") or "none" for x in SIDES}
        ws.compare["link"] = {"compare_view": view, **dataclasses.asdict(sides), **quantized, **values}

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(getattr(request, "session_hash", None))


def _keeping(
    views: Generator[dict[str, Any], None, Any], shown: dict[str, Any]
) -> Generator[dict, None, Any]:
    """Yield each of a run's views, keeping the latest value of each in `shown`; returns the run's
    return value."""
    try:
        while True:
            try:
                update = next(views)
            except StopIteration as stop:
                return stop.value
            shown.update(update)
            yield update
    finally:
        views.close()  # the listener left: the run's own clean-up (both sides stop) happens now


# --- layout ---------------------------------------------------------------------------------------


def build_compare_tab(workspaces: Workspaces, settings: Settings) -> tuple[dict[str, Any], CompareHandlers]:
    """The tab (call inside a gr.Tab): the sides, then one sub-tab per view. Returns its components by
    name and its handlers."""
    h = CompareHandlers(workspaces, settings)
    w: dict[str, Any] = {}
    gr.Markdown(i18n("compare.intro"), elem_classes=["stage-hide"])
    choices = model_choices(workspaces.registry, "en", workspaces.model)
    build_sides(w, choices, workspaces.model)
    build_remote(w)
    w["compare_view"] = gr.Textbox(visible=False)
    layouts = {
        "chat": lambda w: chat.layout(w, settings.max_new_tokens_limit),
        "score": scoring.layout,
        "step": step.layout,
        "tokens": tokens.layout,
    }
    with gr.Tabs(elem_id="compare-views") as w["compare_views"]:
        for view in VIEWS:
            with gr.Tab(i18n(VIEW_TITLES[view]), id=f"compare-{view}", elem_id=f"compare-tab-{view}"):
                layouts[view](w)
    _wire(h, w)
    return w, h


def _wire(h: CompareHandlers, w: dict[str, Any]) -> None:
    """Send streams both answers (Stop ends both); each other view is one model event."""
    sides = SIDE_STATUS
    connect_after_ticket(
        [w["compare_send"].click, w["compare_message"].submit],
        h.compare_ticket,
        ["compare_ticket"],
        h.compare_chat,
        w,
        [*chat.OUTPUTS, *sides, *SCORE_INPUTS, *MODEL_LISTS],
        api_name="compare_chat",
        status="compare_parting",
    )
    connect(
        w["compare_stop"].click, h.compare_stop, w, ["compare_parting"], api_name="compare_stop", model=False
    )
    runs = [
        ("score_run", h.compare_score, scoring.OUTPUTS, "compare_score"),
        ("step_run", h.compare_step, step.OUTPUTS, "compare_step"),
        ("tokens_run", h.compare_tokens, tokens.OUTPUTS, "compare_tokens"),
    ]
    for button, handler, outputs, api_name in runs:
        outputs = [*outputs, *sides, *MODEL_LISTS]
        connect(w[button].click, handler, w, outputs, api_name=api_name, status=sides[0])
    connect(
        w["remote_connect"].click,
        h.compare_connect,
        w,
        ["remote_status", "model_a", "model_b"],
        api_name="compare_connect",
        status="remote_status",
        model=False,
    )

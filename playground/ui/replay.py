"""Replay: recorded traces served with no model loaded (`python app.py --replay FILE_OR_DIR`).

Each tab lists the traces of its kind and draws the chosen one with the same view code as the
live app, marked "recorded". Nothing here runs a model, so it starts in seconds: for a talk
without a GPU, a cold Space, or the README's gallery.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from playground.engine.sampling import DEFAULT_ORDER
from playground.errors import PlaygroundError
from playground.traces import Trace, decode_data
from playground.ui.beam_tab import parse_view, render_beam_trace
from playground.ui.chat_tab import render_chat_trace
from playground.ui.common import connect
from playground.ui.hood import VIEWS
from playground.ui.hood.record import PLOT_SLOTS, REPLAY_OUTPUTS, render_hood_trace
from playground.ui.i18n import DEFAULT, i18n, localize, session_lang, t
from playground.ui.links import TAB_TITLES
from playground.ui.state import BeamView
from playground.ui.step_render import LEDGER_COLUMNS, render_step_trace, stage_choice

KINDS = ("chat", "step", "beam", "hood")  # a tab each, when traces of that kind were recorded


def badge(lang: str = DEFAULT) -> str:
    return f"<span class='recorded-badge'>{t('replay.badge', lang)}</span>"


def trace_label(trace: Trace, lang: str = DEFAULT) -> str:
    """A trace in the picker: its title (a lesson's title in lang), model and date."""
    return f"{trace_title(trace, lang)} · {trace.model} ({trace.engine}) · {trace.created}"


def trace_title(trace: Trace, lang: str = DEFAULT) -> str:
    """A lesson's trace is titled by its lesson in lang (the rest of its recorded title is in the
    language it was recorded in); any other trace by its recorded title."""
    view = LESSONS.get(trace.data.get("view", "")) if trace.kind == "hood" else None
    return trace.title if view is None else localize(view.lesson.title, lang)


def header_markdown(traces: list[Trace], skipped: Sequence[str] = (), lang: str = DEFAULT) -> str:
    models = ", ".join(sorted({f"{trace.model} ({trace.engine})" for trace in traces}))
    lines = "".join(
        f"<br>⚠️ {t('replay.skipped', lang, why=html.escape(localize(why, lang)))}" for why in skipped
    )
    count = t("replay.count.one" if len(traces) == 1 else "replay.count.many", lang, count=len(traces))
    details = t("replay.details", lang, models=models)
    tooltip = html.escape(count + details, quote=True)
    # on stage the details give way to the tooltip (static/stage.css), as the live header's do
    return (
        f"## {t('replay.title', lang)}\n"
        f"<span class='model-info' title='{tooltip}'>{badge(lang)} {count}"
        f"<span class='model-details'>{html.escape(details)}{lines}</span></span>"
    )


LESSONS = {view.key: view for view in VIEWS}


def render_lesson_trace(data: dict[str, Any], lang: str = DEFAULT) -> dict[str, Any]:
    """An Under the hood trace, titled by its lesson in lang (the registry names every lesson)."""
    return render_hood_trace(
        data, {view.key: (localize(view.lesson.title, lang), view.main) for view in VIEWS}, lang
    )


RENDERERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "chat": render_chat_trace,
    "step": render_step_trace,
    "beam": render_beam_trace,
    "hood": render_lesson_trace,
}


def check_drawable(trace: Trace) -> None:
    """Refuse (naming it) a trace whose data does not draw: `--replay DIR` skips its file."""
    decode_data(trace, RENDERERS)


def provenance(trace: Trace, lang: str = DEFAULT) -> str:
    origin = t("replay.origin", lang, created=trace.created, model=trace.model, engine=trace.engine)
    return f"{badge(lang)} **{html.escape(trace.title)}** · {origin}"


class ReplayHandlers:
    """Draw the chosen trace of each kind in the page's language. Chat, Step and Beam traces hold
    numbers and are drawn as the live tabs draw them; a lesson's trace holds what it showed, so its
    texts stay in the language they were recorded in, and its figures recorded in English show their
    titles, axes and legends in the page's language (i18n.localize_recorded)."""

    def __init__(self, traces: list[Trace], skipped: Sequence[str] = ()) -> None:
        self.traces, self.skipped = traces, skipped

    def of_kind(self, kind: str) -> list[Trace]:
        return [trace for trace in self.traces if trace.kind == kind]

    def pick(self, kind: str, index: Any) -> Trace:
        same_kind = self.of_kind(kind)
        if not isinstance(index, int) or not 0 <= index < len(same_kind):
            raise PlaygroundError(
                "No recorded {kind} trace number {index!r}.",
                key="replay.error.no_trace",
                kind=kind,
                index=index,
            )
        return same_kind[index]

    def replay_texts(self, request: gr.Request = None) -> dict[str, Any]:
        """The header and the pickers' labels in the page's language (on page load)."""
        lang = session_lang(request)
        pickers = {
            f"{kind}_trace": gr.Dropdown(choices=choices(self.of_kind(kind), lang))
            for kind in KINDS
            if self.of_kind(kind)
        }
        # the tabs' names too: Gradio's own translation misses a tab not opened yet
        names = {
            f"tab_{kind}": gr.Tab(label=t(TAB_TITLES[kind], lang)) for kind in KINDS if self.of_kind(kind)
        }
        return {"header": header_markdown(self.traces, self.skipped, lang), **pickers, **names}

    def replay_chat(self, chat_trace: int, request: gr.Request = None) -> dict[str, Any]:
        trace, lang = self.pick("chat", chat_trace), session_lang(request)
        views = decode_data(trace, {"chat": lambda data: render_chat_trace(data, lang)})
        return {**views, "chat_source": provenance(trace, lang)}

    def replay_step(
        self, step_trace: int, stage: str | None = None, request: gr.Request = None
    ) -> dict[str, Any]:
        trace, lang = self.pick("step", step_trace), session_lang(request)
        views = decode_data(trace, {"step": lambda data: render_step_trace(data, stage, lang)})
        shown = {
            name: views[name] for name in ("text", "status", "chart", "stage", "ledger", "curve", "tree")
        }
        candidates = candidates_markdown(trace.data, lang)
        return {**shown, "candidates": candidates, "step_source": provenance(trace, lang)}

    def replay_hood(self, hood_trace: int, request: gr.Request = None) -> dict[str, Any]:
        trace, lang = self.pick("hood", hood_trace), session_lang(request)
        views = decode_data(trace, {"hood": lambda data: render_lesson_trace(data, lang)})
        return {**views, "hood_source": provenance(trace, lang)}

    def replay_beam(self, beam_trace: int, request: gr.Request = None) -> dict[str, Any]:
        trace, lang = self.pick("beam", beam_trace), session_lang(request)
        views = decode_data(trace, {"beam": lambda data: render_beam_trace(data, lang=lang)})
        return {**views, "beam_source": provenance(trace, lang)}

    def replay_beam_view(self, beam_trace: int, view: str, request: gr.Request = None) -> dict[str, Any]:
        """The tree redrawn for the plot's size and zoom (static/beam.js reports them, as in the live
        tab): on stage it fits the window with larger text."""
        if not view:
            return {}
        trace, lang = self.pick("beam", beam_trace), session_lang(request)
        frame, window = parse_view(view)
        shown = BeamView(window=window, frame=frame)
        views = decode_data(trace, {"beam": lambda data: render_beam_trace(data, lang=lang, shown=shown)})
        return {"plot": views["plot"]}


def choices(traces: list[Trace], lang: str = DEFAULT) -> list[tuple[str, int]]:
    """A picker's choices: each trace's label in lang, its index among its kind."""
    return [(trace_label(trace, lang), i) for i, trace in enumerate(traces)]


def candidates_markdown(data: dict[str, Any], lang: str = DEFAULT) -> str:
    """The recorded next-token candidates, best first."""
    rows = data["snapshot"]["candidates"][:10]
    lines = [f"{c['rank']}. `{c.get('detail') or c['visible']}` {c['prob']:.1%}" for c in rows]
    return t("replay.next_token", lang) + "\n\n" + "\n".join(f"- {line}" for line in lines)


def build_replay_demo(traces: list[Trace], skipped: Sequence[str] = ()) -> gr.Blocks:
    """The replay app: one tab per kind of trace present; the header names the files skipped. Its
    server-built text is English here: the page's load event says it in the page's language."""
    handlers = ReplayHandlers(traces, skipped)
    builders = {"chat": _chat_tab, "step": _step_tab, "beam": _beam_tab, "hood": _hood_tab}
    with gr.Blocks(title="LLM generation playground · replay") as demo:
        w = {"header": gr.Markdown(header_markdown(traces, skipped), elem_id="header")}
        with gr.Tabs():
            for kind in KINDS:
                if handlers.of_kind(kind):
                    with gr.Tab(i18n(TAB_TITLES[kind]), id=kind) as w[f"tab_{kind}"]:
                        tab: dict[str, Any] = {}  # each tab's own components by name
                        builders[kind](tab, choices(handlers.of_kind(kind)), handlers, demo)
                        w[f"{kind}_trace"] = tab[f"{kind}_trace"]
        outputs = list(w)
        connect(demo.load, handlers.replay_texts, w, outputs, api_name=None, model=False)
    return demo


def _picker(w: dict[str, Any], kind: str, choices: list[tuple[str, int]]) -> None:
    w[f"{kind}_trace"] = gr.Dropdown(
        choices,
        value=0,
        label=i18n("replay.picker"),
        elem_id=f"replay-{kind}",
        elem_classes=["replay-picker"],
    )
    w[f"{kind}_source"] = gr.Markdown(elem_classes=["recorded"])


def _show(demo: gr.Blocks, w: dict[str, Any], kind: str, handler: Callable, outputs: list[str]) -> None:
    """Draw the first trace on load and any trace chosen later."""
    for trigger in (demo.load, w[f"{kind}_trace"].change):
        connect(trigger, handler, w, [*outputs, f"{kind}_source"], api_name=None, model=False)


def _chat_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "chat", choices)
    w["history"] = gr.Chatbot(label=i18n("replay.conversation"), height=320, elem_id="chat-bot")
    w["status"] = gr.Markdown(elem_classes=["chat-stats"])
    w["token_view"] = gr.HTML(elem_id="chat-tokens")
    _show(demo, w, "chat", handlers.replay_chat, ["history", "token_view", "status"])


def _step_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "step", choices)
    with gr.Row():
        with gr.Column(scale=3):
            w["text"] = gr.HTML(elem_id="step-text")
            w["status"] = gr.Markdown()
            w["chart"] = gr.Plot(label=i18n("replay.chart"))
        with gr.Column(scale=2):
            w["candidates"] = gr.Markdown()
            w["stage"] = gr.Radio(
                [stage_choice(name) for name in ("raw", *DEFAULT_ORDER)],
                value="raw",
                label=i18n("replay.stage"),
            )
    w["curve"] = gr.Plot(label=i18n("replay.curve"))
    w["ledger"] = gr.Dataframe(
        headers=LEDGER_COLUMNS, label=i18n("replay.ledger"), interactive=False, wrap=True
    )
    w["tree"] = gr.HTML(label=i18n("replay.tree"))
    outputs = ["text", "status", "chart", "stage", "ledger", "curve", "tree", "candidates"]
    _show(demo, w, "step", handlers.replay_step, outputs)
    connect(w["stage"].input, handlers.replay_step, w, outputs, api_name=None, model=False)


def _beam_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "beam", choices)
    w["status"] = gr.Markdown(elem_id="beam-status")  # on stage its first line only, as live (stage.css)
    w["plot"] = gr.Plot(label=i18n("replay.search_tree"), elem_id="beam-plot")
    w["table"] = gr.Dataframe(label=i18n("replay.hypotheses"), interactive=False)
    _show(demo, w, "beam", handlers.replay_beam, ["plot", "status", "table"])
    # static/beam.js writes the plot's size and zoom here, as in the live Beam tab
    w["view"] = gr.Textbox(visible="hidden", elem_id="beam-view", label="plot view")
    redraw = {"api_name": None, "model": False, "trigger_mode": "always_last"}
    connect(w["view"].change, handlers.replay_beam_view, w, ["plot"], **redraw)


def _hood_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    """Any recorded Under the hood run, in the order a live lesson shows on stage: its title and
    status, its main visual (HTML or the first figure, on a row of its own), the other figures, texts
    and table, then its summary."""
    _picker(w, "hood", choices)
    w["hood_status"] = gr.Markdown(elem_id="replay-hood-status")
    w["hood_main_html"] = gr.HTML(visible=False, elem_id="replay-hood-main-html")
    for row in (PLOT_SLOTS[:1], PLOT_SLOTS[1:3], PLOT_SLOTS[3:]):
        with gr.Row():
            for slot in row:
                w[slot] = gr.Plot(visible=False, elem_id=f"replay-{slot.replace('_', '-')}")
    w["hood_html"] = gr.HTML(elem_id="replay-hood-html")
    w["hood_table"] = gr.Dataframe(
        label=i18n("replay.measurements"), interactive=False, wrap=True, visible=False
    )
    w["hood_summary"] = gr.Markdown(elem_id="replay-hood-summary")
    _show(demo, w, "hood", handlers.replay_hood, REPLAY_OUTPUTS)

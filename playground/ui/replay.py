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
from playground.ui.beam_tab import render_beam_trace
from playground.ui.chat_tab import render_chat_trace
from playground.ui.common import connect
from playground.ui.hood import VIEWS
from playground.ui.hood.record import PLOT_SLOTS, REPLAY_OUTPUTS, render_hood_trace
from playground.ui.step_render import LEDGER_COLUMNS, render_step_trace, stage_choice

TAB_NAMES = {"chat": "Chat", "step": "Step by step", "beam": "Beam search", "hood": "Under the hood"}
BADGE = "<span class='recorded-badge'>● recorded</span>"


def trace_label(trace: Trace) -> str:
    return f"{trace.title} · {trace.model} ({trace.engine}) · {trace.created}"


def header_markdown(traces: list[Trace], skipped: Sequence[str] = ()) -> str:
    models = sorted({f"{t.model} ({t.engine})" for t in traces})
    lines = "".join(f"<br>⚠️ Skipped {html.escape(why)}" for why in skipped)
    count = f"{len(traces)} recorded trace{'s' * (len(traces) != 1)}"
    details = f", no model loaded: every number was recorded from {', '.join(models)}."
    tooltip = html.escape(count + details, quote=True)
    # on stage the details give way to the tooltip (static/stage.css), as the live header's do
    return (
        "## LLM generation playground · replay\n"
        f"<span class='model-info' title='{tooltip}'>{BADGE} {count}"
        f"<span class='model-details'>{html.escape(details)}{lines}</span></span>"
    )


def render_lesson_trace(data: dict[str, Any]) -> dict[str, Any]:
    """An Under the hood trace, titled by its lesson (the registry names every lesson)."""
    return render_hood_trace(data, {view.key: (view.lesson.title, view.main) for view in VIEWS})


RENDERERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "chat": render_chat_trace,
    "step": render_step_trace,
    "beam": render_beam_trace,
    "hood": render_lesson_trace,
}


def check_drawable(trace: Trace) -> None:
    """Refuse (naming it) a trace whose data does not draw: `--replay DIR` skips its file."""
    decode_data(trace, RENDERERS)


def provenance(trace: Trace) -> str:
    origin = f"recorded {trace.created} from {trace.model} ({trace.engine})"
    return f"{BADGE} **{html.escape(trace.title)}** · {origin}"


class ReplayHandlers:
    """Draw the chosen trace of each kind."""

    def __init__(self, traces: list[Trace]) -> None:
        self.traces = traces

    def pick(self, kind: str, index: Any) -> Trace:
        same_kind = [t for t in self.traces if t.kind == kind]
        if not isinstance(index, int) or not 0 <= index < len(same_kind):
            raise PlaygroundError(f"No recorded {kind} trace number {index!r}.")
        return same_kind[index]

    def replay_chat(self, chat_trace: int) -> dict[str, Any]:
        trace = self.pick("chat", chat_trace)
        return {**decode_data(trace, {"chat": render_chat_trace}), "chat_source": provenance(trace)}

    def replay_step(self, step_trace: int, stage: str | None = None) -> dict[str, Any]:
        trace = self.pick("step", step_trace)
        views = decode_data(trace, {"step": lambda data: render_step_trace(data, stage)})
        shown = {
            name: views[name] for name in ("text", "status", "chart", "stage", "ledger", "curve", "tree")
        }
        return {**shown, "candidates": candidates_markdown(trace.data), "step_source": provenance(trace)}

    def replay_hood(self, hood_trace: int) -> dict[str, Any]:
        trace = self.pick("hood", hood_trace)
        return {**decode_data(trace, {"hood": render_lesson_trace}), "hood_source": provenance(trace)}

    def replay_beam(self, beam_trace: int) -> dict[str, Any]:
        trace = self.pick("beam", beam_trace)
        return {**decode_data(trace, {"beam": render_beam_trace}), "beam_source": provenance(trace)}


def candidates_markdown(data: dict[str, Any]) -> str:
    """The recorded next-token candidates, best first."""
    rows = data["snapshot"]["candidates"][:10]
    lines = [f"{c['rank']}. `{c.get('detail') or c['visible']}` {c['prob']:.1%}" for c in rows]
    return "**Next token** (recorded)\n\n" + "\n".join(f"- {line}" for line in lines)


def build_replay_demo(traces: list[Trace], skipped: Sequence[str] = ()) -> gr.Blocks:
    """The replay app: one tab per kind of trace present; the header names the files skipped."""
    handlers = ReplayHandlers(traces)
    with gr.Blocks(title="LLM generation playground · replay") as demo:
        gr.Markdown(header_markdown(traces, skipped), elem_id="header")
        with gr.Tabs():
            for kind, build in (
                ("chat", _chat_tab),
                ("step", _step_tab),
                ("beam", _beam_tab),
                ("hood", _hood_tab),
            ):
                choices = [(trace_label(t), i) for i, t in enumerate(t for t in traces if t.kind == kind)]
                if choices:
                    with gr.Tab(TAB_NAMES[kind], id=kind):
                        build({}, choices, handlers, demo)  # each tab's own components by name
    return demo


def _picker(w: dict[str, Any], kind: str, choices: list[tuple[str, int]]) -> None:
    w[f"{kind}_trace"] = gr.Dropdown(
        choices, value=0, label="Recorded trace", elem_id=f"replay-{kind}", elem_classes=["replay-picker"]
    )
    w[f"{kind}_source"] = gr.Markdown(elem_classes=["recorded"])


def _show(demo: gr.Blocks, w: dict[str, Any], kind: str, handler: Callable, outputs: list[str]) -> None:
    """Draw the first trace on load and any trace chosen later."""
    for trigger in (demo.load, w[f"{kind}_trace"].change):
        connect(trigger, handler, w, [*outputs, f"{kind}_source"], api_name=None, model=False)


def _chat_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "chat", choices)
    w["history"] = gr.Chatbot(label="Conversation (recorded)", height=320, elem_id="chat-bot")
    w["status"] = gr.Markdown(elem_classes=["chat-stats"])
    w["token_view"] = gr.HTML(elem_id="chat-tokens")
    _show(demo, w, "chat", handlers.replay_chat, ["history", "token_view", "status"])


def _step_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "step", choices)
    with gr.Row():
        with gr.Column(scale=3):
            w["text"] = gr.HTML(elem_id="step-text")
            w["status"] = gr.Markdown()
            w["chart"] = gr.Plot(label="raw vs after sampling (recorded)")
        with gr.Column(scale=2):
            w["candidates"] = gr.Markdown()
            w["stage"] = gr.Radio(
                [stage_choice(name) for name in ("raw", *DEFAULT_ORDER)],
                value="raw",
                label="distribution after stage",
            )
    w["curve"] = gr.Plot(label="cumulative log-prob (chain rule)")
    w["ledger"] = gr.Dataframe(
        headers=LEDGER_COLUMNS, label="ledger (recorded)", interactive=False, wrap=True
    )
    w["tree"] = gr.HTML(label="branch tree")
    outputs = ["text", "status", "chart", "stage", "ledger", "curve", "tree", "candidates"]
    _show(demo, w, "step", handlers.replay_step, outputs)
    connect(w["stage"].input, handlers.replay_step, w, outputs, api_name=None, model=False)


def _beam_tab(w: dict[str, Any], choices: list, handlers: ReplayHandlers, demo: gr.Blocks) -> None:
    _picker(w, "beam", choices)
    w["status"] = gr.Markdown()
    w["plot"] = gr.Plot(label="Search tree (recorded)", elem_id="beam-plot")
    w["table"] = gr.Dataframe(label="Returned hypotheses (best first)", interactive=False)
    _show(demo, w, "beam", handlers.replay_beam, ["plot", "status", "table"])


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
        label="measurements (recorded)", interactive=False, wrap=True, visible=False
    )
    w["hood_summary"] = gr.Markdown(elem_id="replay-hood-summary")
    _show(demo, w, "hood", handlers.replay_hood, REPLAY_OUTPUTS)

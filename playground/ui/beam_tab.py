"""Beam search tab: run the real search, draw its tree, pick a node, export, open in Step by step."""

from __future__ import annotations

import html
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.io as pio
from gradio.components.plot import PlotData

from playground.beam import (
    KEPT,
    MAX_BEAMS,
    MAX_NEW_TOKENS,
    PRUNED,
    ROOT,
    BeamTree,
    beam_search,
    describe_node,
)
from playground.engine.base import Engine
from playground.engine.tokens import cut_off_shown, decode_ids
from playground.errors import Cancelled, PlaygroundError
from playground.messages import Message
from playground.plots.beam import PlotFrame, beam_tree_data, early_stopping_word, figure_config, node_focus
from playground.traces import new_trace, save_trace
from playground.ui.common import UncheckedSlider, as_number, connect, connect_after_ticket
from playground.ui.control_ranges import BEAM_LENGTH_PENALTY
from playground.ui.i18n import DEFAULT, i18n, localize, session_lang, t
from playground.ui.links import Link, link_opener
from playground.ui.presets import PRESETS, build_presets, chinese_note, preset
from playground.ui.ranges import CheckedSlider
from playground.ui.state import BeamView, TabStates
from playground.workspace import Workspace, Workspaces

EARLY_STOPPING = {"off": False, "on": True, "never": "never"}
HYPOTHESIS_KEYS = ["beam.col.rank", "beam.col.score", "beam.col.cum", "beam.col.tokens", "beam.col.text"]


def hypothesis_headers(lang: str = DEFAULT) -> list[str]:
    """The hypotheses table's column names in lang (a Dataframe's headers are set by the server)."""
    return [t(key, lang) for key in HYPOTHESIS_KEYS]


HYPOTHESIS_COLUMNS = hypothesis_headers()  # in English
MAX_NODE_CHOICES = 3000  # the node list stays usable in the browser


# --- pure helpers (plain values in, component values out) ---------------------------------------


def parse_early_stopping(value: Any) -> bool | str:
    """'off' / 'on' / 'never' (or the engine's False / True / 'never') -> engine value."""
    if isinstance(value, bool) or value == "never":
        return value
    if value not in EARLY_STOPPING:
        raise PlaygroundError(
            "Early stopping must be one of {words}, got {value!r}.",
            key="beam.error.early_word",
            words=", ".join(EARLY_STOPPING),
            value=value,
        )
    return EARLY_STOPPING[value]


def plot_value(
    tree: BeamTree,
    pruned_per_parent: Any,
    show_greedy: bool,
    image_format: str,
    shown: BeamView | None = None,
    chosen: int | None = None,
    lang: str = DEFAULT,
) -> PlotData:
    """The figure as Gradio's plot payload, with a modebar that zooms and downloads PNG or SVG;
    drawn for the tab's view (unfolded nodes, zoomed window, plot size) and its chosen node when
    given, its words in lang."""
    view: dict[str, Any] = {"lang": lang, "chosen": chosen}
    if shown is not None:
        view |= {"unfolded": shown.unfolded, "window": shown.window, "frame": shown.frame}
    data = beam_tree_data(tree, int(pruned_per_parent), bool(show_greedy), **view)
    data["config"] = figure_config(str(image_format).lower())
    return PlotData(
        type="plotly", plot=pio.to_json(data, validate=False, remove_uids=False)
    )  # NaN / inf as null, like plotly


def parse_view(view: str) -> tuple[PlotFrame, tuple[float, float, float, float] | None]:
    """static/beam.js's report 'x0,x1,y0,y1,area_w,area_h,fig_w,fig_h,fit,dark,presenter,room:time'
    -> the plot's frame (size, dark page, presenter mode, room below its top) and its zoomed
    window (None when it shows the whole tree)."""
    try:
        values = [float(v) for v in view.split(":")[0].split(",")]
    except ValueError:
        values = []
    if len(values) != 12 or not all(math.isfinite(v) for v in values):
        raise PlaygroundError("Not a view of the tree: {view!r}.", key="beam.error.view", view=view)
    x0, x1, y0, y1, area_w, area_h, fig_w, fig_h, fit, dark, presenter, room = values
    if not (x1 > x0 and y1 > y0 and 0 < area_w <= fig_w and 0 < area_h <= fig_h and room >= 0):
        raise PlaygroundError("Not a view of the tree: {view!r}.", key="beam.error.view", view=view)
    frame = PlotFrame(fig_w, fig_w - area_w, fig_h - area_h, bool(dark), bool(presenter), room)
    return frame, None if fit else (x0, x1, y0, y1)


def status_markdown(tree: BeamTree, lang: str = DEFAULT) -> str:
    """Summary: steps, why it stopped, node counts, time, greedy vs best beam (a search Stop ended part
    way: marked so, in lang)."""
    counts = {fate: sum(n.fate == fate for n in tree.nodes) for fate in (KEPT, "finished", PRUNED)}
    if tree.stopped:
        why = localize(tree.stop_reason, lang)
        steps = f"**{why[:1].upper()}{why[1:]}**: {t('beam.stopped.as_it_stood', lang)}"
    else:
        steps = t("beam.status.steps", lang, steps=tree.steps_run, reason=localize(tree.stop_reason, lang))
    counted = {"kept": counts[KEPT], "finished": counts["finished"], "pruned": counts[PRUNED]}
    nodes = t("beam.status.nodes", lang, nodes=len(tree.nodes) - 1, **counted)
    prompt = t("beam.status.prompt", lang, tokens=len(tree.prompt_ids), seconds=tree.seconds)
    best = tree.hypotheses[0]
    name = t("beam.stopped.best_so_far" if tree.stopped else "beam.stopped.best", lang)
    lines = [f"{steps} · {nodes} · {prompt}"]
    lines.append(
        t("beam.status.best", lang, name=name, score=best.score, cum=best.cum_logprob)
        + markdown_text(cut_off_shown(best.text))
    )
    if tree.greedy:
        greedy = tree.greedy[-1]
        lines.append(
            t("beam.status.greedy", lang, cum=greedy.cum_logprob, tokens=len(tree.greedy))
            + markdown_text(cut_off_shown(tree.greedy_text or ""))
        )
    return "\n\n".join(lines)


def markdown_text(text: str) -> str:
    """Generated text as one Markdown line: plain (no repr quotes), line breaks as ↵,
    Markdown and HTML characters escaped so they show as typed."""
    one_line = text.replace("\r\n", "↵").replace("\r", "↵").replace("\n", "↵")
    escaped = html.escape(one_line, quote=False)
    return re.sub(r"([\\`*_\[\]#|~])", r"\\\1", escaped)


def hypothesis_rows(tree: BeamTree) -> list[list[Any]]:
    return [
        [h.rank, round(h.score, 4), round(h.cum_logprob, 4), len(h.token_ids), cut_off_shown(h.text)]
        for h in tree.hypotheses
    ]


def hypothesis_table(tree: BeamTree, lang: str = DEFAULT) -> dict[str, list]:
    """The hypotheses table's value: its rows and its headers in lang (the server sets a Dataframe's)."""
    return {"headers": hypothesis_headers(lang), "data": hypothesis_rows(tree)}


def node_choices(tree: BeamTree, lang: str = DEFAULT) -> list[tuple[str, int]]:
    """(label, node id) for the node list: returned hypotheses, then kept/finished, then pruned (in
    lang)."""
    ranked = sorted((n for n in tree.nodes if n.rank), key=lambda n: n.rank or 0)
    live = [n for n in tree.nodes if n.fate not in (PRUNED, ROOT) and not n.rank]
    pruned = [n for n in tree.nodes if n.fate == PRUNED]
    ordered = [tree.nodes[0], *ranked, *live, *pruned][:MAX_NODE_CHOICES]
    return [(localize(describe_node(n, tree.tree.label(n.id)), lang), n.id) for n in ordered]


def node_prefix(tree: BeamTree, node_id: Any, tokenizer: Any) -> str:
    """The prompt plus the tokens up to a node, decoded as one sequence (characters split over
    byte tokens stay whole; one whose last bytes come after the node ends in "…")."""
    try:
        node_id = int(node_id)
    except (TypeError, ValueError):
        raise PlaygroundError(
            "Choose a node from the list, got {node!r}.", key="beam.error.node_choice", node=node_id
        ) from None
    if not 0 <= node_id < len(tree.nodes):
        raise PlaygroundError(
            "Node #{node} is not in this tree (0 to {last}).",
            key="beam.error.no_node",
            node=node_id,
            last=len(tree.nodes) - 1,
        )
    return cut_off_shown(decode_ids(tokenizer, tree.prefix_ids(node_id)))


def export_json(tree: BeamTree | None) -> str:
    """Write the tree (BeamTree.to_dict) to a temporary .json file; returns its path."""
    if tree is None:
        raise PlaygroundError(
            "Run a search first: there is no tree to export yet.", key="beam.error.no_export"
        )
    path = Path(tempfile.mkdtemp(prefix="beam-tree-")) / "beam-search-tree.json"
    path.write_text(json.dumps(tree.to_dict(), ensure_ascii=False), encoding="utf-8")
    return str(path)


# --- handlers ---------------------------------------------------------------------------------


class BeamHandlers:
    """Thin handlers: parse, call the engine, render. The tab's last tree lives in its Workspace."""

    def __init__(
        self, engine: Engine, workspaces: Workspaces | None = None, states: TabStates | None = None
    ) -> None:
        self.engine = engine
        self.workspaces = workspaces if workspaces is not None else Workspaces(engine)
        self.states = states if states is not None else TabStates()  # how each tab's tree is drawn
        # Page load: a shared link's settings on the controls, and the search they make.
        self.beam_from_link = link_opener("beam", self.beam_run, self._open_link)

    def beam_run(
        self,
        prompt: str,
        chat: bool,
        beams: Any,
        steps: Any,
        length_penalty: Any,
        early_stopping: Any,
        pruned: Any,
        show_greedy: bool,
        image_format: str,
        request: gr.Request = None,
        progress: Any = gr.Progress(),  # noqa: B008 - gradio injects progress this way
        ticket: int | None = None,
    ) -> dict[str, Any]:
        """Search, then every view; the best hypothesis is chosen (ready for Step by step). ticket:
        the button's (beam_ticket), so a Stop while the search waits in the queue drops it."""
        desc = t("tab.beam", session_lang(request))
        progress(0, desc=desc)

        def report(done: int, total: int) -> None:
            progress((done, total), desc=desc, unit=t("beam.progress.unit", session_lang(request)))

        ws = self._workspace(request)
        with ws.run("beam", ticket) as control:  # Stop cancels it at the next step
            if control.cancelled:  # dropped while it waited: beam_stop said so
                return {}
            try:
                tree = beam_search(
                    ws.engine,
                    prompt,
                    beams,
                    steps,
                    as_number(length_penalty, Message("beam.name.length_penalty", "length penalty")),
                    parse_early_stopping(early_stopping),
                    chat=bool(chat),
                    include_greedy=True,
                    progress=report,
                    control=control,
                )
            except Cancelled:  # stopped before its first step: the shown tree, if any, stays
                return {"status": self._stopped_before(ws, session_lang(request))}
        return self._show_search(tree, (pruned, show_greedy, image_format), request)

    def _show_search(
        self, tree: BeamTree, drawing: tuple[Any, bool, str], request: gr.Request | None
    ) -> dict:
        """A new search on screen (drawing: pruned per node, greedy overlay, image format): the tab's
        tree, its best hypothesis chosen, every view."""
        ws, view, lang = self._workspace(request), self._view(request), session_lang(request)
        ws.beam, ws.beam_node = tree, tree.hypotheses[0].node_id
        view.unfolded, view.window = set(), None
        return {
            "plot": plot_value(tree, *drawing, view, ws.beam_node, lang),
            "status": self._status(ws, tree, lang),
            "table": hypothesis_table(tree, lang),
            "node": gr.Dropdown(choices=node_choices(tree, lang), value=ws.beam_node),
            "prefix_text": node_prefix(tree, ws.beam_node, ws.engine.tokenizer),
            "export_file": None,
        }

    def _open_link(self, link: Link, values: dict[str, Any], request: Any, progress: Any) -> dict[str, Any]:
        """A shared link to a search (beam_from_link): the same search, its node chosen; a link
        without a prompt only sets the controls."""
        if not link.values.get("prompt"):
            return {}
        views = self.beam_run(**values, request=request, progress=progress)
        if "node" in link.values:
            views["prefix_text"] = self.beam_select_node(link.values["node"], request)
            views["node"] = link.values["node"]
        return views

    def link_values(self, request: gr.Request = None) -> dict[str, Any]:
        """What a link to the search on screen carries: its prompt, settings and chosen node."""
        ws = self._workspace(request)
        if ws.beam is None:
            return {}
        s = ws.beam.settings
        return {
            "prompt": ws.beam.prompt,
            "chat": s.chat,
            "beams": s.num_beams,
            "steps": s.max_new_tokens,
            "length_penalty": s.length_penalty,
            "early_stopping": early_stopping_word(s.early_stopping),
            "node": ws.beam_node,
        }

    def beam_ticket(self, request: gr.Request = None) -> dict[str, Any]:
        """The Run button, before its search joins the queue: a ticket that Stop can drop."""
        return {"ticket": self._workspace(request).ticket("beam")}

    def beam_stop(self, request: gr.Request = None) -> dict[str, Any]:
        """Stop: the running search ends at its next step, and its own last update draws its tree so
        far and says so (nothing here: this reply may reach the page after that one); one that
        waited in the queue never starts (the tree on screen, if any, stays)."""
        ws = self._workspace(request)
        if ws.stop("beam") == "running":
            return {}
        return {"status": self._stopped_before(ws, session_lang(request), began=False)}

    @staticmethod
    def _stopped_before(ws: Workspace, lang: str, began: bool = True) -> str:
        """Stop before the search's first step (began: it had left the queue), in lang."""
        said = t("beam.stopped.before_first_step" if began else "beam.stopped.before_began", lang)
        shown = t("beam.stopped.shown", lang, status=status_markdown(ws.beam, lang)) if ws.beam else ""
        return f"{said}\n\n{shown}" if shown else said

    def beam_redraw(
        self, pruned: Any, show_greedy: bool, image_format: str, request: gr.Request = None
    ) -> dict[str, Any]:
        ws = self._workspace(request)
        return {} if ws.beam is None else {"plot": self._plot(ws, pruned, show_greedy, image_format, request)}

    def beam_texts(
        self, pruned: Any, show_greedy: bool, image_format: str, request: gr.Request = None
    ) -> dict[str, Any]:
        """After a language switch: the search on screen (tree, summary, table, node list) in the page's
        language; the table's headers also before any search."""
        ws, lang = self._workspace(request), session_lang(request)
        headers = hypothesis_headers(lang)  # the table's own (an empty table shows those)
        if ws.beam is None:
            return {"table": gr.Dataframe({"headers": headers, "data": []}, headers=headers)}
        tree = ws.beam
        return {
            "plot": self._plot(ws, pruned, show_greedy, image_format, request),
            "status": self._status(ws, tree, lang),
            "table": gr.Dataframe(hypothesis_table(tree, lang), headers=headers),
            "node": gr.Dropdown(choices=node_choices(tree, lang), value=ws.beam_node),
        }

    def beam_preset(self, name: str, request: gr.Request = None) -> dict[str, Any]:
        """An example prompt (ui/presets.py) in the box, as a raw prompt; on a model that writes its
        Chinese as byte tokens the status line says so."""
        text = preset("beam", name).text
        note = chinese_note(self._workspace(request).engine, text)
        return {
            "prompt": text,
            "chat": False,
            **({"status": localize(note, session_lang(request))} if note else {}),
        }

    def _plot(
        self, ws: Workspace, pruned: Any, show_greedy: bool, image_format: str, request: gr.Request | None
    ) -> PlotData:
        """The tab's tree drawn for its view, in the page's language."""
        view, lang = self._view(request), session_lang(request)
        return plot_value(ws.beam, pruned, show_greedy, image_format, view, ws.beam_node, lang)

    @staticmethod
    def _status(ws: Workspace, tree: BeamTree, lang: str) -> str:
        """The search's summary, and what the model makes of its prompt's Chinese (byte tokens)."""
        note = chinese_note(ws.engine, tree.prompt) if tree.prompt else None
        return status_markdown(tree, lang) + (f"\n\n> {localize(note, lang)}" if note else "")

    def beam_click_node(
        self, clicked: str, pruned: Any, show_greedy: bool, image_format: str, request: gr.Request = None
    ) -> dict[str, Any]:
        """A click in the plot (static/beam.js writes 'id:time' or 'fold-id:time'): a node is
        chosen (ringed, its path and subtree labelled first; where they don't fit the view zooms
        to its subtree); a '+N pruned' marker unfolds its candidates, or folds them again."""
        target = clicked.split(":")[0] if clicked else ""
        ws = self._workspace(request)
        if ws.beam is None:
            return {}
        if target.startswith("fold-") and target[5:].isdigit():
            self._view(request).unfolded ^= {int(target[5:])}
            return {"plot": self._plot(ws, pruned, show_greedy, image_format, request)}
        if not target.isdigit():
            return {}
        prefix = self.beam_select_node(int(target), request)
        shown = self._view(request)
        view = {"unfolded": shown.unfolded, "window": shown.window, "frame": shown.frame}
        view["lang"] = session_lang(request)
        shown.window = (
            node_focus(ws.beam, int(target), int(pruned), bool(show_greedy), **view) or shown.window
        )
        return {
            "node": int(target),
            "prefix_text": prefix,
            "plot": self._plot(ws, pruned, show_greedy, image_format, request),
        }

    def beam_view(
        self, view: str, pruned: Any, show_greedy: bool, image_format: str, request: gr.Request = None
    ) -> dict[str, Any]:
        """The plot was zoomed, panned or resized (static/beam.js reports it): redraw the labels
        and markers that fit the new view."""
        ws = self._workspace(request)
        if ws.beam is None or not view:
            return {}
        shown = self._view(request)
        shown.frame, shown.window = parse_view(view)
        return {"plot": self._plot(ws, pruned, show_greedy, image_format, request)}

    def beam_select_node(self, node: Any, request: gr.Request = None) -> str:
        """Choose a node: its prefix (prompt + tokens up to it), and what Step by step will open."""
        ws = self._workspace(request)
        if ws.beam is None:
            raise PlaygroundError(
                "Run a search first: there are no nodes to choose yet.", key="beam.error.no_nodes"
            )
        if node is None or node == "":
            return ""
        text = node_prefix(ws.beam, node, ws.engine.tokenizer)
        ws.beam_node = int(node)
        return text

    def beam_trace(self, request: gr.Request = None) -> str:
        """Save the search on screen as a recorded trace (the whole tree, every number)."""
        ws = self._workspace(request)
        tree = ws.beam
        if tree is None:
            raise PlaygroundError(
                "Run a search first: there is no tree to save yet.", key="beam.error.no_save"
            )
        s = tree.settings
        title = f"Beam search: {tree.prompt[:50]} · {s.num_beams} beams × {tree.steps_run} steps"
        trace = new_trace("beam", title, ws.engine, tree.to_dict())
        return str(save_trace(trace, Path(tempfile.mkdtemp(prefix="trace-"))))

    def beam_export(self, request: gr.Request = None) -> str:
        return export_json(self._workspace(request).beam)

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(getattr(request, "session_hash", None))

    def _view(self, request: gr.Request | None) -> BeamView:
        return self.states.get(getattr(request, "session_hash", None)).beam


# --- layout -----------------------------------------------------------------------------------


def _prompt_row() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["prompt"] = gr.Textbox(
            label=i18n("beam.prompt"),
            value="The best thing about beam search is",
            lines=2,
            scale=4,
            elem_id="beam-prompt",
        )
        with gr.Column(scale=1, min_width=180):
            c["chat"] = gr.Checkbox(label=i18n("beam.chat"), value=False, info=i18n("beam.chat.info"))
            with gr.Row():
                c["run"] = gr.Button(
                    i18n("beam.run"), variant="primary", min_width=100, scale=2, elem_id="beam-run"
                )
                c["stop"] = gr.Button(
                    i18n("chat.stop"), variant="stop", min_width=60, scale=1, elem_id="beam-stop"
                )
    c.update(build_presets("beam"))
    return c


def _search_settings() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["beams"] = UncheckedSlider(
            1, MAX_BEAMS, value=4, step=1, label=i18n("beam.beams"), info=i18n("beam.beams.info")
        )
        c["steps"] = UncheckedSlider(
            1, MAX_NEW_TOKENS, value=12, step=1, label=i18n("beam.steps"), info=i18n("beam.steps.info")
        )
        c["length_penalty"] = CheckedSlider(
            *BEAM_LENGTH_PENALTY,
            value=1.0,
            step=0.1,
            label=i18n("beam.length_penalty"),
            info=i18n("beam.length_penalty.info"),
            elem_classes=["stage-hide"],
        )
        c["early_stopping"] = gr.Radio(
            [(i18n(f"beam.early_stopping.{word}"), word) for word in EARLY_STOPPING],
            value="off",
            label=i18n("beam.early_stopping"),
            info=i18n("beam.early_stopping.info"),
            elem_classes=["stage-hide"],
        )
    return c


def _view_options() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row(elem_classes=["stage-hide"]):
        c["pruned"] = CheckedSlider(
            0,
            3,
            value=0,
            step=1,
            label=i18n("beam.pruned"),
            info=i18n("beam.pruned.info"),
        )
        c["show_greedy"] = gr.Checkbox(
            label=i18n("beam.show_greedy"),
            value=True,
            info=i18n("beam.show_greedy.info"),
        )
        c["image_format"] = gr.Radio(
            ["png", "svg"],
            value="png",
            label=i18n("beam.image_format"),
            info=i18n("beam.image_format.info"),
        )
    return c


def _results() -> dict[str, Any]:
    c: dict[str, Any] = {"status": gr.Markdown(elem_id="beam-status"), "ticket": gr.State(None)}
    gr.Markdown(i18n("beam.plot_help"), elem_classes=["beam-plot-help", "stage-hide"])
    c["plot"] = gr.Plot(label=i18n("beam.plot"), show_label=False, elem_id="beam-plot")
    # static/beam.js writes the clicked node's id here (a plotly click is not a Gradio event),
    # and the plot's view (ranges, size) after a zoom, pan or resize.
    c["clicked"] = gr.Textbox(visible="hidden", elem_id="beam-clicked-node", label="clicked node")
    c["view"] = gr.Textbox(visible="hidden", elem_id="beam-view", label="plot view")
    c["table"] = gr.Dataframe(
        headers=HYPOTHESIS_COLUMNS,
        label=i18n("beam.table"),
        interactive=False,
        elem_classes=["stage-hide"],
        elem_id="beam-table",
    )
    with gr.Row():
        c["node"] = gr.Dropdown(
            label=i18n("beam.node"),
            choices=[],
            value=None,
            filterable=True,
            scale=2,
            info=i18n("beam.node.info"),
            elem_id="beam-node",
        )
        c["prefix_text"] = gr.Textbox(label=i18n("beam.prefix"), interactive=False, scale=3)
        c["open"] = gr.Button(i18n("beam.open"), scale=1, elem_id="beam-open")
    with gr.Row(elem_classes=["stage-hide"]):
        c["export"] = gr.Button(i18n("beam.export"), size="sm")
        c["save_trace"] = gr.Button(i18n("chat.save_trace"), size="sm")
        c["export_file"] = gr.File(label=i18n("beam.export_file"), interactive=False)
    return c


RUN_OUTPUTS = ["plot", "status", "table", "node", "prefix_text", "export_file"]
TEXT_OUTPUTS = ["plot", "status", "table", "node"]  # beam_texts: what a language switch says again


def render_beam_trace(
    data: dict[str, Any],
    pruned: Any = 2,
    show_greedy: bool = True,
    lang: str = DEFAULT,
    shown: BeamView | None = None,
) -> dict[str, Any]:
    """A recorded search's views (the tree holds every number), in lang; the tree drawn for the
    plot's frame and zoom when shown (replay's redraw, as the live tab's)."""
    tree = BeamTree.from_dict(data)
    return {
        "plot": plot_value(tree, pruned, show_greedy, "png", shown, lang=lang),
        "status": status_markdown(tree, lang),
        "table": hypothesis_table(tree, lang),
    }


def _wire(h: BeamHandlers, w: dict[str, Any]) -> None:
    """Events: run (button or Enter) and Stop, redraw on view options, node choice, export."""
    run_triggers = [w["run"].click, w["prompt"].submit]
    run, status = (h.beam_ticket, ["ticket"], h.beam_run, w, RUN_OUTPUTS), "status"  # Stop: its ticket
    connect_after_ticket(run_triggers, *run, api_name="beam_run", status=status)
    connect(w["stop"].click, h.beam_stop, w, ["status"], api_name="beam_stop", model=False)
    redraw = [w[k].change for k in ("pruned", "show_greedy", "image_format")]
    connect(
        redraw, h.beam_redraw, w, ["plot"], api_name="beam_redraw", model=False, trigger_mode="always_last"
    )
    chosen = connect(
        w["node"].input, h.beam_select_node, w, ["prefix_text"], api_name="beam_select_node", model=False
    )
    connect(chosen.success, h.beam_redraw, w, ["plot"], api_name=None, model=False)  # the ring moves
    clicked = ["node", "prefix_text", "plot"]
    connect(w["clicked"].change, h.beam_click_node, w, clicked, api_name=None, model=False)
    view = {"trigger_mode": "always_last"}
    connect(w["view"].change, h.beam_view, w, ["plot"], api_name=None, model=False, **view)
    connect(w["export"].click, h.beam_export, w, ["export_file"], api_name="beam_export", model=False)
    connect(w["save_trace"].click, h.beam_trace, w, ["export_file"], api_name="beam_trace", model=False)
    for example in PRESETS["beam"]:
        chosen_preset = _preset_handler(h, example.name)
        outputs = ["prompt", "chat", "status"]
        connect(w[f"preset_{example.name}"].click, chosen_preset, w, outputs, api_name=None, model=False)


def _preset_handler(h: BeamHandlers, name: str) -> Any:
    def beam_preset(request: gr.Request = None) -> dict[str, Any]:
        return h.beam_preset(name, request)

    beam_preset.__name__ = f"beam_preset_{name}"
    return beam_preset


def build_beam_tab(
    engine: Engine, workspaces: Workspaces, states: TabStates | None = None
) -> tuple[dict[str, Any], BeamHandlers]:
    """The Beam search tab (call inside a gr.Tab); returns its components by name ("open" is the
    "Open in Step by step" button, which app.py connects) and its handlers."""
    gr.Markdown(i18n("beam.intro"), elem_classes=["stage-hide"])
    w = {**_prompt_row(), **_search_settings(), **_view_options(), **_results()}
    handlers = BeamHandlers(engine, workspaces, states)
    _wire(handlers, w)
    return w, handlers

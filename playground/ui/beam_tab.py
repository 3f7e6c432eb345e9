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
from playground.plots.beam import PlotFrame, beam_tree_data, early_stopping_word, figure_config, node_focus
from playground.traces import new_trace, save_trace
from playground.ui.common import UncheckedSlider, as_number, connect, connect_after_ticket
from playground.ui.control_ranges import BEAM_LENGTH_PENALTY
from playground.ui.i18n import DEFAULT, localize, session_lang, t
from playground.ui.links import Link, link_opener
from playground.ui.ranges import CheckedSlider
from playground.ui.state import BeamView, TabStates
from playground.workspace import Workspace, Workspaces

EARLY_STOPPING = {"off": False, "on": True, "never": "never"}
HYPOTHESIS_COLUMNS = ["rank", "score", "cum log-prob", "tokens", "text"]
MAX_NODE_CHOICES = 3000  # the node list stays usable in the browser


# --- pure helpers (plain values in, component values out) ---------------------------------------


def parse_early_stopping(value: Any) -> bool | str:
    """'off' / 'on' / 'never' (or the engine's False / True / 'never') -> engine value."""
    if isinstance(value, bool) or value == "never":
        return value
    if value not in EARLY_STOPPING:
        raise PlaygroundError(f"Early stopping must be one of {', '.join(EARLY_STOPPING)}, got {value!r}.")
    return EARLY_STOPPING[value]


def plot_value(
    tree: BeamTree,
    pruned_per_parent: Any,
    show_greedy: bool,
    image_format: str,
    ws: Workspace | None = None,
    shown: BeamView | None = None,
) -> PlotData:
    """The figure as Gradio's plot payload, with a modebar that zooms and downloads PNG or SVG;
    drawn for the tab's view (unfolded nodes, chosen node, zoomed window, plot size) when given."""
    view: dict[str, Any] = {}
    if ws is not None and shown is not None:
        view = {
            "unfolded": shown.unfolded,
            "chosen": ws.beam_node,
            "window": shown.window,
            "frame": shown.frame,
        }
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
        raise PlaygroundError(f"Not a view of the tree: {view!r}.")
    x0, x1, y0, y1, area_w, area_h, fig_w, fig_h, fit, dark, presenter, room = values
    if not (x1 > x0 and y1 > y0 and 0 < area_w <= fig_w and 0 < area_h <= fig_h and room >= 0):
        raise PlaygroundError(f"Not a view of the tree: {view!r}.")
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
        steps = f"**{tree.steps_run} steps**, stopped: {tree.stop_reason}"
    lines = [
        f"{steps} · {len(tree.nodes) - 1} nodes "
        f"({counts[KEPT]} kept, {counts['finished']} finished, {counts[PRUNED]} pruned) · "
        f"prompt {len(tree.prompt_ids)} tokens · {tree.seconds:.2f} s"
    ]
    best = tree.hypotheses[0]
    name = t("beam.stopped.best_so_far" if tree.stopped else "beam.stopped.best", lang)
    lines.append(
        f"**{name}** (score {best.score:.3f}, cum log-prob {best.cum_logprob:.3f}): "
        f"{markdown_text(cut_off_shown(best.text))}"
    )
    if tree.greedy:
        greedy = tree.greedy[-1]
        lines.append(
            f"**Greedy** (cum log-prob {greedy.cum_logprob:.3f}, {len(tree.greedy)} tokens): "
            f"{markdown_text(cut_off_shown(tree.greedy_text or ''))}"
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


def node_choices(tree: BeamTree) -> list[tuple[str, int]]:
    """(label, node id) for the node list: returned hypotheses, then kept/finished, then pruned."""
    ranked = sorted((n for n in tree.nodes if n.rank), key=lambda n: n.rank or 0)
    live = [n for n in tree.nodes if n.fate not in (PRUNED, ROOT) and not n.rank]
    pruned = [n for n in tree.nodes if n.fate == PRUNED]
    ordered = [tree.nodes[0], *ranked, *live, *pruned][:MAX_NODE_CHOICES]
    return [(describe_node(n, tree.tree.label(n.id)), n.id) for n in ordered]


def node_prefix(tree: BeamTree, node_id: Any, tokenizer: Any) -> str:
    """The prompt plus the tokens up to a node, decoded as one sequence (characters split over
    byte tokens stay whole; one whose last bytes come after the node ends in "…")."""
    try:
        node_id = int(node_id)
    except (TypeError, ValueError):
        raise PlaygroundError(f"Choose a node from the list, got {node_id!r}.") from None
    if not 0 <= node_id < len(tree.nodes):
        raise PlaygroundError(f"Node #{node_id} is not in this tree (0 to {len(tree.nodes) - 1}).")
    return cut_off_shown(decode_ids(tokenizer, tree.prefix_ids(node_id)))


def export_json(tree: BeamTree | None) -> str:
    """Write the tree (BeamTree.to_dict) to a temporary .json file; returns its path."""
    if tree is None:
        raise PlaygroundError("Run a search first: there is no tree to export yet.")
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
        progress(0, desc="Beam search")

        def report(done: int, total: int) -> None:
            progress((done, total), desc="Beam search", unit="steps")

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
                    as_number(length_penalty, "length penalty"),
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
        ws, view = self._workspace(request), self._view(request)
        ws.beam, ws.beam_node = tree, tree.hypotheses[0].node_id
        view.unfolded, view.window = set(), None
        return {
            "plot": plot_value(tree, *drawing, ws, view),
            "status": status_markdown(tree, session_lang(request)),
            "table": hypothesis_rows(tree),
            "node": gr.Dropdown(choices=node_choices(tree), value=ws.beam_node),
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
        return (
            {}
            if ws.beam is None
            else {"plot": plot_value(ws.beam, pruned, show_greedy, image_format, ws, self._view(request))}
        )

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
            return {"plot": plot_value(ws.beam, pruned, show_greedy, image_format, ws, self._view(request))}
        if not target.isdigit():
            return {}
        prefix = self.beam_select_node(int(target), request)
        shown = self._view(request)
        view = {"unfolded": shown.unfolded, "window": shown.window, "frame": shown.frame}
        shown.window = (
            node_focus(ws.beam, int(target), int(pruned), bool(show_greedy), **view) or shown.window
        )
        return {
            "node": int(target),
            "prefix_text": prefix,
            "plot": plot_value(ws.beam, pruned, show_greedy, image_format, ws, self._view(request)),
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
        return {"plot": plot_value(ws.beam, pruned, show_greedy, image_format, ws, self._view(request))}

    def beam_select_node(self, node: Any, request: gr.Request = None) -> str:
        """Choose a node: its prefix (prompt + tokens up to it), and what Step by step will open."""
        ws = self._workspace(request)
        if ws.beam is None:
            raise PlaygroundError("Run a search first: there are no nodes to choose yet.")
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
            raise PlaygroundError("Run a search first: there is no tree to save yet.")
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
            label="Prompt",
            value="The best thing about beam search is",
            lines=2,
            scale=4,
            elem_id="beam-prompt",
        )
        with gr.Column(scale=1, min_width=180):
            c["chat"] = gr.Checkbox(
                label="Chat template", value=False, info="Wrap the prompt as a user turn."
            )
            with gr.Row():
                c["run"] = gr.Button("Run beam search", variant="primary", min_width=100, scale=2)
                c["stop"] = gr.Button("Stop", variant="stop", min_width=60, scale=1, elem_id="beam-stop")
    return c


def _search_settings() -> dict[str, Any]:
    info = {
        "beams": "How many partial texts survive each step: the best by total log-prob.",
        "steps": "At most this many new tokens per hypothesis.",
        "length_penalty": "Finished texts rank by log-prob / length^penalty: >0 favours longer.",
        "early_stopping": "on: stop once N texts ended; off: once none can win (guess); never: strict bound.",
    }
    c: dict[str, Any] = {}
    with gr.Row():
        c["beams"] = UncheckedSlider(1, MAX_BEAMS, value=4, step=1, label="Beams", info=info["beams"])
        c["steps"] = UncheckedSlider(1, MAX_NEW_TOKENS, value=12, step=1, label="Steps", info=info["steps"])
        c["length_penalty"] = CheckedSlider(
            *BEAM_LENGTH_PENALTY,
            value=1.0,
            step=0.1,
            label="Length penalty",
            info=info["length_penalty"],
            elem_classes=["stage-hide"],
        )
        c["early_stopping"] = gr.Radio(
            list(EARLY_STOPPING),
            value="off",
            label="Early stopping",
            info=info["early_stopping"],
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
            label="Pruned candidates drawn per node",
            info="Grey: scored but lost the race for a beam; the rest fold into a grey +N (click to unfold).",
        )
        c["show_greedy"] = gr.Checkbox(
            label="Overlay the greedy path",
            value=True,
            info="Dashed: always the single most likely token; beams can beat it.",
        )
        c["image_format"] = gr.Radio(
            ["png", "svg"],
            value="png",
            label="Image download format",
            info="The camera button of the plot saves the tree in this format.",
        )
    return c


def _results() -> dict[str, Any]:
    c: dict[str, Any] = {"status": gr.Markdown(elem_id="beam-status"), "ticket": gr.State(None)}
    gr.Markdown(
        "Click a node to choose it, a grey **+N** to unfold its pruned candidates. Click the tree, "
        "then the wheel zooms (Esc releases it); drag pans; a double click fits the tree again.",
        elem_classes=["beam-plot-help", "stage-hide"],
    )
    c["plot"] = gr.Plot(label="Search tree", show_label=False, elem_id="beam-plot")
    # static/beam.js writes the clicked node's id here (a plotly click is not a Gradio event),
    # and the plot's view (ranges, size) after a zoom, pan or resize.
    c["clicked"] = gr.Textbox(visible="hidden", elem_id="beam-clicked-node", label="clicked node")
    c["view"] = gr.Textbox(visible="hidden", elem_id="beam-view", label="plot view")
    c["table"] = gr.Dataframe(
        headers=HYPOTHESIS_COLUMNS,
        label="Returned hypotheses (best first)",
        interactive=False,
        elem_classes=["stage-hide"],
    )
    with gr.Row():
        c["node"] = gr.Dropdown(
            label="Node",
            choices=[],
            value=None,
            filterable=True,
            scale=2,
            info="Pick a node (or type its #id from the plot's hover) to see its prefix.",
        )
        c["prefix_text"] = gr.Textbox(
            label="Prefix (prompt + tokens up to the node)", interactive=False, scale=3
        )
        c["open"] = gr.Button("Open in Step by step", scale=1)
    with gr.Row(elem_classes=["stage-hide"]):
        c["export"] = gr.Button("Export tree (JSON)", size="sm")
        c["save_trace"] = gr.Button("Save trace (JSON)", size="sm")
        c["export_file"] = gr.File(label="tree JSON", interactive=False)
    return c


RUN_OUTPUTS = ["plot", "status", "table", "node", "prefix_text", "export_file"]


def render_beam_trace(data: dict[str, Any], pruned: Any = 2, show_greedy: bool = True) -> dict[str, Any]:
    """A recorded search's views (the tree holds every number)."""
    tree = BeamTree.from_dict(data)
    return {
        "plot": plot_value(tree, pruned, show_greedy, "png"),
        "status": status_markdown(tree),
        "table": hypothesis_rows(tree),
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


def build_beam_tab(
    engine: Engine, workspaces: Workspaces, states: TabStates | None = None
) -> tuple[dict[str, Any], BeamHandlers]:
    """The Beam search tab (call inside a gr.Tab); returns its components by name ("open" is the
    "Open in Step by step" button, which app.py connects) and its handlers."""
    gr.Markdown(
        "Beam search keeps the **N best partial texts** at every step. This is the search that "
        "really ran (same results as `model.generate`), with the candidates it pruned.",
        elem_classes=["stage-hide"],
    )
    w = {**_prompt_row(), **_search_settings(), **_view_options(), **_results()}
    handlers = BeamHandlers(engine, workspaces, states)
    _wire(handlers, w)
    return w, handlers

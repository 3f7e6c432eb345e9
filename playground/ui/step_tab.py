"""Step-by-step tab: see the next-token distribution stage by stage and choose the token yourself.

The browser tab's StepSession lives in its Workspace (engine side); its sampling settings and
view options are stored there when they change, so every action takes only its own inputs
(a token id, a seed, some text) and the HTTP API has short, named endpoints.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.engine.sampling import DEFAULT_ORDER, SamplingSettings
from playground.errors import PlaygroundError
from playground.messages import Message
from playground.step import StepSession, session_from_json, session_to_dict, session_to_json
from playground.step.snapshot import CANDIDATES_KEPT, take_snapshot
from playground.traces import new_trace, save_trace
from playground.ui.common import UncheckedSlider, as_whole, connect, parse_seed, warn
from playground.ui.control_ranges import STEP_SLIDERS
from playground.ui.i18n import DEFAULT, i18n, localize, session_lang, t
from playground.ui.links import Link, link_opener
from playground.ui.presets import PRESETS, build_presets, chinese_note, preset
from playground.ui.ranges import CheckedNumber, CheckedSlider
from playground.ui.step_render import (
    CANDIDATE_BUTTONS,
    DEFAULT_PROMPT,
    LEDGER_COLUMNS,
    SETTINGS_INPUTS,
    VIEW_OUTPUTS,
    _as_token_id,
    ledger_headers,
    parse_token_ids,
    probability_markdown,
    read_settings,
    render,
    settings_values,
    stage_choice,
)
from playground.workspace import Workspace, Workspaces

CHART_LABEL = Message.of_key("step.chart", "Candidates in the chart")
CHART_CANDIDATES = (5, CANDIDATES_KEPT)  # the chart's range; the snapshot keeps the most it shows

# --- handlers --------------------------------------------------------------------------------


class StepHandlers:
    """Thin handlers: parse, act on the tab's session, render every view by name."""

    def __init__(self, engine: Engine, workspaces: Workspaces | None = None) -> None:
        self.engine = engine
        self.workspaces = workspaces if workspaces is not None else Workspaces(engine)
        # Page load: the session a shared link describes, the one a preset opened before it, or the
        # default prompt started.
        self.step_from_link = link_opener("step", self._step_first_open, self._open_link, default=True)

    # sessions

    def step_start(self, prompt: str, chat: bool, request: gr.Request = None) -> dict[str, Any]:
        """Start a session on `prompt` (chat: wrapped in the chat template as a user turn)."""
        ws = self._workspace(request)
        session = StepSession(ws.engine, prompt or "", bool(chat), settings=self._settings(ws))
        return self._install(ws, session, session_lang(request))

    def _step_first_open(self, prompt: str, chat: bool, request: gr.Request = None) -> dict[str, Any]:
        """Page load without a link: the default prompt started, unless this page opened a session
        before its load ran (a preset clicked at once): that session stays on screen."""
        ws = self._workspace(request)
        if ws.step is not None:
            return self._redraw(ws, request)
        return self.step_start(prompt, chat, request)

    def _open_link(self, link: Link, values: dict[str, Any], request: Any) -> dict[str, Any]:
        """A shared link to a session (step_from_link): its prompt, settings, path and view."""
        ws, linked = self._workspace(request), link.values
        settings = {**settings_values(ws.step_settings), **linked}
        settings = read_settings(*(settings[name] for name in SETTINGS_INPUTS))
        session = StepSession(ws.engine, values["prompt"], values["chat"], settings=settings)
        try:
            session.append_tokens(linked.get("path", []))
        except BaseException:
            session.release()
            raise
        ws.step_settings = settings
        ws.step_view = (linked.get("candidates", ws.step_view[0]), linked.get("stage", ws.step_view[1]))
        views = self._install(ws, session, session_lang(request))
        return {**views, **settings_values(settings), "candidates": ws.step_view[0]}

    def link_values(self, request: gr.Request = None) -> dict[str, Any]:
        """What a link to this session carries: prompt, settings, the path's token ids, the view."""
        ws = self._workspace(request)
        if ws.step is None:
            return {}
        session = ws.step
        view = {"path": session.token_ids, "candidates": ws.step_view[0], "stage": ws.step_view[1]}
        return {"prompt": session.prompt, "chat": session.chat, **settings_values(session.settings), **view}

    def step_preset(self, name: str, request: gr.Request = None) -> dict[str, Any]:
        """An example from the texts (ui/presets.py): its prompt started as a raw prompt, and its text to
        force appended (今天天气很好: the chain rule's ledger, one forced token per factor)."""
        example, ws, lang = preset("step", name), self._workspace(request), session_lang(request)
        session = StepSession(ws.engine, example.text, False, settings=self._settings(ws))
        try:
            if example.force:
                session.force(example.force)
        except BaseException:
            session.release()
            raise
        return self._install(ws, session, lang)

    def step_texts(self, request: gr.Request = None) -> dict[str, Any]:
        """On the page load and a language switch: every view of the session on screen in the page's
        language, and the ledger's headers as the table's own (an empty table shows those)."""
        ws, headers = self._workspace(request), ledger_headers(session_lang(request))
        if ws.step is None:  # the page load opens the tab's session next, with its headers
            return {}
        views = self._redraw(ws, request)
        return {**views, "ledger": gr.Dataframe(views["ledger"], headers=headers)}

    def step_open_prefix(
        self, prompt: str, chat: bool, token_ids: Any, request: gr.Request = None
    ) -> dict[str, Any]:
        """Start a session on `prompt` with given token ids already appended (one forward)."""
        ws = self._workspace(request)
        session = StepSession(ws.engine, prompt or "", bool(chat), settings=self._settings(ws))
        session.append_tokens(parse_token_ids(token_ids))
        return self._install(ws, session, session_lang(request))

    def step_open_beam_node(self, request: gr.Request = None) -> dict[str, Any]:
        """The node chosen in the Beam search tab, with its path's numbers taken over (no replay)."""
        ws = self._workspace(request)
        tree, node = ws.beam, ws.beam_node
        if tree is None:
            raise PlaygroundError(
                "Run a beam search first: there is no node to open yet.", key="step.error.no_beam"
            )
        node_id = 0 if node is None else as_whole(node, Message("step.name.node", "node"))
        records = tree.records(tree.tree.node(node_id).id)
        session = StepSession.from_path(
            ws.engine, tree.prompt, tree.settings.chat, records, settings=self._settings(ws)
        )
        return self._install(ws, session, session_lang(request))

    def step_open_chat_token(self, open_position: Any, request: gr.Request = None) -> dict[str, Any]:
        """The chat answer up to its token at open_position (0-based), its numbers and cache taken over."""
        ws = self._workspace(request)
        chat = ws.chat
        if chat.tree is None or chat.request is None:
            raise PlaygroundError("No chat answer yet: send a message first.", key="step.error.no_chat")
        records = chat.tree.records(chat.tip)
        position = as_whole(open_position, Message("step.name.position", "token position"))
        if not 0 <= position < len(records):
            raise PlaygroundError(
                "Token position {position} is outside the answer (0..{last}).",
                key="step.error.position",
                position=position,
                last=len(records) - 1,
            )
        messages = chat.request.messages
        session = StepSession.from_path(
            ws.engine,
            messages[-1]["content"],
            True,
            records[: position + 1],
            settings=self._settings(ws),
            conversation=messages,
            system_prompt=chat.request.system_prompt,
            cache_from=chat.key,
        )
        return self._install(ws, session, session_lang(request))

    def open_clicked(self, event: gr.EventData, request: gr.Request = None) -> dict[str, Any]:
        """ "Step by step from here" clicked in a chat token's card (event data: position)."""
        data = getattr(event, "_data", None) or {}
        return self.step_open_chat_token(data.get("position"), request)

    def step_import(self, import_file: str | None, request: gr.Request = None) -> dict[str, Any]:
        """Replay an exported session or a step trace; the settings widgets show the file's settings.
        A file that cannot be imported is named in the status line (and a toast): the session on
        screen stays as it was."""
        if not import_file:
            raise PlaygroundError(
                "Choose a session or step trace (.json) to import.", key="step.error.no_file"
            )
        ws, name, lang = self._workspace(request), Path(import_file).name, session_lang(request)
        try:
            text = Path(import_file).read_text(encoding="utf-8", errors="replace")
            session = session_from_json(ws.engine, text)
        except PlaygroundError as exc:
            message = t("step.import.refused", lang, name=name, why=localize(exc.message, lang))
            warn(message, lang)
            return {"status": message, "import_file": None}  # the box empty: the next upload starts
        ws.step_settings = session.settings
        views = self._install(ws, session, lang)
        views["status"] = t("step.import.done", lang, name=name, status=views["status"])
        return {**views, **settings_values(session.settings)}

    def step_trace(self, request: gr.Request = None) -> str:
        """Save the session as a recorded trace: what the tab shows, and the session to import again."""
        ws = self._workspace(request)
        session = self._session(ws)
        data = {
            "snapshot": take_snapshot(session).to_dict(),
            "session": session_to_dict(session),
            "view": ws.step_view,
        }
        title = f"Step by step: {session.prompt[:50]}… {len(session.token_ids)} tokens"  # a file's, English
        return str(
            save_trace(new_trace("step", title, ws.engine, data), Path(tempfile.mkdtemp(prefix="trace-")))
        )

    def step_export(self, request: gr.Request = None) -> str:
        session = self._session(self._workspace(request))
        path = Path(tempfile.mkdtemp(prefix="step-session-")) / "step-session.json"
        path.write_text(session_to_json(session), encoding="utf-8")
        return str(path)

    # settings and view

    def step_settings(
        self,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        typical_p: float,
        repetition_penalty: float,
        order: list[str],
        request: gr.Request = None,
    ) -> dict[str, Any]:
        """Use these sampling settings for 'sample' and the stage view (stored for this tab)."""
        settings = read_settings(temperature, top_k, top_p, min_p, typical_p, repetition_penalty, order)
        ws = self._workspace(request)
        stage = ws.step_view[1] if settings == ws.step_settings else ""  # changed: show the last stage
        ws.step_settings, ws.step_view = settings, (ws.step_view[0], stage)
        return self._act(ws, lambda s: s.use_settings(settings), request) if ws.step is not None else {}

    def step_view(self, candidates: float, stage: str, request: gr.Request = None) -> dict[str, Any]:
        """How many candidates the chart shows and which stage's distribution."""
        ws = self._workspace(request)
        n, (low, high) = as_whole(candidates, CHART_LABEL), CHART_CANDIDATES
        if not low <= n <= high:
            raise PlaygroundError(
                "Candidates in the chart must be from {low} to {high}, got {value}.",
                key="step.chart.range",
                low=low,
                high=high,
                value=n,
            )
        ws.step_view = (n, stage or "raw")
        return self._redraw(ws, request) if ws.step is not None else {}

    def step_refresh(self, request: gr.Request = None) -> dict[str, Any]:
        ws = self._workspace(request)
        return self._redraw(ws, request) if ws.step is not None else {}

    # actions

    def step_pick(self, token_id: str | int, request: gr.Request = None) -> dict[str, Any]:
        """Append the token with this id (typed, or an int through the API)."""
        if token_id is None or not str(token_id).strip():
            raise PlaygroundError(
                "Type a token id to pick (or click a candidate).", key="step.error.no_token_id"
            )
        token = _as_token_id(token_id)
        return self._act(self._workspace(request), lambda s: s.pick(token), request)

    def step_pick_rank(self, rank: float, request: gr.Request = None) -> dict[str, Any]:
        """Pick the rank-th most likely candidate (what the candidate buttons and keys 1-9 do)."""
        n = as_whole(rank, Message("step.name.rank", "rank"))
        if n < 1:
            raise PlaygroundError(
                "Rank must be 1 or more (1 = the most likely token), got {n}.", key="step.error.rank", n=n
            )

        def pick(session: StepSession) -> None:
            cands = session.candidates(n)
            if len(cands) < n:
                raise PlaygroundError(
                    "There is no candidate {n}: the engine returned {count}.",
                    key="step.error.no_candidate",
                    n=n,
                    count=len(cands),
                )
            session.pick(cands[n - 1].token_id)

        return self._act(self._workspace(request), pick, request)

    def step_undo(self, request: gr.Request = None) -> dict[str, Any]:
        return self._act(self._workspace(request), lambda s: s.undo(), request)

    def step_greedy(self, request: gr.Request = None) -> dict[str, Any]:
        return self._act(self._workspace(request), lambda s: s.greedy(1), request)

    def step_sample(self, seed: str | float | None, request: gr.Request = None) -> dict[str, Any]:
        return self._act(self._workspace(request), lambda s: s.sample(None, parse_seed(seed)), request)

    def step_run(
        self,
        steps: float,
        seed: str | float | None,
        request: gr.Request = None,
        progress: Any = gr.Progress(),  # noqa: B008
    ) -> dict[str, Any]:
        """Sample `steps` tokens in a row (one seeded RNG)."""
        n = as_whole(steps, Message("step.name.steps", "number of steps"))
        desc = t("step.progress", session_lang(request))

        def run(session: StepSession) -> None:
            session.sample_steps(n, None, parse_seed(seed), lambda d, total: progress((d, total), desc=desc))

        return self._act(self._workspace(request), run, request)

    def step_force(self, force_text: str, request: gr.Request = None) -> dict[str, Any]:
        return self._act(self._workspace(request), lambda s: s.force(force_text or ""), request)

    def step_switch(self, branch: Any, request: gr.Request = None) -> dict[str, Any]:
        if branch is None or branch == "":
            raise PlaygroundError("Choose a branch to switch to.", key="step.error.no_branch")
        node = as_whole(branch, Message("step.name.branch", "branch"))
        return self._act(self._workspace(request), lambda s: s.switch_to(node), request)

    def step_probability(self, query: str, request: gr.Request = None) -> str:
        """The probability and rank of any text, or of a token id written #id."""
        target: int | str = query or ""
        if isinstance(target, str) and target.startswith("#") and target[1:].isdigit():
            target = int(target[1:])  # "#7042" asks about token id 7042
        session = self._session(self._workspace(request))
        return probability_markdown(session.probability_of(target), session.records, session_lang(request))

    # internals

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(getattr(request, "session_hash", None))

    @staticmethod
    def _settings(ws: Workspace) -> SamplingSettings:
        return ws.step_settings

    @staticmethod
    def _session(ws: Workspace) -> StepSession:
        if ws.step is None:
            raise PlaygroundError(
                "No step-by-step session yet: press Start first.", key="step.error.not_started"
            )
        return ws.step

    def _act(
        self, ws: Workspace, action: Callable[[StepSession], Any], request: gr.Request | None
    ) -> dict[str, Any]:
        session = self._session(ws)
        with session.locked():  # one state from the action to the last view rendered
            action(session)
            return render(session, *ws.step_view, session_lang(request), notes=_notes(session))

    def _redraw(self, ws: Workspace, request: gr.Request | None) -> dict[str, Any]:
        """Every view of the tab's session as it stands, in the page's language."""
        return self._act(ws, lambda session: None, request)

    def _install(self, ws: Workspace, session: StepSession, lang: str = DEFAULT) -> dict[str, Any]:
        ws.use_step(session)
        with session.locked():
            return render(session, *ws.step_view, lang, notes=_notes(session))


def _notes(session: StepSession) -> list[Message]:
    """What the view says besides the engine's notes: that this model writes the session's Chinese as
    byte tokens (and which model reads it as words)."""
    note = chinese_note(session.engine, session.prompt + session.text)
    return [note] if note else []


# --- layout and wiring -------------------------------------------------------------------------


def _settings_widgets(w: dict[str, Any]) -> None:
    """Sampling settings, each with a one-line lesson."""
    with gr.Accordion(i18n("step.settings"), open=False, elem_classes=["stage-hide"]):
        with gr.Row():
            for name, lo, hi, default, step in STEP_SLIDERS:
                w[name] = UncheckedSlider(
                    lo,
                    hi,
                    value=default,
                    step=step,
                    label=i18n(f"step.{name}"),
                    info=i18n(f"step.{name}.info"),
                    min_width=180,
                )
        w["order"] = gr.Dropdown(
            [stage_choice(name) for name in DEFAULT_ORDER],
            value=list(DEFAULT_ORDER),
            multiselect=True,
            label=i18n("step.order"),
            info=i18n("step.order.info"),
        )


def _action_rows(w: dict[str, Any]) -> None:
    """Undo / greedy / sample / run N, force text, probability of any text."""
    with gr.Row():
        w["undo"] = gr.Button(i18n("step.undo"), size="sm", min_width=90, elem_id="step-undo")
        w["greedy"] = gr.Button(i18n("step.greedy"), size="sm", min_width=100, elem_id="step-greedy")
        w["sample"] = gr.Button(
            i18n("step.sample"), size="sm", min_width=100, variant="primary", elem_id="step-sample"
        )
        w["steps"] = CheckedNumber(
            8, precision=0, minimum=1, maximum=512, label="N", min_width=80, elem_classes=["stage-hide"]
        )
        w["run"] = gr.Button(i18n("step.run"), size="sm", elem_classes=["stage-hide"], elem_id="step-run")
        w["continue_chat"] = gr.Button(
            i18n("step.continue_chat"), size="sm", min_width=120, elem_id="step-continue-chat"
        )
        w["open_lens"] = gr.Button(
            i18n("step.open_lens"),
            size="sm",
            min_width=90,
            elem_id="step-open-lens",
            elem_classes=["stage-hide"],
        )
    with gr.Row(elem_classes=["stage-hide"]):
        w["force_text"] = gr.Textbox(
            label=i18n("step.force_text"),
            scale=3,
            info=i18n("step.force_text.info"),
            elem_id="step-force-text",
        )
        w["force"] = gr.Button(i18n("step.force"), size="sm", elem_id="step-force")
    with gr.Row(elem_classes=["stage-hide"]):
        w["query"] = gr.Textbox(label=i18n("step.query"), scale=3, info=i18n("step.query.info"))
        w["ask"] = gr.Button(i18n("step.ask"), size="sm", elem_id="step-ask")
    w["answer"] = gr.Markdown(elem_classes=["stage-hide"])


def _candidate_column(w: dict[str, Any]) -> None:
    gr.Markdown(i18n("step.next_token"))
    for i, name in enumerate(CANDIDATE_BUTTONS, start=1):
        w[name] = gr.Button(visible=False, size="sm", elem_id=f"step-cand-{i}", elem_classes=["step-cand"])
    with gr.Row(elem_classes=["stage-hide"]):
        w["token_id"] = gr.Textbox(
            label=i18n("step.token_id"),
            placeholder=i18n("step.token_id.placeholder"),
            min_width=100,
            elem_id="step-token-id",
        )
        w["pick"] = gr.Button(i18n("step.pick"), size="sm", elem_id="step-pick")


def _main_views(w: dict[str, Any]) -> None:
    """The text, the actions and the distribution chart on the left, the candidates on the right."""
    with gr.Row():
        with gr.Column(scale=3):
            w["text"] = gr.HTML(elem_id="step-text")
            w["status"] = gr.Markdown(i18n("step.status.start"), elem_id="step-status")
            _action_rows(w)
            w["chart"] = gr.Plot(label=i18n("step.chart_label"), elem_id="step-chart")
        with gr.Column(scale=2, elem_id="step-candidates"):
            _candidate_column(w)
            w["stage"] = gr.Radio(
                [stage_choice("raw")], value="raw", label=i18n("step.stage"), info=i18n("step.stage.info")
            )
    with gr.Row(elem_classes=["stage-hide"]):
        w["curve"] = gr.Plot(label=i18n("step.curve"), elem_id="step-curve")
    w["ledger"] = gr.Dataframe(
        headers=LEDGER_COLUMNS,
        label=i18n("step.ledger"),
        interactive=False,
        wrap=True,
        elem_classes=["stage-hide"],
        elem_id="step-ledger",
    )
    with gr.Row(elem_classes=["stage-hide"]):
        w["tree"] = gr.HTML(label=i18n("step.tree"))
        with gr.Column():
            w["branch"] = gr.Dropdown([], label=i18n("step.branch"), info=i18n("step.branch.info"))
            w["switch"] = gr.Button(i18n("step.switch"), size="sm")


def _header(w: dict[str, Any]) -> None:
    with gr.Row():
        w["prompt"] = gr.Textbox(
            DEFAULT_PROMPT, label=i18n("step.prompt"), scale=4, lines=2, elem_id="step-prompt"
        )
        with gr.Column(scale=1, min_width=160):
            w["chat"] = gr.Checkbox(False, label=i18n("step.chat"), info=i18n("step.chat.info"))
            w["start"] = gr.Button(i18n("step.start"), variant="primary", elem_id="step-start")
    w.update(build_presets("step"))
    with gr.Row(elem_classes=["stage-hide"]):
        low, high = CHART_CANDIDATES
        w["candidates"] = CheckedSlider(low, high, value=10, step=1, label=i18n("step.chart"), scale=2)
        w["seed"] = gr.Textbox(
            "",
            label=i18n("step.seed"),
            placeholder=i18n("step.seed.placeholder"),
            info=i18n("step.seed.info"),
            scale=1,
        )


def _wire(h: StepHandlers, w: dict[str, Any]) -> None:
    """Events that act on the session and re-render every view."""
    views = VIEW_OUTPUTS
    on = {"status": "status"}
    connect([w["start"].click, w["prompt"].submit], h.step_start, w, views, api_name="step_start", **on)
    connect(w["pick"].click, h.step_pick, w, views, api_name="step_pick", **on)
    connect(w["undo"].click, h.step_undo, w, views, api_name="step_undo", **on)
    connect(w["greedy"].click, h.step_greedy, w, views, api_name="step_greedy", **on)
    connect(w["sample"].click, h.step_sample, w, views, api_name="step_sample", **on)
    connect(w["run"].click, h.step_run, w, views, api_name="step_run", **on)
    connect([w["force"].click, w["force_text"].submit], h.step_force, w, views, api_name="step_force", **on)
    connect(w["switch"].click, h.step_switch, w, views, api_name="step_switch", **on)
    connect(
        [w["ask"].click, w["query"].submit],
        h.step_probability,
        w,
        ["answer"],
        api_name="step_probability",
        **on,
    )
    connect(w["export"].click, h.step_export, w, ["export_file"], api_name="step_export", model=False)
    connect(w["save_trace"].click, h.step_trace, w, ["export_file"], api_name="step_trace", status="status")
    imported = [*views, "import_file", *SETTINGS_INPUTS]
    connect(w["import_file"].upload, h.step_import, w, imported, api_name="step_import", **on)
    settings = [w[name].change for name in SETTINGS_INPUTS]
    connect(settings, h.step_settings, w, views, api_name="step_settings", trigger_mode="always_last", **on)
    view_triggers = [w["stage"].input, w["candidates"].release, w["candidates"].input]
    connect(view_triggers, h.step_view, w, views, api_name="step_view", trigger_mode="always_last", **on)
    connect(w["refresh"].click, h.step_refresh, w, views, api_name="step_refresh", **on)
    connect(w["pick_rank"].click, h.step_pick_rank, w, views, api_name="step_pick_rank", **on)
    for i, name in enumerate(CANDIDATE_BUTTONS, start=1):
        pick = _pick_rank_handler(h, i)
        connect(w[name].click, pick, w, views, api_name=None, **on)
    for example in PRESETS["step"]:
        chosen = _preset_handler(h, example.name)
        connect(w[f"preset_{example.name}"].click, chosen, w, views, api_name=None, **on)


def _preset_handler(h: StepHandlers, name: str) -> Callable[..., dict[str, Any]]:
    def step_preset(request: gr.Request = None) -> dict[str, Any]:
        return h.step_preset(name, request)

    step_preset.__name__ = f"step_preset_{name}"
    return step_preset


def _pick_rank_handler(h: StepHandlers, rank: int) -> Callable[..., dict[str, Any]]:
    def pick_candidate(request: gr.Request = None) -> dict[str, Any]:
        return h.step_pick_rank(rank, request)

    pick_candidate.__name__ = f"pick_candidate_{rank}"
    return pick_candidate


def build_step_tab(engine: Engine, workspaces: Workspaces) -> tuple[dict[str, Any], StepHandlers]:
    """The Step-by-step tab (call inside a gr.Tab); returns its components by name and its
    handlers (other tabs open their paths here through them)."""
    h = StepHandlers(engine, workspaces)
    w: dict[str, Any] = {}
    _header(w)
    _settings_widgets(w)
    _main_views(w)
    with gr.Row():
        w["export"] = gr.Button(i18n("step.export"), size="sm")
        w["save_trace"] = gr.Button(i18n("chat.save_trace"), size="sm")
        w["export_file"] = gr.File(label=i18n("step.export_file"), interactive=False)
        w["import_file"] = gr.File(
            label=i18n("step.import_file"),
            file_types=[".json"],
            type="filepath",
            elem_id="step-import",
        )
    hidden = {"visible": "hidden"}  # endpoints for the API (the buttons above use the same handlers)
    w["refresh"] = gr.Button("Refresh", **hidden)  # never shown: its words need no other language
    w["rank"] = CheckedNumber(label="rank", precision=0, **hidden)
    w["pick_rank"] = gr.Button("Pick rank", **hidden)
    _wire(h, w)
    return w, h

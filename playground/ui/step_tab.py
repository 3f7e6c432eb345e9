"""Step-by-step tab: see the next-token distribution stage by stage and choose the token yourself.

Only a session id lives in gr.State; the StepSession (tree, ids) lives in an engine-side
SessionStore and its KV cache in the KV store. Handlers validate the settings first, act on
the session, then render every view from it.
"""

from __future__ import annotations

import html
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.plots_step import cumulative_logprob_figure, distribution_figure
from playground.sampling import DEFAULT_ORDER, SamplingSettings, validate_settings
from playground.session_store import SessionStore
from playground.stepper import Node, StepSession, TextProbability
from playground.tokens import decode_ids, stream_pieces, token_piece
from playground.ui.common import UncheckedSlider, as_whole, model_event, model_handler, parse_seed
from playground.ui.token_html import legend_html, token_span

N_BUTTONS = 10  # candidate buttons (keys 1-9 pick the first nine)
VIEW_OUTPUTS = 2 + N_BUTTONS + 7  # text, status, buttons, ids, chart, stage, ledger, curve, tree, branches
LEDGER_COLUMNS = ["step", "token", "how", "prob", "log-prob", "rank", "entropy", "cum log-prob", "perplexity"]
LEDGER_COLUMNS.append("after sampling")
SESSIONS = SessionStore()  # every tab's StepSession, by the id its gr.State holds


@dataclass
class StepTab:
    """What other tabs need to open a prefix here (see `connect_open_prefix`)."""

    session_id: gr.State
    prompt: gr.Textbox
    chat: gr.Checkbox
    view_inputs: list[gr.components.Component]  # candidates count, stage, sampling settings
    full_outputs: list[gr.components.Component]  # session id, prompt, chat, then every view
    open_prefix: Callable[..., tuple]  # (session_id, prompt, chat, token_ids, *view) -> full outputs
    start: Callable[..., tuple]  # (session_id, prompt, chat, *view) -> full outputs

    def connect_start(self, trigger: Callable[..., Any]) -> Any:
        """Wire e.g. `demo.load` so the tab opens with its default prompt already started."""
        inputs = [self.session_id, self.prompt, self.chat, *self.view_inputs]
        return trigger(self.start, inputs, self.full_outputs, api_visibility="private", **model_event())

    def connect_open_prefix(self, trigger: Callable[..., Any], prompt: Any, chat: Any, token_ids: Any) -> Any:
        """Wire e.g. `button.click` so it opens prompt + token_ids (components) in this tab."""
        return trigger(
            self.open_prefix,
            inputs=[self.session_id, prompt, chat, token_ids, *self.view_inputs],
            outputs=self.full_outputs,
            api_name="step_open_prefix",
            **model_event(),
        )


# --- rendering (pure: session -> component values) ---------------------------------------


def read_settings(
    temperature: float, top_k: float, top_p: float, min_p: float, typical_p: float, rep: float, order: Any
) -> SamplingSettings:
    """The settings widgets' values as validated SamplingSettings (errors name the bad value)."""
    values = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    values |= {"typical_p": typical_p, "repetition_penalty": rep}
    if order:  # chosen stages first, in the order chosen; the rest keep the default order
        chosen = [name for name in order if name in DEFAULT_ORDER]
        values["order"] = chosen + [name for name in DEFAULT_ORDER if name not in chosen]
    return validate_settings(values)


def settings_values(settings: SamplingSettings) -> tuple:
    """Values for the settings widgets (read_settings' argument order) showing `settings`."""
    s = settings
    return (s.temperature, s.top_k, s.top_p, s.min_p, s.typical_p, s.repetition_penalty, list(s.order))


def text_html(session: StepSession) -> str:
    """Prompt (dimmed) then the generated tokens coloured by probability, with hover cards.

    The span texts are the whole sequence decoded incrementally (`stream_pieces`), so the text
    reads exactly as decoded; a token that only begins a character gets an empty
    'tok-partial' span (its bytes are in its card) and the token that completes it the character."""
    tokenizer = session.lm.tokenizer
    prompt = html.escape(decode_ids(tokenizer, session.prompt_ids)).replace("\n", "<br>")
    spans = [f"<span class='tok-prompt'>{prompt}</span>"]
    pieces = stream_pieces(tokenizer, session.ids, len(session.prompt_ids))
    for entry, text in zip(session.ledger, pieces, strict=True):
        rows = [
            ("token", f"{entry.piece.visible} (id {entry.token_id})"),
            ("probability", f"{entry.prob:.2%}"),
            ("log-prob", f"{entry.logprob:.3f}"),
            ("rank", str(entry.rank)),
            ("entropy", f"{entry.entropy:.2f} nats"),
            ("chosen by", entry.source),
        ]
        if entry.sampled_prob is not None:
            rows.append(("after sampling", f"{entry.sampled_prob:.2%}"))
        span = token_span(text, entry.prob, rows, entry.piece.special)
        spans.append(span if text else span.replace("class='tok", "class='tok tok-partial", 1))
    return f"{legend_html()}<div class='token-stream step-text'>{''.join(spans)}</div>"


def status_markdown(session: StepSession) -> str:
    ledger = session.ledger
    used = len(session.ids)
    if not ledger:
        return f"Prompt: {len(session.prompt_ids)} tokens · context {used}/{session.lm.context_length}"
    last = ledger[-1]
    return (
        f"{len(ledger)} generated tokens · log P = {last.cum_logprob:.3f} · perplexity {last.perplexity:.2f}"
        f" · context {used}/{session.lm.context_length}"
    )


def candidate_buttons(session: StepSession, settings: SamplingSettings) -> tuple[list[dict], list[int]]:
    """Button updates for the top candidates and the token ids they stand for."""
    cands = session.candidates(N_BUTTONS, settings)
    updates = []
    for i, cand in enumerate(cands, start=1):
        after = f"{cand.sampled_prob:.1%} after sampling" if cand.kept else "removed by sampling"
        key = f"[{i}] " if i <= 9 else ""
        updates.append(
            gr.update(value=f"{key}{cand.piece.visible}   {cand.prob:.1%} · {after}", visible=True)
        )
    updates += [gr.update(visible=False)] * (N_BUTTONS - len(cands))
    return updates, [c.token_id for c in cands]


def distribution_view(session: StepSession, settings: SamplingSettings, k: int, stage_name: str) -> tuple:
    """The bar chart after the chosen stage, and the stage selector's choices."""
    stages = session.stages(settings)
    names = [s.name for s in stages]
    stage = stages[names.index(stage_name)] if stage_name in names else stages[-1]
    cands = session.candidates(k, settings)
    ids = [c.token_id for c in cands]
    labels = [f"{c.rank}. {c.piece.visible}" for c in cands]
    figure = distribution_figure(
        labels,
        [c.prob for c in cands],
        [float(stage.probs[t]) for t in ids],
        [bool(stage.probs[t] == 0) for t in ids],
        stage.name,
    )
    return figure, gr.update(choices=names, value=stage.name)


def ledger_rows(session: StepSession) -> list[list[Any]]:
    rows = []
    for e in session.ledger:
        sampled = None if e.sampled_prob is None else round(e.sampled_prob, 6)
        rows.append([e.step, e.piece.visible, e.source, round(e.prob, 6), round(e.logprob, 4), e.rank])
        rows[-1] += [round(e.entropy, 3), round(e.cum_logprob, 4), round(e.perplexity, 3), sampled]
    return rows


def tree_html(session: StepSession) -> str:
    """The branch tree: chains of single tokens as one segment, branch points as nested lists."""
    if not session.nodes[0].children:
        return "<div class='step-tree'><i>No tokens yet.</i></div>"
    on_path = set(session.path)
    return f"<div class='step-tree'>{_subtree(session, 0, on_path)}</div>"


def _subtree(session: StepSession, node_id: int, on_path: set[int]) -> str:
    items = []
    for child in session.nodes[node_id].children:
        chain = _chain(session.nodes, child)
        text = "".join(token_piece(session.lm.tokenizer, session.nodes[n].token_id).visible for n in chain)
        current = "step-current" if chain[-1] in on_path or chain[0] in on_path else ""
        label = f"<span class='{current}'>{html.escape(text)}</span> <small>#{chain[-1]}</small>"
        items.append(f"<li>{label}{_subtree(session, chain[-1], on_path)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _chain(nodes: list[Node], start: int) -> list[int]:
    chain = [start]
    while len(nodes[chain[-1]].children) == 1:
        chain.append(nodes[chain[-1]].children[0])
    return chain


def branch_choices(session: StepSession) -> dict:
    choices = [
        (f"#{b.node_id} · {b.length} tokens · …{b.text[-40:]!r}", b.node_id) for b in session.branches()
    ]
    current = next((b.node_id for b in session.branches() if b.current), None)
    return gr.update(choices=choices, value=current)


def render(session: StepSession, settings: SamplingSettings, k: int, stage_name: str) -> tuple:
    """Every view of the tab, in the order of the tab's view outputs."""
    buttons, ids = candidate_buttons(session, settings)
    figure, stage_update = distribution_view(session, settings, k, stage_name)
    ledger = session.ledger
    cum_fig = cumulative_logprob_figure([e.logprob for e in ledger], [e.piece.visible for e in ledger])
    return (
        text_html(session),
        status_markdown(session),
        *buttons,
        ids,
        figure,
        stage_update,
        ledger_rows(session),
        cum_fig,
        tree_html(session),
        branch_choices(session),
    )


def probability_markdown(result: TextProbability) -> str:
    head = result.tokens[0]
    lines = [
        f"**{html.escape(repr(result.text))}**: P = {result.prob:.3g} (log-prob {result.logprob:.3f}) · "
        f"first token rank {head.rank} · first token after sampling {head.sampled_prob:.3g}"
    ]
    if len(result.tokens) > 1:
        lines += [
            f"- `{t.piece.visible}` (id {t.token_id}): P = {t.prob:.3g}, rank {t.rank}" for t in result.tokens
        ]
    return "\n".join(lines)


def parse_token_ids(value: Any) -> list[int]:
    """A list of ids, or text holding them (JSON list, or separated by commas/spaces)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = (
                json.loads(text) if text.startswith("[") else [int(p) for p in text.replace(",", " ").split()]
            )
        except ValueError as exc:
            raise PlaygroundError(f"Token ids must be integers, got {value!r}") from exc
    if not isinstance(value, Sequence) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        raise PlaygroundError(f"Token ids must be a list of integers, got {value!r}")
    return list(value)


# --- handlers --------------------------------------------------------------------------------


class StepHandlers:
    """Thin handlers: parse, call the session, render. view = (k, stage, *settings widgets)."""

    def __init__(self, lm: LoadedModel, sessions: SessionStore = SESSIONS) -> None:
        self.lm = lm
        self.sessions = sessions

    def _act(
        self, session_id: str, view: Sequence[Any], action: Callable[[StepSession, SamplingSettings], Any]
    ) -> tuple:
        k, stage, *widgets = view
        settings = read_settings(*widgets)  # bad settings: error before anything changes
        session = self.sessions.get(session_id)
        with session.locked():  # one state from the action to the last view rendered
            session.use_settings(settings)  # export writes the settings on screen
            action(session, settings)
            return render(session, settings, int(k), stage)

    def _install(self, session_id: str, session: StepSession, view: Sequence[Any]) -> tuple:
        k, stage = view[0], view[1]
        if session_id:
            self.sessions.replace(session_id, session)
        else:
            session_id = self.sessions.add(session)
        with session.locked():
            views = render(session, session.settings, int(k), stage)
        return (session_id, session.prompt, session.chat, *views)

    def start(self, session_id: str, prompt: str, chat: bool, *view: Any) -> tuple:
        settings = read_settings(*view[2:])
        return self._install(session_id, StepSession(self.lm, prompt, bool(chat), settings=settings), view)

    def open_prefix(self, session_id: str, prompt: str, chat: bool, token_ids: Any, *view: Any) -> tuple:
        ids = parse_token_ids(token_ids)
        session = StepSession(self.lm, prompt, bool(chat), settings=read_settings(*view[2:]))
        session.append_tokens(ids)
        return self._install(session_id, session, view)

    def import_file(self, session_id: str, path: str | None, *view: Any) -> tuple:
        """Full outputs, then the settings widgets set to the file's settings."""
        if not path:
            raise PlaygroundError("Choose a session .json file to import.")
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        session = StepSession.from_json(self.lm, text)
        return (*self._install(session_id, session, view), *settings_values(session.settings))

    def export_file(self, session_id: str) -> str:
        session = self.sessions.get(session_id)
        folder = Path(tempfile.mkdtemp(prefix="step-session-"))
        path = folder / "step-session.json"
        path.write_text(session.to_json(), encoding="utf-8")
        return str(path)

    def pick(self, session_id: str, token_id: Any, *view: Any) -> tuple:
        token = _as_token_id(token_id)
        return self._act(session_id, view, lambda s, _: s.pick(token))

    def pick_nth(self, n: int) -> Callable[..., tuple]:
        def pick_candidate(session_id: str, shown_ids: list[int], *view: Any) -> tuple:
            if not shown_ids or n > len(shown_ids):
                raise PlaygroundError(f"There is no candidate {n} on screen.")
            return self._act(session_id, view, lambda s, _: s.pick(int(shown_ids[n - 1])))

        pick_candidate.__name__ = f"pick_candidate_{n}"
        return pick_candidate

    def undo(self, session_id: str, *view: Any) -> tuple:
        return self._act(session_id, view, lambda s, _: s.undo())

    def greedy(self, session_id: str, *view: Any) -> tuple:
        return self._act(session_id, view, lambda s, _: s.greedy(1))

    def sample(self, session_id: str, seed: Any, *view: Any) -> tuple:
        return self._act(session_id, view, lambda s, settings: s.sample(settings, parse_seed(seed)))

    def run_steps(self, session_id: str, n: Any, seed: Any, *view: Any, progress=gr.Progress()) -> tuple:  # noqa: B008
        steps = as_whole(n, "number of steps")

        def run(session: StepSession, settings: SamplingSettings) -> None:
            session.sample_steps(
                steps, settings, parse_seed(seed), lambda d, t: progress((d, t), desc="steps")
            )

        return self._act(session_id, view, run)

    def force(self, session_id: str, text: str, *view: Any) -> tuple:
        return self._act(session_id, view, lambda s, _: s.force(text or ""))

    def switch(self, session_id: str, node_id: Any, *view: Any) -> tuple:
        if node_id is None:
            raise PlaygroundError("Choose a branch to switch to.")
        return self._act(session_id, view, lambda s, _: s.switch_to(as_whole(node_id, "branch")))

    def refresh(self, session_id: str, *view: Any) -> tuple:
        if not session_id:  # settings touched before Start: nothing to show yet
            return tuple(gr.skip() for _ in range(VIEW_OUTPUTS))
        return self._act(session_id, view, lambda s, _: None)

    def probability(self, session_id: str, query: str, *view: Any) -> str:
        settings = read_settings(*view[2:])
        target: int | str = query or ""
        if isinstance(target, str) and target.startswith("#") and target[1:].isdigit():
            target = int(target[1:])  # "#7042" asks about token id 7042
        session = self.sessions.get(session_id)
        session.use_settings(settings)
        return probability_markdown(session.probability_of(target, settings))


def _as_token_id(value: Any) -> Any:
    """Integral numbers become ints; anything else goes to the session, which names it."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# --- layout and wiring -------------------------------------------------------------------------

# name, label, minimum, maximum, default, step, one-line lesson
SLIDERS = [
    (
        "temperature",
        "temperature",
        0,
        2,
        1.0,
        0.05,
        "Divides the logits: <1 sharpens, >1 flattens, 0 = top token",
    ),
    ("top_k", "top-k", 0, 200, 0, 1, "Keep only the k most likely tokens (0 = off)"),
    (
        "top_p",
        "top-p",
        0.01,
        1,
        1.0,
        0.01,
        "Keep the fewest top tokens whose probabilities reach p (1 = off)",
    ),
    ("min_p", "min-p", 0, 1, 0.0, 0.01, "Drop tokens less likely than min-p × the top token (0 = off)"),
    (
        "typical_p",
        "typical-p",
        0.01,
        1,
        1.0,
        0.01,
        "Keep tokens whose surprise is near the average (1 = off)",
    ),
    (
        "rep",
        "repetition penalty",
        0.5,
        2,
        1.0,
        0.05,
        ">1 makes tokens already in the text less likely (1 = off)",
    ),
]


def _settings_widgets() -> list[gr.components.Component]:
    """Sampling settings (in read_settings' argument order), each with a one-line lesson."""
    with gr.Accordion("Sampling settings (used by 'sample', shown as stages)", open=False):
        with gr.Row():
            sliders = [
                UncheckedSlider(lo, hi, value=default, step=step, label=label, info=info, min_width=180)
                for _, label, lo, hi, default, step, info in SLIDERS
            ]
        order = gr.Dropdown(
            list(DEFAULT_ORDER),
            value=list(DEFAULT_ORDER),
            multiselect=True,
            label="stage order",
            info="Stages run in this order (default: the order of transformers' generate)",
        )
    return [*sliders, order]


@dataclass
class _Widgets:
    text: gr.HTML
    status: gr.Markdown
    buttons: list[gr.Button]
    shown_ids: gr.State
    dist_plot: gr.Plot
    stage: gr.Radio
    ledger: gr.Dataframe
    cum_plot: gr.Plot
    tree: gr.HTML
    branch: gr.Dropdown

    def outputs(self) -> list[gr.components.Component]:
        return [self.text, self.status, *self.buttons, self.shown_ids, self.dist_plot, self.stage,
                self.ledger, self.cum_plot, self.tree, self.branch]  # fmt: skip


def _action_row(c: dict[str, Any]) -> None:
    """Undo / greedy / sample / run N, force text, probability of any text."""
    with gr.Row():
        c["undo"] = gr.Button("↶ Undo", size="sm")
        c["greedy"] = gr.Button("Greedy step", size="sm")
        c["sample"] = gr.Button("Sample step", size="sm", variant="primary")
        c["n"] = gr.Number(8, precision=0, minimum=1, maximum=512, label="N", min_width=80)
        c["run"] = gr.Button("Run N steps", size="sm")
    with gr.Row():
        c["force_text"] = gr.Textbox(
            label="force text", scale=3, info="Append any text, even unlikely tokens"
        )
        c["force"] = gr.Button("Force", size="sm")
    with gr.Row():
        info = "Any text, or #id for a token id: its probability and rank here"
        c["query"] = gr.Textbox(label="probability of…", scale=3, info=info)
        c["ask"] = gr.Button("Ask", size="sm")
    c["answer"] = gr.Markdown()


def _candidate_column(c: dict[str, Any]) -> list[gr.Button]:
    gr.Markdown("**Next token** (click, or press 1–9)")
    buttons = [
        gr.Button(visible=False, size="sm", elem_id=f"step-cand-{i}", elem_classes=["step-cand"])
        for i in range(1, N_BUTTONS + 1)
    ]
    with gr.Row():
        c["token_id"] = gr.Number(label="token id", precision=0, min_width=100)
        c["pick"] = gr.Button("Pick", size="sm")
    return buttons


def _main_views() -> tuple[_Widgets, dict[str, Any]]:
    c: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.HTML(elem_id="step-text")
            status = gr.Markdown("Type a prompt and press **Start**.")
            _action_row(c)
        with gr.Column(scale=2, elem_id="step-candidates"):
            buttons = _candidate_column(c)
    with gr.Row():
        with gr.Column():
            info = "Each stage reshapes or cuts the distribution; grey bars were removed"
            stage = gr.Radio(["raw"], value="raw", label="distribution after stage", info=info)
            dist_plot = gr.Plot(label="raw vs after sampling")
        cum_plot = gr.Plot(label="cumulative log-prob (chain rule)")
    label = "ledger: log P(text) = the sum of the steps' log-probs"
    ledger = gr.Dataframe(headers=LEDGER_COLUMNS, label=label, interactive=False, wrap=True)
    with gr.Row():
        tree = gr.HTML(label="branch tree")
        with gr.Column():
            branch = gr.Dropdown(
                [], label="branches", info="Every continuation you undid is kept: switch back"
            )
            c["switch"] = gr.Button("Switch to branch", size="sm")
    widgets = _Widgets(text, status, buttons, gr.State([]), dist_plot, stage, ledger, cum_plot, tree, branch)
    return widgets, c


def _wire_steps(
    on: Callable[..., Any], h: StepHandlers, sid: gr.State, v: _Widgets, c: dict, view: list
) -> None:
    """Events that act on the session and re-render every view."""
    on(c["pick"].click, h.pick, [sid, c["token_id"], *view], "step_pick")
    for i, button in enumerate(v.buttons, start=1):
        on(button.click, h.pick_nth(i), [sid, v.shown_ids, *view], f"step_pick_candidate_{i}")
    on(c["undo"].click, h.undo, [sid, *view], "step_undo")
    on(c["greedy"].click, h.greedy, [sid, *view], "step_greedy")
    on(c["sample"].click, h.sample, [sid, c["seed"], *view], "step_sample")
    on(c["run"].click, h.run_steps, [sid, c["n"], c["seed"], *view], "step_run")
    on(c["force"].click, h.force, [sid, c["force_text"], *view], "step_force")
    on(c["force_text"].submit, h.force, [sid, c["force_text"], *view], "step_force_submit")
    on(c["switch"].click, h.switch, [sid, v.branch, *view], "step_switch")
    on(c["ask"].click, h.probability, [sid, c["query"], *view], "step_probability", [c["answer"]])


def _header() -> tuple[gr.Textbox, gr.Checkbox, gr.Button, gr.Slider, gr.Textbox]:
    with gr.Row():
        prompt = gr.Textbox("The capital of France is", label="prompt", scale=4, lines=2)
        with gr.Column(scale=1, min_width=160):
            chat = gr.Checkbox(
                False, label="chat", info="Wrap the prompt in the chat template as a user turn"
            )
            start = gr.Button("Start", variant="primary")
    with gr.Row():
        k = gr.Slider(5, 40, value=10, step=1, label="candidates in the chart", scale=2)
        seed = gr.Textbox(
            "", label="seed", placeholder="random", info="Same seed, same draws (empty = random)", scale=1
        )
    return prompt, chat, start, k, seed


def build_step_tab(lm: LoadedModel) -> StepTab:
    """The Step-by-step tab (call inside a gr.Tab); returns what other tabs need to open a prefix."""
    h, sid = StepHandlers(lm), gr.State("")
    prompt, chat, start, k, seed = _header()
    settings = _settings_widgets()
    views, c = _main_views()
    c["seed"] = seed
    with gr.Row():
        export_button = gr.Button("Export session (JSON)", size="sm")
        export_file = gr.File(label="exported session", interactive=False)
        import_file = gr.File(label="import a session to replay it", file_types=[".json"], type="filepath")
    view = [k, views.stage, *settings]
    outputs, full = views.outputs(), [sid, prompt, chat, *views.outputs()]

    def on(
        trigger: Any, fn: Callable, inputs: list, name: str, outs: list | None = None, **extra: Any
    ) -> Any:
        kwargs = {"inputs": inputs, "outputs": outs or outputs, "api_name": name, **model_event(), **extra}
        return trigger(fn=model_handler(fn), **kwargs)

    on(start.click, h.start, [sid, prompt, chat, *view], "step_start", full)
    on(prompt.submit, h.start, [sid, prompt, chat, *view], "step_start_submit", full)
    _wire_steps(on, h, sid, views, c, view)
    on(export_button.click, h.export_file, [sid], "step_export", [export_file])
    on(import_file.upload, h.import_file, [sid, import_file, *view], "step_import", [*full, *settings])
    triggers = [views.stage.input, k.release, *[w.change for w in settings]]
    on(gr.on, h.refresh, [sid, *view], "step_refresh", triggers=triggers, trigger_mode="always_last")
    return StepTab(sid, prompt, chat, view, full, model_handler(h.open_prefix), model_handler(h.start))

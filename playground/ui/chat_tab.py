"""Chat tab: streaming answers, each token coloured by its probability, forks at any token.

Handlers name their inputs by their parameters and return {component name: value}; the
browser tab's chat lives in its Workspace (engine side), keyed by Gradio's session id.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr

from playground.chat import ChatRequest, ChatSession, ChatUpdate, message_role, normalize_history, with_footer
from playground.engine.base import Engine
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import token_piece
from playground.errors import PlaygroundError
from playground.settings import Settings
from playground.traces import new_trace, save_trace
from playground.ui.common import UncheckedSlider, as_number, as_whole, connect, parse_seed
from playground.ui.links import link_to
from playground.ui.token_html import answer_tokens_html, legend_html, templated_stream_html
from playground.workspace import Workspace, Workspaces

FORK_HINT = "hover or click a token: its alternatives fork the answer there"
# A token card's buttons are plain HTML: the token view turns their clicks into Gradio events
# with the position (and token) as event data: "select" forks, "click" opens Step by step.
TOKEN_CARD_CLICKS = """
element.addEventListener('click', (event) => {
  const fork = event.target.closest('.tok-alt');
  const open = event.target.closest('.tok-open');
  if (!fork && !open) return;
  event.preventDefault();
  document.activeElement?.blur?.();
  if (fork) trigger('select', {position: Number(fork.dataset.pos), token: Number(fork.dataset.token)});
  else trigger('click', {position: Number(open.dataset.pos)});
});
"""
# What every answering handler may set.
ANSWER_OUTPUTS = ["message", "history", "token_view", "status", "branch"]
CONTROLS = [
    "system_prompt",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "max_new_tokens",
    "seed",
]


@dataclass(frozen=True)
class SamplingInputs:
    """The sampling controls' values as they arrive from the UI or the API."""

    temperature: Any
    top_k: Any
    top_p: Any
    min_p: Any
    repetition_penalty: Any
    max_new_tokens: Any
    seed: Any

    def settings(self) -> SamplingSettings:
        return SamplingSettings(
            temperature=as_number(self.temperature, "temperature"),
            top_k=as_whole(self.top_k, "top-k"),
            top_p=as_number(self.top_p, "top-p"),
            min_p=as_number(self.min_p, "min-p"),
            repetition_penalty=as_number(self.repetition_penalty, "repetition penalty"),
        )

    def request(self, messages: list[dict[str, str]], system_prompt: str) -> ChatRequest:
        """The engine request; every bad value is named."""
        max_new = as_whole(self.max_new_tokens, "max new tokens")
        return ChatRequest(messages, system_prompt or "", self.settings(), max_new, parse_seed(self.seed))


def answer_stats(update: ChatUpdate) -> str:
    """One line of statistics for an answer (shown under it)."""
    stats = update.timings.summary() + f" · seed {update.seed}"
    given = sum(token.given for token in update.tokens)
    if given:
        stats += f" · {given} given token{'s' * (given != 1)} first"
    if update.finished:
        stats += f" · stopped: {update.stop_reason.replace('_', ' ')}"
    return stats


def progress_stats(update: ChatUpdate) -> str:
    done, total = update.progress or (0, 0)
    return f"Reading the prompt (prefill): {done:,} / {total:,} tokens…"


def render_answer(engine: Engine, update: ChatUpdate, show_template: bool) -> tuple[str, str]:
    """(token view html, statistics markdown with notes) for one answer."""
    if show_template:
        ids = update.prompt_ids + update.answer_ids
        pieces = [token_piece(engine.tokenizer, i) for i in ids]
        view = templated_stream_html(pieces, len(update.prompt_ids))
    else:
        view = legend_html(FORK_HINT) + answer_tokens_html(update.tokens)
    notes = "".join(f"\n\n> {note}" for note in update.notes)
    return view, answer_stats(update) + notes


class ChatHandlers:
    """The tab's event handlers as plain methods (callable from tests without a server)."""

    def __init__(self, engine: Engine, settings: Settings, workspaces: Workspaces | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.workspaces = workspaces if workspaces is not None else Workspaces(engine)

    def chat(
        self,
        message: str,
        history: list,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Append the user's message and stream the answer into the chat."""
        if not (message or "").strip():
            raise PlaygroundError("Empty message: type something to send.")
        shown = [*(history or []), {"role": "user", "content": message}]  # earlier footers stay
        sampling = SamplingInputs(temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        chat_request = sampling.request(normalize_history(shown), system_prompt)
        session = self._workspace(request).chat
        stream = session.answer(chat_request, self.settings.max_new_tokens_limit)
        yield from self._stream(shown, session, stream, bool(show_template), clear_box=True)

    def chat_retry(
        self,
        history: list,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Answer the last user message again (its previous answer is dropped)."""
        undone = self.chat_undo(history)
        if not undone["message"]:
            raise PlaygroundError("Nothing to retry yet: send a message first.")
        yield from self.chat(
            undone["message"], undone["history"], system_prompt, temperature, top_k, top_p, min_p,
            repetition_penalty, max_new_tokens, seed, show_template, request,
        )  # fmt: skip

    def chat_from_step(
        self,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Continue the Step tab's path as a chat answer: its tokens (and their numbers) are the
        answer's start, generation goes on with this tab's settings."""
        ws = self._workspace(request)
        step = ws.step
        if step is None:
            raise PlaygroundError("No step-by-step session yet: start one in the Step by step tab.")
        if not step.chat:
            raise PlaygroundError(
                "This step session is a raw prompt: tick 'chat' there to continue it as a chat."
            )
        messages = step.conversation or [{"role": "user", "content": step.prompt}]
        system = step.system_prompt if step.conversation is not None else system_prompt
        sampling = SamplingInputs(temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed)
        records = step.records
        chat_request = replace(
            sampling.request(messages, system or ""), answer_prefix=[r.id for r in records]
        )
        self.engine.fork(step.key, ws.chat.key)  # the step's cache covers the prompt and the path
        stream = ws.chat.answer(chat_request, self.settings.max_new_tokens_limit, known=records)
        yield from self._stream(list(messages), ws.chat, stream, bool(show_template), clear_box=False)

    def fork_clicked(
        self, history: list, show_template: bool, event: gr.EventData, request: gr.Request = None
    ) -> Iterator[dict[str, Any]]:
        """An alternative clicked in a token's card (event data: position, token)."""
        data = getattr(event, "_data", None) or {}
        yield from self.chat_fork(history, data.get("position"), data.get("token"), show_template, request)

    def chat_from_link(
        self,
        system_prompt: str,
        temperature: float,
        top_k: float,
        top_p: float,
        min_p: float,
        repetition_penalty: float,
        max_new_tokens: float,
        seed: str | float | None,
        show_template: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """A shared link to a chat answer: its settings on the controls, then the same answer
        (greedy, or seeded: the link carries the seed)."""
        link = link_to("chat", request)
        if link is None:
            yield {}
            return
        shown = dict(zip(CONTROLS, (system_prompt, temperature, top_k, top_p, min_p, repetition_penalty,
                                    max_new_tokens, seed), strict=True))  # fmt: skip
        values = link.over(shown)
        yield values
        if link.values.get("message"):
            yield from self.chat(
                link.values["message"], [], *(values[name] for name in CONTROLS), show_template, request
            )

    def link_values(self, request: gr.Request = None) -> dict[str, Any]:
        """What a link to the answer on screen carries: its question, settings and seed."""
        session = self._workspace(request).chat
        update = session.updates.get(session.tip)
        if session.request is None or update is None:
            return {}
        chat, s = session.request, session.request.settings
        sampling = (s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, chat.max_new_tokens)
        values = dict(zip(CONTROLS[1:-1], sampling, strict=True))
        return {"message": chat.messages[-1]["content"], "system_prompt": chat.system_prompt, **values,
                "seed": update.seed}  # fmt: skip

    def chat_trace(self, request: gr.Request = None) -> str:
        """Save the answer on screen as a recorded trace (JSON): every token's numbers, the settings."""
        session = self._workspace(request).chat
        update = session.updates.get(session.tip)
        if session.request is None or update is None:
            raise PlaygroundError("No answer to save yet: send a message first.")
        chat = session.request
        data = {
            "messages": chat.messages,
            "system_prompt": chat.system_prompt,
            "settings": chat.settings.to_dict(),
            "update": update.to_dict(),
        }
        trace = new_trace("chat", f"Chat: {chat.messages[-1]['content'][:70]}", self.engine, data)
        return str(save_trace(trace, Path(tempfile.mkdtemp(prefix="trace-"))))

    def chat_fork(
        self,
        history: list,
        fork_position: float,
        fork_token: float,
        show_template: bool,
        request: gr.Request = None,
    ) -> Iterator[dict[str, Any]]:
        """Cut the last answer before its token at fork_position (0-based), put the token id
        fork_token there and continue with the same settings; the old continuation stays a branch.
        In the browser, an alternative clicked in a token's card sets both (static/app.js)."""
        session = self._workspace(request).chat
        pos, token = as_whole(fork_position, "fork position"), as_whole(fork_token, "token id")
        shown = _without_last_answer(history)
        stream = session.fork(pos, token, self.settings.max_new_tokens_limit)
        yield from self._stream(shown, session, stream, bool(show_template), clear_box=False)

    def chat_branch(
        self, history: list, branch: Any, show_template: bool, request: gr.Request = None
    ) -> dict[str, Any]:
        """Show another branch of the last answer (its records are kept: no model work)."""
        if branch is None or branch == "":
            return {}
        session = self._workspace(request).chat
        update = session.switch(as_whole(branch, "branch"))
        view, stats = render_answer(self.engine, update, bool(show_template))
        shown = _without_last_answer(history)
        answer = {"role": "assistant", "content": with_footer(update.text, answer_stats(update))}
        return {
            "history": [*shown, answer],
            "token_view": view,
            "status": stats,
            "branch": self._branches(session),
        }

    def _stream(
        self,
        shown: list,
        session: ChatSession,
        stream: Iterator[ChatUpdate],
        show_template: bool,
        clear_box: bool,
    ) -> Iterator[dict[str, Any]]:
        first: dict[str, Any] = {"status": "Waiting for the model…", "token_view": ""}
        if clear_box:
            first["message"] = ""  # cleared once; later updates leave what the user types
        yield first
        for update in stream:
            if update.progress is not None:
                yield {"status": progress_stats(update)}
                continue
            view, stats = render_answer(self.engine, update, show_template)
            answer = with_footer(update.text, answer_stats(update)) if update.finished else update.text
            values = {
                "history": [*shown, {"role": "assistant", "content": answer}],
                "token_view": view,
                "status": stats,
            }
            if update.finished:
                values["branch"] = self._branches(session)
            yield values

    def chat_undo(self, history: list) -> dict[str, Any]:
        """Remove the last exchange and put the user's message back in the box."""
        history = list(history or [])
        while history and message_role(history[-1]) != "user":
            history.pop()
        last_user = normalize_history(history[-1:])[0]["content"] if history else ""
        return {
            "message": last_user,
            "history": history[:-1],
            "token_view": "",
            "status": "",
            "branch": _no_branches(),
        }

    def chat_clear(self) -> dict[str, Any]:
        return {"message": "", "history": [], "token_view": "", "status": "", "branch": _no_branches()}

    def chat_stopped(self, history: list, status: str, request: gr.Request = None) -> dict[str, Any]:
        """After Stop: cancel the model's work (within a chunk or a token) and say so under the
        cut-off answer and in the statistics."""
        self._workspace(request).chat.stop()
        history = list(history or [])
        if status.startswith(("Waiting", "Reading")):
            return {"history": history, "status": "Stopped before the first token."}
        if not status or "stopped:" in status:
            return {"history": history, "status": status}
        first_line, _, notes = status.partition("\n\n")
        first_line += " · stopped: by you"
        last = normalize_history(history[-1:])
        if last and last[0]["role"] == "assistant":
            history[-1] = {"role": "assistant", "content": with_footer(last[0]["content"], first_line)}
        return {"history": history, "status": first_line + (f"\n\n{notes}" if notes else "")}

    def show_answer(self, show_template: bool, request: gr.Request = None) -> dict[str, Any]:
        """Re-render the shown answer's token view when the template toggle changes."""
        session = self._workspace(request).chat
        update = session.updates.get(session.tip)
        if update is None:
            return {}
        return {"token_view": render_answer(self.engine, update, bool(show_template))[0]}

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(getattr(request, "session_hash", None))

    def _branches(self, session: ChatSession) -> Any:
        choices = [
            (f"#{b.node_id} · {b.length} tokens · …{b.text[-50:]}", b.node_id) for b in session.branches()
        ]
        current = next((b.node_id for b in session.branches() if b.current), None)
        return gr.Dropdown(choices=choices, value=current, visible=len(choices) > 1)


def render_chat_trace(data: dict[str, Any]) -> dict[str, Any]:
    """A recorded chat answer's views (no model: its records hold every number)."""
    update = ChatUpdate.from_dict(data["update"])
    answer = {"role": "assistant", "content": with_footer(update.text, answer_stats(update))}
    view = legend_html() + answer_tokens_html(update.tokens, forkable=False)
    return {"history": [*data["messages"], answer], "token_view": view, "status": answer_stats(update)}


def _without_last_answer(history: list) -> list:
    history = list(history or [])
    if history and message_role(history[-1]) == "assistant":
        history.pop()
    return history


def _no_branches() -> Any:
    return gr.Dropdown(choices=[], value=None, visible=False)


# --- layout ------------------------------------------------------------------------------------------


def build_chat_tab(
    engine: Engine, settings: Settings, workspaces: Workspaces
) -> tuple[dict[str, Any], ChatHandlers]:
    """The Chat tab (call inside a gr.Tab); returns its components by name and its handlers."""
    w: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3):
            w["history"] = gr.Chatbot(label="Conversation", height=380, buttons=["copy"], elem_id="chat-bot")
            with gr.Row():
                w["message"] = gr.Textbox(
                    label="Message",
                    placeholder="Ask something… (Enter to send)",
                    show_label=False,
                    scale=5,
                    autofocus=True,
                    elem_id="chat-message",
                )
                w["send"] = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="chat-send")
            with gr.Row():
                for name in ("Stop", "Retry", "Undo", "Clear"):
                    w[name.lower()] = gr.Button(name, size="sm", elem_id=f"chat-{name.lower()}")
            w["status"] = gr.Markdown(elem_classes=["chat-stats"], elem_id="chat-status")
            w["token_view"] = gr.HTML(elem_id="chat-tokens", js_on_load=TOKEN_CARD_CLICKS)
            with gr.Row(elem_classes=["stage-hide"]):
                w["save_trace"] = gr.Button("Save trace (JSON)", size="sm", min_width=120, scale=0)
                w["trace_file"] = gr.File(label="recorded trace", interactive=False, height=60, scale=1)
            w["branch"] = gr.Dropdown(
                [],
                label="Answer branches",
                info="Every fork of this answer is kept: switch back",
                visible=False,
                elem_id="chat-branch",
            )
            # The same actions as a token card's buttons, for the HTTP API.
            hidden = {"visible": "hidden"}
            w["fork_position"] = gr.Number(label="fork position", precision=0, **hidden)
            w["fork_token"] = gr.Number(label="fork token", precision=0, **hidden)
            w["fork"] = gr.Button("Fork", **hidden)
            w["open_position"] = gr.Number(label="open position", precision=0, **hidden)
            w["open_step"] = gr.Button("Step by step from here", **hidden)
        with gr.Column(scale=1):
            w.update(_build_controls(engine, settings))
    handlers = ChatHandlers(engine, settings, workspaces)
    _wire(handlers, w)
    return w, handlers


def _wire(h: ChatHandlers, w: dict[str, Any]) -> None:
    """Send/Enter, Retry and forks stream through the model queue; Stop cancels them."""
    once = {"trigger_mode": "once", "status": "status"}  # a second Send while streaming is ignored
    send = connect([w["send"].click, w["message"].submit], h.chat, w, ANSWER_OUTPUTS, api_name="chat", **once)
    retry = connect(w["retry"].click, h.chat_retry, w, ANSWER_OUTPUTS, api_name="chat_retry", **once)
    fork = connect(w["fork"].click, h.chat_fork, w, ANSWER_OUTPUTS, api_name="chat_fork", **once)
    clicked = connect(w["token_view"].select, h.fork_clicked, w, ANSWER_OUTPUTS, api_name=None, **once)
    w["answer_events"] = [send, retry, fork, clicked]
    connect(w["stop"].click, h.chat_stopped, w, ["history", "status"], api_name="chat_stop", model=False,
            cancels=w["answer_events"])  # fmt: skip
    connect(
        w["branch"].input,
        h.chat_branch,
        w,
        ["history", "token_view", "status", "branch"],
        api_name="chat_branch",
        model=False,
    )
    connect(w["show_template"].change, h.show_answer, w, ["token_view"], api_name=None, model=False)
    connect(w["undo"].click, h.chat_undo, w, ANSWER_OUTPUTS, api_name="chat_undo", model=False)
    connect(w["save_trace"].click, h.chat_trace, w, ["trace_file"], api_name="chat_trace", model=False)
    connect(w["clear"].click, h.chat_clear, w, ANSWER_OUTPUTS, api_name="chat_clear", model=False)


def _build_controls(engine: Engine, settings: Settings) -> dict[str, Any]:
    """System prompt, sampling settings, max tokens, seed, template toggle."""
    template_note = "" if engine.has_chat_template else " (this model has no chat template: unused)"
    w: dict[str, Any] = {}
    w["system_prompt"] = gr.Textbox(
        "",
        label="System prompt",
        lines=2,
        placeholder="(the model's own default)",
        elem_classes=["stage-hide"],
        info="Instructions the model sees before the conversation; empty = the model's default"
        + template_note,
    )
    with gr.Accordion("Sampling", open=True):
        w["temperature"] = UncheckedSlider(
            0, 2, value=0.7, step=0.05, label="Temperature",
            info="Divides the logits: <1 sharper, >1 flatter; 0 = greedy (always the top token)",
        )  # fmt: skip
        w["top_k"] = UncheckedSlider(
            0,
            200,
            value=50,
            step=1,
            label="Top-k",
            info="Keep only the k most likely tokens; 0 = off",
            elem_classes=["stage-hide"],
        )
        w["top_p"] = UncheckedSlider(
            0.01, 1, value=0.95, step=0.01, label="Top-p",
            info="Keep the most likely tokens until their probabilities sum to p; 1 = off",
            elem_classes=["stage-hide"],
        )  # fmt: skip
        w["min_p"] = UncheckedSlider(
            0, 1, value=0.0, step=0.01, label="Min-p",
            info="Drop tokens less likely than min-p × the top token's probability; 0 = off",
            elem_classes=["stage-hide"],
        )  # fmt: skip
        w["repetition_penalty"] = UncheckedSlider(
            0.5, 2, value=1.0, step=0.05, label="Repetition penalty",
            info="Divides the score of tokens already in the text; >1 discourages repeats",
            elem_classes=["stage-hide"],
        )  # fmt: skip
        limit = settings.max_new_tokens_limit
        w["max_new_tokens"] = UncheckedSlider(
            1,
            limit,
            value=min(256, limit),
            step=1,
            label="Max new tokens",
            info="Longest answer, in tokens",
            elem_classes=["stage-hide"],
        )
        w["seed"] = gr.Textbox(
            "", label="Seed", placeholder="random",
            info="Same seed + same settings = same answer; empty = a new random seed each time",
            elem_classes=["stage-hide"],
        )  # fmt: skip
    w["show_template"] = gr.Checkbox(
        False,
        label="Show templated token stream",
        info="The exact tokens the model sees, special tokens included",
        elem_classes=["stage-hide"],
    )
    return w

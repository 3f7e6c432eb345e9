"""Chat tab: streaming answers, each token coloured by its probability, forks at any token.

Handlers name their inputs by their parameters and return {component name: value}; the
browser tab's chat lives in its Workspace (engine side), keyed by Gradio's session id.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import gradio as gr

from playground.chat import ChatSession, ChatUpdate
from playground.chat_history import (
    as_typed,
    back_in_box,
    normalize_history,
    shown_history,
    with_footer,
    with_last_footer,
    without_last_answer,
    without_last_exchange,
    without_unanswered,
)
from playground.engine.base import Engine
from playground.engine.tokens import token_piece
from playground.errors import Cancelled, PlaygroundError
from playground.settings import Settings
from playground.traces import new_trace, save_trace
from playground.ui.chat_controls import CONTROLS, ChatControls, build_controls
from playground.ui.common import as_whole, connect, connect_after_ticket, explain_exception
from playground.ui.i18n import localize, session_lang
from playground.ui.links import link_rules, link_to
from playground.ui.ranges import CheckedNumber
from playground.ui.token_html import TOKEN_CARD_CLICKS, answer_tokens_html, legend_html, templated_stream_html
from playground.workspace import Workspace, Workspaces

FORK_HINT = "hover or click a token: its alternatives fork the answer there"
# After a stopped answer's generator ends, how long its last update may still take to leave.
LAST_UPDATE_GRACE_S = 0.3
# What every answering handler may set.
ANSWER_OUTPUTS = ["message", "history", "token_view", "status", "branch"]


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


def render_answer(
    engine: Engine, update: ChatUpdate, show_template: bool, lang: str = "en"
) -> tuple[str, str]:
    """(token view html, statistics markdown with notes, said in lang) for one answer."""
    if show_template:
        ids = update.prompt_ids + update.answer_ids
        pieces = [token_piece(engine.tokenizer, i) for i in ids]
        view = templated_stream_html(pieces, len(update.prompt_ids))
    else:
        view = legend_html(FORK_HINT) + answer_tokens_html(update.tokens)
    notes = "".join(f"\n\n> {localize(note, lang)}" for note in update.notes)
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
        controls: ChatControls,
        request: gr.Request = None,
        ticket: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Append the user's message and stream the answer into the chat. ticket: the Send
        button's (chat_ticket), so a Stop while the answer waits in the queue drops it."""
        if not self._workspace(request).begin("chat", ticket):
            yield {}  # stopped while it waited: the message stays in its box, nothing changes
            return
        if not (message or "").strip():
            raise PlaygroundError("Empty message: type something to send.")
        yield from self._send(message, history, controls, request)

    def _send(
        self, message: str, history: list, controls: ChatControls, request: gr.Request
    ) -> Iterator[dict[str, Any]]:
        """Append message and stream its answer; the box is empty meanwhile, and if no answer comes
        the message goes back in it."""
        shown = [*(history or []), {"role": "user", "content": as_typed(message)}]  # earlier footers stay
        chat_request = controls.request(normalize_history(shown))
        session = self._workspace(request).chat
        stream = session.answer(chat_request, self.settings.max_new_tokens_limit)
        before = {"message": message, "history": list(history or [])}
        lang = session_lang(request)
        yield from self._stream(shown, session, stream, controls.show_template, before, lang=lang)

    def chat_retry(
        self,
        history: list,
        controls: ChatControls,
        request: gr.Request = None,
        ticket: int | None = None,
        message: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Answer the last user message again: a new branch of its answer, the earlier answers and
        their forks kept in the branch list; message: what the box holds, left there. If no answer
        comes, the chat shows what it showed before."""
        ws = self._workspace(request)
        if not ws.begin("chat", ticket):
            yield {}
            return
        earlier, last_user = without_last_exchange(history)
        shown = [*earlier, {"role": "user", "content": as_typed(last_user)}]
        chat_request = controls.request(normalize_history(shown))  # a bad value is named first
        if not last_user:
            raise PlaygroundError("Nothing to retry yet: send a message first.")
        ws.stop("chat")  # an answer still waiting in the queue is dropped too
        _stopped(ws.chat, ws.chat.stop)
        stream = ws.chat.retry(chat_request, self.settings.max_new_tokens_limit)
        before = {"message": message or "", "history": list(history or [])}
        lang = session_lang(request)
        yield from self._stream(shown, ws.chat, stream, controls.show_template, before, False, lang)

    def chat_from_step(
        self, controls: ChatControls, request: gr.Request = None, ticket: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Continue the Step tab's path as a chat answer: its tokens (and their numbers) are the
        answer's start, generation goes on with this tab's settings."""
        ws = self._workspace(request)
        if not ws.begin("chat", ticket):
            yield {}
            return
        step = ws.step
        if step is None:
            raise PlaygroundError("No step-by-step session yet: start one in the Step by step tab.")
        if not step.chat:
            raise PlaygroundError(
                "This step session is a raw prompt: tick 'chat' there to continue it as a chat."
            )
        messages = step.conversation or [{"role": "user", "content": step.prompt}]
        system = step.system_prompt if step.conversation is not None else None
        records = step.records
        chat_request = replace(controls.request(messages, system), answer_prefix=[r.id for r in records])
        ws.engine.fork(step.key, ws.chat.key)  # the step's cache covers the prompt and the path
        stream = ws.chat.answer(chat_request, self.settings.max_new_tokens_limit, known=records)
        shown, lang = shown_history(messages), session_lang(request)
        yield from self._stream(shown, ws.chat, stream, controls.show_template, lang=lang)

    def chat_from_link(self, controls: ChatControls, request: gr.Request = None) -> Iterator[dict[str, Any]]:
        """A shared link to a chat answer: its settings on the controls, then the same answer
        (greedy, or seeded: the link carries the seed)."""
        link = link_to("chat", request, link_rules(self.settings.max_new_tokens_limit))
        if link is None:
            yield {}
            return
        linked = replace(controls, **link.over({name: getattr(controls, name) for name in CONTROLS}))
        yield {name: getattr(linked, name) for name in CONTROLS}
        if link.values.get("message"):
            yield from self.chat(link.values["message"], [], linked, request)

    def link_values(self, request: gr.Request = None) -> dict[str, Any]:
        """What a link to the answer on screen carries: its question, settings and seed."""
        session = self._workspace(request).chat
        update = session.updates.get(session.tip)
        if session.request is None or update is None:
            return {}
        chat, s = session.request, session.request.settings
        sampling = (s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, chat.max_new_tokens)
        values = dict(zip(CONTROLS[1:-1], sampling, strict=True))
        return {
            "message": chat.messages[-1]["content"],
            "system_prompt": chat.system_prompt,
            **values,
            "seed": update.seed,
        }

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
        trace = new_trace("chat", f"Chat: {chat.messages[-1]['content'][:70]}", session.engine, data)
        return str(save_trace(trace, Path(tempfile.mkdtemp(prefix="trace-"))))

    def chat_fork(
        self,
        history: list,
        fork_position: float,
        fork_token: float,
        show_template: bool,
        request: gr.Request = None,
        ticket: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Cut the last answer before its token at fork_position (0-based), put the token id
        fork_token there and continue with the same settings; the old continuation stays a branch.
        In the browser, an alternative clicked in a token's card sets both (static/app.js)."""
        ws = self._workspace(request)
        if not ws.begin("chat", ticket):
            yield {}
            return
        session = ws.chat
        pos, token = as_whole(fork_position, "fork position"), as_whole(fork_token, "token id")
        shown = without_last_answer(history)
        session.check_last(normalize_history(shown))  # never an answer that is not on screen
        stream = session.fork(pos, token, self.settings.max_new_tokens_limit)
        yield from self._stream(shown, session, stream, show_template, lang=session_lang(request))

    def chat_branch(
        self, history: list, branch: Any, show_template: bool, request: gr.Request = None
    ) -> dict[str, Any]:
        """Show another branch of the last answer (its records are kept: no model work)."""
        if branch is None or branch == "":
            return {}
        session = self._workspace(request).chat
        shown = without_last_answer(history)
        session.check_last(normalize_history(shown))
        update = session.switch(as_whole(branch, "branch"))
        answer = {"role": "assistant", "content": with_footer(update.text, answer_stats(update))}
        return {
            "history": [*shown, answer],
            **self._screen(session, show_template, lang=session_lang(request)),
        }

    def _stream(
        self,
        shown: list,
        session: ChatSession,
        stream: Iterator[ChatUpdate],
        show_template: Any,
        before: dict[str, Any] | None = None,
        empty_box: bool = True,
        lang: str = "en",
    ) -> Iterator[dict[str, Any]]:
        """The answer as it streams. before: the box and history shown again (with what went wrong)
        if no token of the answer comes (a new message's, or a Retry's screen as it was); None for a
        fork or a continued path. empty_box: the message left the box (a Send), so it is emptied,
        once, and goes back if no answer comes."""
        first: dict[str, Any] = {"status": "Waiting for the model…", "token_view": ""}
        if before is not None:  # the message moves to the chat, once: typing goes on
            first.update(history=shown, **({"message": ""} if empty_box else {}))
        yield first
        answered = False
        try:
            for update in stream:
                if update.progress is not None:
                    yield {"status": progress_stats(update)}
                    continue
                answered = True
                yield self._answer_values(shown, session, update, bool(show_template), lang)
        except Cancelled:  # Stop, Undo, Clear or a closed tab: the handler that stopped it shows why
            return
        except Exception as exc:  # nothing was answered: show the chat as it was, and why
            if not answered:
                back = " Your message is back in the box." if before is not None and empty_box else ""
                status = f"Not answered: {explain_exception(exc)}{back}"
                yield {**self._screen(session, show_template, lang=lang), **(before or {}), "status": status}
            raise

    def _answer_values(
        self, shown: list, session: ChatSession, update: ChatUpdate, show_template: bool, lang: str = "en"
    ) -> dict[str, Any]:
        view, stats = render_answer(session.engine, update, show_template, lang)
        answer = with_footer(update.text, answer_stats(update)) if update.finished else update.text
        history = [*shown, {"role": "assistant", "content": answer}]
        values = {"history": history, "token_view": view, "status": stats}
        if update.finished:
            values["branch"] = self._branches(session)
        return values

    def chat_undo(
        self,
        history: list,
        show_template: bool = False,
        request: gr.Request = None,
        message: str | None = None,
    ) -> dict[str, Any]:
        """Remove the last exchange and put the user's message back in the box (before what was typed
        there since: message); the tab forgets that answer, and the one before it is the last again
        (its tokens, branches and numbers)."""
        history, last_user = without_last_exchange(history)
        ws = self._workspace(request)
        ws.stop("chat")  # an answer still waiting in the queue is dropped too
        _stopped(ws.chat, lambda: ws.chat.sync(normalize_history(history)))
        box = back_in_box(last_user, message)
        screen = self._screen(ws.chat, show_template, history, session_lang(request))
        return {"message": box, "history": history, **screen}

    def chat_clear(self, request: gr.Request = None) -> dict[str, Any]:
        """An empty chat; the tab forgets every answer (and stops one being written or waiting)."""
        ws = self._workspace(request)
        ws.stop("chat")
        _stopped(ws.chat, lambda: ws.chat.sync([]))
        return {"message": "", "history": [], "token_view": "", "status": "", "branch": _no_branches()}

    def chat_ticket(self, request: gr.Request = None) -> dict[str, Any]:
        """Before an answer joins the model queue: a ticket that Stop, Undo or Clear can drop."""
        return {"ticket": self._workspace(request).ticket("chat")}

    def fork_ticket(self, event: gr.EventData, request: gr.Request = None) -> dict[str, Any]:
        """An alternative clicked in a token's card (event data: position, token): the fork's
        position and token for chat_fork, which runs next, and its ticket."""
        data = getattr(event, "_data", None) or {}
        fork = {"fork_position": data.get("position"), "fork_token": data.get("token")}
        return {**self.chat_ticket(request), **fork}

    def chat_stopped(
        self,
        history: list,
        status: str,
        message: str = "",
        show_template: bool = False,
        request: gr.Request = None,
    ) -> dict[str, Any]:
        """After Stop: cancel the model's work (within a chunk or a token) and show the cut-off
        answer as the tab kept it, marked "stopped: by you". Stopped before its first token, a
        message goes back in the box (before what was typed since); stopped while it waited in the
        queue, nothing changes."""
        ws = self._workspace(request)
        session, waited = ws.chat, ws.stop("chat") == "waiting"
        running = session.running
        ended = _stopped(session, session.stop)
        if waited and not running:
            return {"status": "Stopped while it waited for the model: nothing changed."}
        history = list(history or [])
        if (status or "").startswith(("Waiting", "Reading")):
            history, typed = without_unanswered(history)
            if typed is None:
                return {"history": history, "status": "Stopped before the first token."}
            session.sync(normalize_history(history))
            status = "Stopped before the first token: your message is back in the box."
            return {"history": history, "message": back_in_box(typed, message), "status": status}
        if not status or "stopped:" in status:
            return {"history": history, "status": status}
        shown, turn = without_last_answer(history), session.turn
        if ended and turn and turn.shown and normalize_history(shown) == turn.request.messages:
            view, status = render_answer(
                session.engine, turn.shown, bool(show_template), session_lang(request)
            )
            history = [*shown, {"role": "assistant", "content": turn.shown.text}]
            values = {"token_view": view, "branch": self._branches(session)}
        else:  # not an answer of this tab's (an API call's own history): mark the text given
            values = {}
        first_line, _, notes = status.partition("\n\n")
        first_line += "" if "stopped:" in first_line else " · stopped: by you"
        history = with_last_footer(history, first_line)
        return {**values, "history": history, "status": first_line + (f"\n\n{notes}" if notes else "")}

    def show_answer(self, show_template: bool, request: gr.Request = None) -> dict[str, Any]:
        """Re-render the shown answer's token view when the template toggle changes."""
        session = self._workspace(request).chat
        turn = session.turn
        if turn is None or turn.shown is None:
            return {}
        return {"token_view": render_answer(session.engine, turn.shown, bool(show_template))[0]}

    def _screen(
        self, session: ChatSession, show_template: Any, history: list | None = None, lang: str = "en"
    ) -> dict[str, Any]:
        """The last answer's token view, statistics and branches (empty when there is none, or,
        given the history on screen, when that answer is not its last one)."""
        turn = session.turn
        last = turn is not None and turn.shown is not None
        if last and history is not None:
            last = normalize_history(history)[:-1] == turn.request.messages
        if not last:
            return {"token_view": "", "status": "", "branch": _no_branches()}
        view, stats = render_answer(session.engine, turn.shown, bool(show_template), lang)
        return {"token_view": view, "status": stats, "branch": self._branches(session)}

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
    history = [*shown_history(data["messages"]), answer]
    return {"history": history, "token_view": view, "status": answer_stats(update)}


def _stopped(session: ChatSession, stop: Callable[[], None]) -> bool:
    """Stop the answer being written (stop: sync or stop) and wait until it has ended, and a
    moment more: Gradio may still be sending its last update, which must land before what the
    caller shows next (else a forgotten answer would paint itself back). False on a timeout."""
    running = session.running
    stop()
    ended = session.wait_ended()
    if running:
        time.sleep(LAST_UPDATE_GRACE_S)
    return ended


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
            w["history"] = gr.Chatbot(  # no floating label: it would cover the top of a scrolled answer
                label="Conversation", show_label=False, height=380, buttons=["copy"], elem_id="chat-bot"
            )
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
            w["ticket"] = gr.State(None)  # the last answer's ticket (ChatHandlers.chat_ticket)
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
            w["fork_position"] = CheckedNumber(label="fork position", precision=0, **hidden)
            w["fork_token"] = CheckedNumber(label="fork token", precision=0, **hidden)
            w["fork"] = gr.Button("Fork", **hidden)
            w["open_position"] = CheckedNumber(label="open position", precision=0, **hidden)
            w["open_step"] = gr.Button("Step by step from here", **hidden)
        with gr.Column(scale=1):
            w.update(build_controls(engine, settings))
    handlers = ChatHandlers(engine, settings, workspaces)
    _wire(handlers, w)
    return w, handlers


def connect_answer(
    trigger: Any,
    fn: Callable,
    w: dict[str, Any],
    api_name: str | None,
    ticket_fn: Callable,
    ticket_outputs: Sequence[str] = ("ticket",),
    **event: Any,
) -> Any:
    """An answer streamed through the model queue after its ticket (ticket_fn): Stop, Undo and
    Clear end it through the engine (or drop it while it waits), not through Gradio's `cancels`.
    A second Send while it streams is ignored."""
    answer, once = (ticket_fn, ticket_outputs, fn, w, ANSWER_OUTPUTS), {"trigger_mode": "once"}
    return connect_after_ticket(trigger, *answer, api_name=api_name, status="status", **once, **event)


def _wire(h: ChatHandlers, w: dict[str, Any]) -> None:
    """Send/Enter, Retry and forks stream through the model queue; Stop, Undo and Clear end them."""
    connect_answer([w["send"].click, w["message"].submit], h.chat, w, "chat", h.chat_ticket)
    connect_answer(w["retry"].click, h.chat_retry, w, "chat_retry", h.chat_ticket)
    connect_answer(w["fork"].click, h.chat_fork, w, "chat_fork", h.chat_ticket)
    clicked = ("ticket", "fork_position", "fork_token")  # a token card's alternative (static/app.js)
    connect_answer(w["token_view"].select, h.chat_fork, w, None, h.fork_ticket, clicked)
    stop_outputs = ["history", "status", "message", "token_view", "branch"]
    connect(w["stop"].click, h.chat_stopped, w, stop_outputs, api_name="chat_stop", model=False)
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
    connect(w["history"].clear, h.chat_clear, w, ANSWER_OUTPUTS, api_name=None, model=False)  # its bin

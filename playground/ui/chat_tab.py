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
from playground.messages import Message
from playground.settings import Settings
from playground.traces import new_trace, save_trace
from playground.ui.chat_controls import CONTROLS, ChatControls, build_controls
from playground.ui.common import as_whole, connect, connect_after_ticket, explain_exception
from playground.ui.i18n import DEFAULT, ENGLISH, LANGUAGES, i18n, localize, session_lang, t
from playground.ui.links import link_rules, link_to
from playground.ui.presets import PRESETS, build_presets, chinese_note, preset
from playground.ui.ranges import CheckedNumber
from playground.ui.token_html import TOKEN_CARD_CLICKS, answer_tokens_html, legend_html, templated_stream_html
from playground.workspace import Workspace, Workspaces

# After a stopped answer's generator ends, how long its last update may still take to leave.
LAST_UPDATE_GRACE_S = 0.3
# What every answering handler may set.
ANSWER_OUTPUTS = ["message", "history", "token_view", "status", "branch"]
TEXT_OUTPUTS = ["token_view", "status", "branch"]  # chat_texts: what a language switch says again
# Status lines that are not an answer's statistics (a language switch leaves them as they are)
NOT_STATISTICS = (
    "chat.waiting",
    "chat.progress",
    "chat.not_answered",
    "chat.stopped_waiting",
    "chat.stopped_first",
    "chat.stopped_first_back",
)
# Why an answer ended (ChatUpdate.stop_reason), as its statistics line says it
STOP_KEYS = {
    "eos": "chat.stop.eos",
    "max_new_tokens": "chat.stop.max_new_tokens",
    "context": "chat.stop.context",
}


def answer_stats(update: ChatUpdate, lang: str = DEFAULT) -> str:
    """One line of statistics for an answer (shown under it), in lang."""
    stats = localize(update.timings.summary(), lang) + t("chat.stats.seed", lang, seed=update.seed)
    given = sum(token.given for token in update.tokens)
    if given:
        stats += t("chat.stats.given_one" if given == 1 else "chat.stats.given_many", lang, n=given)
    if update.finished:
        reason = update.stop_reason
        stats += t(
            "chat.stats.stopped", lang, reason=t(STOP_KEYS[reason], lang) if reason in STOP_KEYS else reason
        )
    return stats


def progress_stats(update: ChatUpdate, lang: str = DEFAULT) -> str:
    done, total = update.progress or (0, 0)
    return t("chat.progress", lang, done=done, total=total)


def render_answer(
    engine: Engine, update: ChatUpdate, show_template: bool, lang: str = DEFAULT
) -> tuple[str, str]:
    """(token view html, statistics markdown with notes) for one answer, in lang."""
    if show_template:
        ids = update.prompt_ids + update.answer_ids
        pieces = [token_piece(engine.tokenizer, i) for i in ids]
        view = templated_stream_html(pieces, len(update.prompt_ids), lang)
    else:
        view = legend_html(t("chat.fork_hint", lang), lang) + answer_tokens_html(update.tokens, lang=lang)
    notes = "".join(f"\n\n> {localize(note, lang)}" for note in update.notes)
    return view, answer_stats(update, lang) + notes


def said_in_any_language(key: str, text: str) -> bool:
    """Whether text begins as key's text does in some language (up to its first value): a status line
    the page shows, written in the language the page had then."""
    prefixes = {language.strings.get(key, ENGLISH[key]).split("{")[0] for language in LANGUAGES.values()}
    return any(prefix and text.startswith(prefix) for prefix in prefixes)


def stopped_by_you(status: str, lang: str) -> str:
    """An answer's statistics (then its notes) marked "stopped: by you" in lang, unless it says it
    ended already."""
    first, _, notes = status.partition("\n\n")
    if not marked_stopped(first):
        first += t("chat.stats.stopped", lang, reason=t("chat.stop.by_you", lang))
    return first + (f"\n\n{notes}" if notes else "")


def marked_stopped(text: str) -> bool:
    """Whether a statistics line says the answer ended (' · stopped: …'), in any language."""
    marks = {language.strings.get("chat.stats.stopped", "").split("{")[0] for language in LANGUAGES.values()}
    marks.add(t("chat.stats.stopped", DEFAULT, reason="").strip())
    return any(mark.strip() and mark.strip() in text for mark in marks)


def with_notes(engine: Engine, chat_request: Any) -> Any:
    """The request with a note when engine's model writes the question's Chinese as byte tokens."""
    note = chinese_note(engine, chat_request.messages[-1]["content"] if chat_request.messages else "")
    return replace(chat_request, notes=(*chat_request.notes, note)) if note else chat_request


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
            raise PlaygroundError("Empty message: type something to send.", key="chat.error.empty")
        yield from self._send(message, history, controls, request)

    def _send(
        self, message: str, history: list, controls: ChatControls, request: gr.Request
    ) -> Iterator[dict[str, Any]]:
        """Append message and stream its answer; the box is empty meanwhile, and if no answer comes
        the message goes back in it."""
        shown = [*(history or []), {"role": "user", "content": as_typed(message)}]  # earlier footers stay
        session = self._workspace(request).chat
        chat_request = with_notes(session.engine, controls.request(normalize_history(shown)))
        stream = session.answer(chat_request, self.settings.max_new_tokens_limit)
        before = {"message": message, "history": list(history or [])}
        yield from self._stream(
            shown, session, stream, controls.show_template, before, lang=session_lang(request)
        )

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
        chat_request = with_notes(ws.engine, controls.request(normalize_history(shown)))  # a bad value first
        if not last_user:
            raise PlaygroundError("Nothing to retry yet: send a message first.", key="chat.error.no_retry")
        ws.stop("chat")  # an answer still waiting in the queue is dropped too
        _stopped(ws.chat, ws.chat.stop)
        stream = ws.chat.retry(chat_request, self.settings.max_new_tokens_limit)
        before = {"message": message or "", "history": list(history or [])}
        lang = session_lang(request)
        yield from self._stream(
            shown, ws.chat, stream, controls.show_template, before, empty_box=False, lang=lang
        )

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
            raise PlaygroundError(
                "No step-by-step session yet: start one in the Step by step tab.", key="chat.error.no_step"
            )
        if not step.chat:
            raise PlaygroundError(
                "This step session is a raw prompt: tick 'chat' there to continue it as a chat.",
                key="chat.error.raw_step",
            )
        messages = step.conversation or [{"role": "user", "content": step.prompt}]
        system = step.system_prompt if step.conversation is not None else None
        records = step.records
        chat_request = replace(controls.request(messages, system), answer_prefix=[r.id for r in records])
        ws.engine.fork(step.key, ws.chat.key)  # the step's cache covers the prompt and the path
        stream = ws.chat.answer(chat_request, self.settings.max_new_tokens_limit, known=records)
        lang = session_lang(request)
        yield from self._stream(shown_history(messages), ws.chat, stream, controls.show_template, lang=lang)

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
            raise PlaygroundError("No answer to save yet: send a message first.", key="chat.error.no_save")
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
        pos = as_whole(fork_position, Message.of_key("chat.fork_position", "Fork position"))
        token = as_whole(fork_token, Message.of_key("chat.fork_token", "Fork token"))
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
        session, lang = self._workspace(request).chat, session_lang(request)
        shown = without_last_answer(history)
        session.check_last(normalize_history(shown))
        update = session.switch(as_whole(branch, Message.of_key("chat.branch", "Answer branches")))
        answer = {"role": "assistant", "content": with_footer(update.text, answer_stats(update, lang))}
        return {"history": [*shown, answer], **self._screen(session, show_template, lang=lang)}

    def _stream(
        self,
        shown: list,
        session: ChatSession,
        stream: Iterator[ChatUpdate],
        show_template: Any,
        before: dict[str, Any] | None = None,
        empty_box: bool = True,
        lang: str = DEFAULT,
    ) -> Iterator[dict[str, Any]]:
        """The answer as it streams, in lang. before: the box and history shown again (with what went
        wrong) if no token of the answer comes (a new message's, or a Retry's screen as it was); None
        for a fork or a continued path. empty_box: the message left the box (a Send), so it is
        emptied, once, and goes back if no answer comes."""
        first: dict[str, Any] = {"status": t("chat.waiting", lang), "token_view": ""}
        if before is not None:  # the message moves to the chat, once: typing goes on
            first.update(history=shown, **({"message": ""} if empty_box else {}))
        yield first
        answered = False
        try:
            for update in stream:
                if update.progress is not None:
                    yield {"status": progress_stats(update, lang)}
                    continue
                answered = True
                yield self._answer_values(shown, session, update, bool(show_template), lang)
        except Cancelled:  # Stop, Undo, Clear or a closed tab: the handler that stopped it shows why
            return
        except Exception as exc:  # nothing was answered: show the chat as it was, and why
            if not answered:
                back = t("chat.back_in_box", lang) if before is not None and empty_box else ""
                status = t("chat.not_answered", lang, why=explain_exception(exc, lang), back=back)
                yield {**self._screen(session, show_template, lang=lang), **(before or {}), "status": status}
            raise

    def _answer_values(
        self, shown: list, session: ChatSession, update: ChatUpdate, show_template: bool, lang: str
    ) -> dict[str, Any]:
        view, stats = render_answer(session.engine, update, show_template, lang)
        answer = with_footer(update.text, answer_stats(update, lang)) if update.finished else update.text
        history = [*shown, {"role": "assistant", "content": answer}]
        values = {"history": history, "token_view": view, "status": stats}
        if update.finished:
            values["branch"] = self._branches(session, lang)
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
        box, lang = back_in_box(last_user, message), session_lang(request)
        return {"message": box, "history": history, **self._screen(ws.chat, show_template, history, lang)}

    def chat_clear(self, request: gr.Request = None) -> dict[str, Any]:
        """An empty chat; the tab forgets every answer (and stops one being written or waiting)."""
        ws = self._workspace(request)
        ws.stop("chat")
        _stopped(ws.chat, lambda: ws.chat.sync([]))
        return {"message": "", "history": [], "token_view": "", "status": "", "branch": _no_branches()}

    def chat_preset(self, name: str, request: gr.Request = None) -> dict[str, Any]:
        """An example question in the message box; on a model that writes its Chinese as byte tokens
        the status line says so (and so will the answer's notes)."""
        text = preset("chat", name).text
        note = chinese_note(self._workspace(request).engine, text)
        return {"message": text, **({"status": localize(note, session_lang(request))} if note else {})}

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
        ws, lang = self._workspace(request), session_lang(request)
        session, waited = ws.chat, ws.stop("chat") == "waiting"
        running = session.running
        ended = _stopped(session, session.stop)
        if waited and not running:
            return {"status": t("chat.stopped_waiting", lang)}
        history = list(history or [])
        if said_in_any_language("chat.waiting", status or "") or said_in_any_language(
            "chat.progress", status or ""
        ):
            history, typed = without_unanswered(history)
            if typed is None:
                return {"history": history, "status": t("chat.stopped_first", lang)}
            session.sync(normalize_history(history))
            status = t("chat.stopped_first_back", lang)
            return {"history": history, "message": back_in_box(typed, message), "status": status}
        if not status or marked_stopped(status):
            return {"history": history, "status": status}
        shown, turn = without_last_answer(history), session.turn
        if ended and turn and turn.shown and normalize_history(shown) == turn.request.messages:
            view, status = render_answer(session.engine, turn.shown, bool(show_template), lang)
            history = [*shown, {"role": "assistant", "content": turn.shown.text}]
            values = {"token_view": view, "branch": self._branches(session, lang)}
        else:  # not an answer of this tab's (an API call's own history): mark the text given
            values = {}
        status = stopped_by_you(status, lang)
        history = with_last_footer(history, status.partition("\n\n")[0])
        return {**values, "history": history, "status": status}

    def show_answer(self, show_template: bool, request: gr.Request = None) -> dict[str, Any]:
        """Re-render the shown answer's token view when the template toggle changes."""
        session = self._workspace(request).chat
        turn = session.turn
        if turn is None or turn.shown is None:
            return {}
        lang = session_lang(request)
        return {"token_view": render_answer(session.engine, turn.shown, bool(show_template), lang)[0]}

    def chat_texts(self, history: list, show_template: bool, status: str, request: gr.Request = None) -> dict:
        """After a language switch: the last answer's token view, statistics and branch list in the
        page's language. An answer being written says its next update in it; a line about something
        else (an error, a Stop before the first token) and the conversation's footers stay as written."""
        session, lang = self._workspace(request).chat, session_lang(request)
        if session.running:
            return {}
        values = self._screen(session, show_template, history, lang)
        if not values["token_view"]:
            return {}
        if any(said_in_any_language(key, status or "") for key in NOT_STATISTICS):
            del values["status"]
        elif not session.turn.shown.finished:  # stopped by the user: the line says so
            values["status"] = stopped_by_you(values["status"], lang)
        return values

    def _screen(
        self, session: ChatSession, show_template: Any, history: list | None = None, lang: str = DEFAULT
    ) -> dict[str, Any]:
        """The last answer's token view, statistics and branches (empty when there is none, or,
        given the history on screen, when that answer is not its last one), in lang."""
        turn = session.turn
        last = turn is not None and turn.shown is not None
        if last and history is not None:
            last = normalize_history(history)[:-1] == turn.request.messages
        if not last:
            return {"token_view": "", "status": "", "branch": _no_branches()}
        view, stats = render_answer(session.engine, turn.shown, bool(show_template), lang)
        return {"token_view": view, "status": stats, "branch": self._branches(session, lang)}

    def _workspace(self, request: gr.Request | None) -> Workspace:
        return self.workspaces.get(getattr(request, "session_hash", None))

    def _branches(self, session: ChatSession, lang: str = DEFAULT) -> Any:
        choices = [
            (t("chat.branch.choice", lang, id=b.node_id, length=b.length, text=b.text[-50:]), b.node_id)
            for b in session.branches()
        ]
        current = next((b.node_id for b in session.branches() if b.current), None)
        return gr.Dropdown(choices=choices, value=current, visible=len(choices) > 1)


def render_chat_trace(data: dict[str, Any], lang: str = DEFAULT) -> dict[str, Any]:
    """A recorded chat answer's views (no model: its records hold every number), in lang."""
    update = ChatUpdate.from_dict(data["update"])
    answer = {"role": "assistant", "content": with_footer(update.text, answer_stats(update, lang))}
    view = legend_html(lang=lang) + answer_tokens_html(update.tokens, forkable=False, lang=lang)
    history = [*shown_history(data["messages"]), answer]
    return {"history": history, "token_view": view, "status": answer_stats(update, lang)}


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
                label=i18n("chat.conversation"),
                show_label=False,
                height=380,
                buttons=["copy"],
                elem_id="chat-bot",
            )
            with gr.Row():
                w["message"] = gr.Textbox(
                    label=i18n("chat.message"),
                    placeholder=i18n("chat.message.placeholder"),
                    show_label=False,
                    scale=5,
                    autofocus=True,
                    elem_id="chat-message",
                )
                w["send"] = gr.Button(
                    i18n("chat.send"), variant="primary", scale=1, min_width=80, elem_id="chat-send"
                )
            with gr.Row():
                for name, key in (("stop", "chat.stop"), ("retry", "chat.retry"), ("undo", "chat.undo")):
                    w[name] = gr.Button(i18n(key), size="sm", elem_id=f"chat-{name}")
                w["clear"] = gr.Button(i18n("chat.clear"), size="sm", elem_id="chat-clear")
            w.update(build_presets("chat"))
            w["status"] = gr.Markdown(elem_classes=["chat-stats"], elem_id="chat-status")
            w["ticket"] = gr.State(None)  # the last answer's ticket (ChatHandlers.chat_ticket)
            w["token_view"] = gr.HTML(elem_id="chat-tokens", js_on_load=TOKEN_CARD_CLICKS)
            with gr.Row(elem_classes=["stage-hide"]):
                w["save_trace"] = gr.Button(i18n("chat.save_trace"), size="sm", min_width=120, scale=0)
                w["trace_file"] = gr.File(
                    label=i18n("chat.trace_file"), interactive=False, height=60, scale=1
                )
            w["branch"] = gr.Dropdown(
                [],
                label=i18n("chat.branch"),
                info=i18n("chat.branch.info"),
                visible=False,
                elem_id="chat-branch",
            )
            _api_controls(w)
        with gr.Column(scale=1):
            w.update(build_controls(engine, settings))
    handlers = ChatHandlers(engine, settings, workspaces)
    _wire(handlers, w)
    return w, handlers


def _api_controls(w: dict[str, Any]) -> None:
    """The same actions as a token card's buttons, for the HTTP API (hidden)."""
    hidden = {"visible": "hidden"}
    w["fork_position"] = CheckedNumber(label=i18n("chat.fork_position"), precision=0, **hidden)
    w["fork_token"] = CheckedNumber(label=i18n("chat.fork_token"), precision=0, **hidden)
    w["fork"] = gr.Button(i18n("chat.fork"), **hidden)
    w["open_position"] = CheckedNumber(label=i18n("chat.open_position"), precision=0, **hidden)
    w["open_step"] = gr.Button(i18n("token.open"), **hidden)


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
    for p in PRESETS["chat"]:
        connect(
            w[f"preset_{p.name}"].click,
            _preset_handler(h, p.name),
            w,
            ["message", "status"],
            api_name=None,
            model=False,
        )


def _preset_handler(h: ChatHandlers, name: str) -> Callable[..., dict[str, Any]]:
    def chat_preset(request: gr.Request = None) -> dict[str, Any]:
        return h.chat_preset(name, request)

    chat_preset.__name__ = f"chat_preset_{name}"
    return chat_preset

"""Compare > Chat: one question answered by both sides at once, side by side and streaming, every token
with its numbers (the Chat tab's token cards), and the first place where the two answers part marked.

Each side answers as it would alone (playground/compare.py: same engine, settings and seed, same
tokens). A side that cannot load or fails says why under its column; the other side keeps answering.
"""

from __future__ import annotations

import html
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import gradio as gr

from playground.chat import ChatRequest, stream_chat
from playground.compare import CompareUpdate, Side, SideState, stream_compare
from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.tokens import stream_pieces
from playground.errors import PlaygroundError
from playground.ui.chat_tab import answer_stats, progress_stats
from playground.ui.compare.sides import SIDES, SideEngines, side_columns
from playground.ui.i18n import i18n, localize, t
from playground.ui.ranges import CheckedNumber
from playground.ui.token_html import answer_tokens_html, legend_html

QUESTION = "What is the capital of France?"
SNIPPET = 24  # characters of each answer shown around the place where they part
OUTPUTS = ["compare_parting", *(f"chat_{x}{part}" for x in SIDES for part in ("_title", "", "_stats"))]


def layout(w: dict[str, Any], limit: int) -> None:
    """The question, its buttons, the parting line, then one column per side (limit: the longest
    answer a request may ask for)."""
    with gr.Row(equal_height=True):
        w["compare_message"] = gr.Textbox(
            QUESTION,
            label=i18n("compare.chat.message"),
            lines=2,
            scale=4,
            elem_id="compare-message",
        )
        with gr.Column(scale=1, min_width=160):
            w["compare_send"] = gr.Button(
                i18n("compare.chat.send"), variant="primary", elem_id="compare-send"
            )
            w["compare_stop"] = gr.Button(i18n("compare.stop"), size="sm", elem_id="compare-stop")
    with gr.Row(elem_classes=["stage-hide"]):
        w["compare_system"] = gr.Textbox("", label=i18n("compare.chat.system"), scale=3)
        w["compare_max_new_tokens"] = CheckedNumber(
            32,
            label=i18n("compare.chat.max_new_tokens"),
            precision=0,
            minimum=1,
            maximum=limit,
            scale=1,
            min_width=140,
        )
    w["compare_ticket"] = gr.State(None)
    gr.HTML(legend_html(), elem_classes=["stage-hide"])
    w["compare_parting"] = gr.Markdown("", elem_id="compare-parting")
    side_columns(w, _column, elem_id="compare-answers")


def _column(x: str) -> dict[str, Any]:
    return {
        f"chat_{x}_title": gr.Markdown("", elem_id=f"compare-chat-{x}-title"),
        f"chat_{x}": gr.HTML("", elem_id=f"compare-chat-{x}"),
        f"chat_{x}_stats": gr.Markdown("", elem_id=f"compare-chat-{x}-stats", elem_classes=["chat-stats"]),
    }


def run(
    engines: SideEngines,
    message: str,
    system: str,
    max_new_tokens: int,
    limit: int,
    control: Control,
) -> Generator[dict[str, Any], None, list[str]]:
    """Load both sides, then stream both answers (views by component name); returns both answers'
    texts ('' for a side that gave none)."""
    lang = engines.lang
    titles = {f"chat_{c.letter}_title": f"**{c.describe(lang)}**" for c in engines.choices}
    waiting = t("compare.chat.waiting", lang)
    yield {"compare_parting": "", **titles, **{f"chat_{x}": "" for x in SIDES}}
    yield {f"chat_{x}_stats": waiting for x in SIDES}
    yield from engines.load(control)
    messages = [{"role": "user", "content": message}]
    texts = ["", ""]
    for update in stream_sides(engines, messages, system, max_new_tokens, limit, control):
        texts = [side.text for side in update.sides]
        yield render(update, engines, lang, control)
    return texts


def stream_sides(
    engines: SideEngines,
    messages: list[dict[str, str]],
    system: str,
    max_new_tokens: int,
    limit: int,
    control: Control,
) -> Iterator[CompareUpdate]:
    """Both sides' answers as they stream (stream_compare); a side with no engine stays with its
    reason, and the other answers alone."""
    sides = [
        Side(engines.engines[i], c.settings, c.seed, system, label=c.key)  # type: ignore[arg-type]
        for i, c in enumerate(engines.choices)
        if engines.engines[i] is not None
    ]
    if len(sides) == 2:
        yield from stream_compare(
            sides, messages, max_new_tokens=max_new_tokens, max_new_tokens_limit=limit, control=control
        )
        return
    states = [SideState(c.key, error=engines.errors[i], done=True) for i, c in enumerate(engines.choices)]
    if not sides:
        yield CompareUpdate(states)
        return
    index, side = engines.ready[0], sides[0]
    states[index].done = False
    request = ChatRequest(messages, side.system_prompt, side.settings, max_new_tokens, side.seed)
    try:
        for update in stream_chat(side.engine, request, limit, control=control):
            states[index].update = update
            yield CompareUpdate(states)
    except PlaygroundError as exc:  # Stop included
        states[index].error = exc.message
    states[index].done = True
    yield CompareUpdate(states)


def render(update: CompareUpdate, engines: SideEngines, lang: str, control: Control) -> dict[str, Any]:
    """Both columns (token cards, the parting marked) and the parting line."""
    parting = update.parting if all(s.update is not None for s in update.sides) else None
    views: dict[str, Any] = {"compare_parting": parting_line(update, parting, lang)}
    for index, (letter, state) in enumerate(zip(SIDES, update.sides, strict=True)):
        engine = engines.engines[index]
        tokens = state.update.tokens if state.update is not None else []
        marked = parting_token(engine, tokens, parting) if engine is not None else None
        cards = answer_tokens_html(tokens, forkable=False, marked=marked, lang=lang) if tokens else ""
        views[f"chat_{letter}"] = cards
        views[f"chat_{letter}_stats"] = side_stats(state, lang, control)
    return views


def side_stats(state: SideState, lang: str, control: Control) -> str:
    """The line under a side: prefill progress, the answer's statistics and notes, or why it stopped."""
    if state.error:
        why = t("compare.stopped", lang) if control.cancelled else localize(state.error, lang)
        return t("compare.side.failed", lang, why=why)
    update = state.update
    if update is None:
        return t("compare.chat.waiting", lang)
    if update.progress is not None:
        return progress_stats(update)
    notes = "".join(f"\n\n> {localize(note, lang)}" for note in update.notes)
    return (answer_stats(update) if update.finished else t("compare.chat.writing", lang)) + notes


def parting_line(update: CompareUpdate, parting: int | None, lang: str) -> str:
    """Where the two answers part, each shown a little before and after that character."""
    a, b = (side.text for side in update.sides)
    if parting is None:
        finished = update.finished and all(s.update is not None and not s.error for s in update.sides)
        return t("compare.parting.same", lang) if finished and a == b else ""
    start = max(0, parting - SNIPPET)
    shown = [_snippet(text, start, parting) for text in (a, b)]
    return t("compare.parting", lang, at=parting, a=shown[0], b=shown[1])


def _snippet(text: str, start: int, at: int) -> str:
    before = html.escape(text[start:at].replace("\n", "↵"))
    after = html.escape(text[at : at + SNIPPET].replace("\n", "↵")) or "∅"
    return f"<code>{'…' if start else ''}{before}<mark>{after}</mark></code>"


def parting_token(engine: Engine, tokens: Sequence[Any], parting: int | None) -> int | None:
    """The index (in tokens) of the token holding the answer's character at `parting`: the answer
    text is decoded from the non-special tokens, each adding its piece (a character's byte tokens:
    the last adds it)."""
    if parting is None:
        return None
    shown = [i for i, token in enumerate(tokens) if not token.special]
    pieces = stream_pieces(engine.tokenizer, [tokens[i].id for i in shown], 0)
    end = 0
    for index, piece in zip(shown, pieces, strict=True):
        end += len(piece)
        if end > parting:
            return index
    return shown[-1] if shown else None


def link_values(message: str, system: str, max_new_tokens: int) -> dict[str, Any]:
    """What a link to this comparison carries besides the sides."""
    return {"compare_message": message, "compare_system": system, "compare_max_new_tokens": max_new_tokens}


def check_message(message: Any) -> str:
    """The question, or a clear refusal of an empty one."""
    if not str(message or "").strip():
        raise PlaygroundError("Empty question: type something to send.", key="compare.error.empty")
    return str(message)

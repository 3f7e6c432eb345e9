"""The chat history as the Chatbot shows it, and as the model reads it.

What the Chatbot shows carries display-only parts: a statistics footer under each answer, and
each user message wrapped so that it shows as typed (the Chatbot renders Markdown and HTML).
`normalize_history` removes both, so the model always reads the text itself.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Sequence
from typing import Any

from playground.engine.prompts import Message

# Each shown answer ends with its statistics in this footer; it is display only, and
# normalize_history strips it so the model never sees it. It starts with a dash, which every font has
# (a stopwatch emoji showed as a box where no emoji font is installed).
FOOTER_START = "\n\n<sub>— "
# An answer that opens a code block and never closes it (cut by max new tokens, or stopped) would
# show the footer as raw text inside the block: the block is closed before the footer by a fence
# marked as ours (an HTML comment, not shown), which normalize_history removes with the footer.
FENCE_MARK = "<!-- closed before the statistics -->"
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
# An answer of only whitespace comes back stripped, footer first; a footer left in would make the
# next answer depend on its timings (how busy the server was). Histories saved before carry "⏱ ".
_FOOTER_PATTERN = re.compile(
    r"(?:\n(?:`{3,}|~{3,})\n" + re.escape(FENCE_MARK) + r")?(?:\n\n|^\s*)<sub>(?:— |⏱ ).*?</sub>\s*$",
    re.DOTALL,
)

# A user message is shown inside this span with every character Markdown or HTML could read
# (punctuation, line breaks, tabs) as a character reference: `**bold**` and `<img>` show as typed.
_USER_START = '<span class="user-text" style="white-space: pre-wrap">'
_USER_END = "</span>"
_USER_PATTERN = re.compile(re.escape(_USER_START) + r"(.*)" + re.escape(_USER_END), re.DOTALL)
_LITERAL = frozenset(string.punctuation + "\n\r\t")


def with_footer(text: str, footer: str) -> str:
    """The answer text followed by its statistics line (shown under the answer), a code block the
    text leaves open closed first."""
    return f"{text}{closing_fence(text)}{FOOTER_START}{footer}</sub>"


def closing_fence(text: str) -> str:
    """What closes the fenced code block a Markdown text opens and never closes: a fence like its
    opening one, marked as ours ("" when every block is closed)."""
    opened: str | None = None
    for line in text.split("\n"):
        fence = _FENCE.fullmatch(line)
        if fence is None:
            continue
        marks, rest = fence.groups()
        if opened is None and not (marks[0] == "`" and "`" in rest):  # a backtick in the info: no fence
            opened = marks
        elif opened and marks[0] == opened[0] and len(marks) >= len(opened) and not rest.strip():
            opened = None
    return "" if opened is None else f"\n{opened}\n{FENCE_MARK}"


def as_typed(text: str) -> str:
    """A user message for the Chatbot: shown exactly as typed, no Markdown or HTML applied.
    (Every character of the span is a character reference, so the Chatbot keeps it on one line.)"""
    escaped = "".join(f"&#{ord(c)};" if c in _LITERAL else c for c in text)
    return f"{_USER_START}{escaped}{_USER_END}"


def back_in_box(taken_back: str, box: str | None) -> str:
    """The message box when a message is taken back into it (an Undo, a Stop before the first token):
    that message, before what was typed there since, so nothing typed is lost."""
    if not (box or "").strip() or box == taken_back:
        return taken_back
    return f"{taken_back}\n{box}" if taken_back else str(box)


def without_last_answer(history: Sequence[Any] | None) -> list:
    """The Chatbot's history without its last message when that is an answer."""
    history = list(history or [])
    if history and message_role(history[-1]) == "assistant":
        history.pop()
    return history


def without_last_exchange(history: Sequence[Any] | None) -> tuple[list, str]:
    """An Undo: the history before its last user message (and the answers after it), and that
    message's text ("" when there is none)."""
    history = list(history or [])
    while history and message_role(history[-1]) != "user":
        history.pop()
    last_user = normalize_history(history[-1:])[0]["content"] if history else ""
    return history[:-1], last_user


def without_unanswered(history: Sequence[Any] | None) -> tuple[list, str | None]:
    """A Stop before the first token: the history without its last message when that is a user
    message still waiting for its answer, and that message's text (None: the last is no such message)."""
    history = list(history or [])
    if not history or message_role(history[-1]) != "user":
        return history, None
    typed = normalize_history(history[-1:])[0]["content"]
    return history[:-1], typed


def with_last_footer(history: Sequence[Any], footer: str) -> list:
    """The history with its last answer's statistics footer set to `footer` (a stopped answer)."""
    history = list(history)
    last = normalize_history(history[-1:])
    if last and last[0]["role"] == "assistant":
        history[-1] = {"role": "assistant", "content": with_footer(last[0]["content"], footer)}
    return history


def shown_history(messages: Sequence[Message]) -> list[Message]:
    """Plain messages (what the model reads) as the Chatbot shows them: user messages as typed."""
    return [
        {**m, "content": as_typed(m["content"])} if m.get("role") == "user" else dict(m) for m in messages
    ]


def normalize_history(history: Sequence[Any] | None) -> list[Message]:
    """Chat history from Gradio 6 (content as a list of blocks) or the API (plain strings)
    as plain {"role", "content": str} dicts, without the statistics footers and display wrapping."""
    messages = []
    for message in history or []:
        role = message_role(message)
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
        if role not in {"user", "assistant", "system"}:
            continue
        text = _content_text(content)
        if role == "assistant":
            text = _FOOTER_PATTERN.sub("", text)
        elif role == "user" and (typed := _USER_PATTERN.fullmatch(text)):
            text = html.unescape(typed.group(1))
        messages.append({"role": role, "content": text})
    return messages


def message_role(message: Any) -> str | None:
    """The role of a history entry, whether a dict (API, Gradio) or a ChatMessage object."""
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return str(content.get("text", ""))
    if isinstance(content, (list, tuple)):
        return "".join(_content_text(block) for block in content)
    return "" if content is None else str(content)

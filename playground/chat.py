"""Streaming chat with per-token probabilities and timings, and answers you can fork.

`stream_chat` asks the engine to read the conversation (with progress while a long prompt is
read) and to generate the answer one token at a time, so every token comes with the model's
true distribution at its position: probability, log-prob, rank, the top-5 alternatives and
the probability it had under the sampling settings it was drawn with.

An answer can start with given tokens (`ChatRequest.answer_prefix`): they are reported with
their probabilities and marked as given, and generation continues after them. `ChatSession`
uses that to fork an answer at any token and keeps every branch in one `GenerationTree`.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from playground.engine.base import DecodePlan, Engine, Progress
from playground.engine.control import Control
from playground.engine.prompts import Message, encode_conversation
from playground.engine.records import TokenRecord
from playground.engine.sampling import SamplingSettings, validate_settings
from playground.engine.tokens import check_token_id, decode_ids
from playground.errors import PlaygroundError
from playground.tree import ROOT, GenerationTree


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]  # [{"role": "user"|"assistant", "content": str}], last is user
    system_prompt: str = ""  # "" = the model's own default system prompt (from its chat template)
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    max_new_tokens: int = 256  # generated tokens after the answer prefix
    seed: int | None = None
    answer_prefix: list[int] | None = None  # token ids the answer starts with (given, not generated)


@dataclass
class ChatTimings:
    prompt_tokens: int = 0
    wait_seconds: float = 0.0  # waiting for the shared model (other requests were running)
    prefill_seconds: float = 0.0  # time to first token: reading the prompt + the first choice
    generated_tokens: int = 0  # tokens generated (answer-prefix tokens not counted)
    decode_seconds: float = 0.0  # model time for every generated token after the first

    @property
    def decode_tokens_per_second(self) -> float:
        decoded = self.generated_tokens - 1
        return decoded / self.decode_seconds if decoded > 0 and self.decode_seconds > 0 else 0.0

    def summary(self) -> str:
        rate = f"{self.decode_tokens_per_second:.1f} tok/s" if self.generated_tokens > 1 else "n/a"
        wait = f"waited {self.wait_seconds:.1f} s for the model · " if self.wait_seconds >= 0.05 else ""
        return (
            f"prompt {_count(self.prompt_tokens, 'token')} · {wait}prefill (time to first token) "
            f"{self.prefill_seconds * 1000:,.0f} ms · generated {_count(self.generated_tokens, 'token')} "
            f"· decode {rate}"
        )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


@dataclass
class ChatUpdate:
    """Yielded while the prompt is read (progress) and after every token: the answer so far."""

    text: str
    tokens: list[TokenRecord]  # given tokens first (source "given"), then generated ones
    timings: ChatTimings
    prompt_ids: list[int]
    seed: int
    notes: list[str] = field(default_factory=list)  # truncation, template fallback, ...
    finished: bool = False
    stop_reason: str = ""  # "eos", "max_new_tokens" or "context"
    progress: tuple[int, int] | None = None  # (prompt tokens read, to read) while prefilling

    @property
    def answer_ids(self) -> list[int]:
        return [token.id for token in self.tokens]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (what a recorded trace keeps)."""
        data = asdict(self)
        data["tokens"] = [token.to_dict() for token in self.tokens]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatUpdate:
        values = dict(data)
        values["tokens"] = [TokenRecord.from_dict(t) for t in data["tokens"]]
        values["timings"] = ChatTimings(**data["timings"])
        values["progress"] = tuple(data["progress"]) if data.get("progress") else None
        return cls(**values)


# Each shown answer ends with its statistics in this footer; it is display only, and
# normalize_history strips it so the model never sees it.
FOOTER_START = "\n\n<sub>⏱ "
# An answer of only whitespace comes back stripped, footer first; a footer left in would make the
# next answer depend on its timings (how busy the server was).
_FOOTER_PATTERN = re.compile(r"(?:\n\n|^\s*)<sub>⏱ .*?</sub>\s*$", re.DOTALL)


def with_footer(text: str, footer: str) -> str:
    """The answer text followed by its statistics line (shown under the answer)."""
    return f"{text}{FOOTER_START}{footer}</sub>"


def normalize_history(history: Sequence[Any] | None) -> list[Message]:
    """Chat history from Gradio 6 (content as a list of blocks) or the API (plain strings)
    as plain {"role", "content": str} dicts, without the statistics footers."""
    messages = []
    for message in history or []:
        role = message_role(message)
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
        if role not in {"user", "assistant", "system"}:
            continue
        text = _content_text(content)
        if role == "assistant":
            text = _FOOTER_PATTERN.sub("", text)
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


def check_request(engine: Engine, request: ChatRequest, max_new_tokens_limit: int) -> SamplingSettings:
    """Validate everything the user typed; raises PlaygroundError with the bad value."""
    if not request.messages or request.messages[-1]["role"] != "user":
        raise PlaygroundError("Nothing to answer: the conversation must end with a user message.")
    if not request.messages[-1]["content"].strip():
        raise PlaygroundError("Empty message: type something to send.")
    if not 1 <= request.max_new_tokens <= max_new_tokens_limit:
        raise PlaygroundError(
            f"max new tokens must be between 1 and {max_new_tokens_limit}, got {request.max_new_tokens}"
        )
    if request.seed is not None and not 0 <= request.seed < 2**63:
        raise PlaygroundError(f"seed must be between 0 and 2^63 - 1, got {request.seed}")
    for token_id in request.answer_prefix or []:
        check_token_id(token_id, engine.vocab_size)
    return validate_settings(request.settings)


def build_prompt(engine: Engine, request: ChatRequest) -> tuple[list[int], list[str]]:
    """Token ids of the prompt, fitted to the context, and notes on what was done to fit."""
    notes: list[str] = []
    messages = list(request.messages)
    prefix = len(request.answer_prefix or [])
    budget = engine.context_length - prefix - 1  # the prefix and at least one new token must fit
    while True:
        ids = encode_conversation(engine.tokenizer, messages, request.system_prompt)
        if len(ids) <= budget or len(messages) == 1:
            break
        messages = messages[2:] if len(messages) > 2 else messages[-1:]  # drop the oldest exchange
        if not notes:
            notes.append("Earlier turns were dropped so that the conversation fits in the context.")
    if len(ids) > budget:
        with_prefix = f" plus an answer prefix of {prefix} tokens" if prefix else ""
        raise PlaygroundError(
            f"Prompt too long: {len(ids)} tokens{with_prefix}, but the model's context is "
            f"{engine.context_length} tokens (prompt + answer). Shorten the message."
        )
    if not engine.has_chat_template:
        notes.append("This model has no chat template: plain completion of the text (system prompt unused).")
    return ids, notes


def stream_chat(
    engine: Engine,
    request: ChatRequest,
    max_new_tokens_limit: int = 1024,
    *,
    key: str | None = None,
    control: Control | None = None,
    known: Sequence[TokenRecord] = (),
) -> Iterator[ChatUpdate]:
    """Generate the answer token by token; yields a ChatUpdate while the prompt is read and after
    each token. key: the engine sequence to reuse (a conversation's earlier turns stay cached).
    known: records of the first answer-prefix tokens already computed (a fork), not recomputed.

    Timings count only the model's own work; waiting for the model is counted apart."""
    settings = check_request(engine, request, max_new_tokens_limit)
    prompt_ids, notes = build_prompt(engine, request)
    prefix = list(request.answer_prefix or [])
    room = engine.context_length - len(prompt_ids) - len(prefix)
    max_new = min(request.max_new_tokens, room)
    if max_new < request.max_new_tokens:
        notes.append(
            f"Max new tokens cut to {max_new} to stay within the {engine.context_length}-token context."
        )
    seed = request.seed if request.seed is not None else int(torch.randint(0, 2**31 - 1, (1,)))
    control = control or Control()
    given = [replace(record, source="given") for record in known]  # every prefix token is given
    update = ChatUpdate("", given, ChatTimings(prompt_tokens=len(prompt_ids)), prompt_ids, seed, notes)
    plan = DecodePlan(settings, max_new, seed)
    read = [*prompt_ids, *prefix[: len(known)]]
    events = engine.stream(read, plan, answer_prefix=prefix[len(known) :], key=key, control=control)
    for event in events:
        update.timings.wait_seconds = control.wait_seconds
        if isinstance(event, Progress):
            update.progress = (event.done, event.total)
            yield update
            continue
        update.progress = None
        _append(engine, update, event)
        if not event.given and (
            event.id in engine.eos_token_ids or update.timings.generated_tokens == max_new
        ):
            update.finished = True
            update.stop_reason = _stop_reason(
                event.id in engine.eos_token_ids, max_new < request.max_new_tokens
            )
        if not event.given or update.finished:
            yield update


def _append(engine: Engine, update: ChatUpdate, record: TokenRecord) -> None:
    """Add a token; the text is decoded from all ids at once, so characters split over several
    tokens (emoji, CJK) come out whole. An unfinished character is held back until complete."""
    update.tokens.append(record)
    if not record.given:
        update.timings.generated_tokens += 1
        if update.timings.generated_tokens == 1:
            update.timings.prefill_seconds = record.seconds
        else:
            update.timings.decode_seconds += record.seconds
    ids = [token.id for token in update.tokens if not token.special]
    update.text = decode_ids(engine.tokenizer, ids).rstrip("\ufffd")


def _stop_reason(eos: bool, cut_by_context: bool) -> str:
    if eos:
        return "eos"
    return "context" if cut_by_context else "max_new_tokens"


def run_chat(
    engine: Engine, request: ChatRequest, max_new_tokens_limit: int = 1024, *, control: Control | None = None
) -> ChatUpdate:
    """The final update of stream_chat (for notebooks and tests)."""
    *_, last = stream_chat(engine, request, max_new_tokens_limit, control=control)
    return last


# --- forks: one answer, many branches -------------------------------------------------------------


@dataclass
class AnswerBranch:
    """One continuation of the current answer, for the branch list."""

    node_id: int
    length: int
    text: str
    current: bool


class ChatSession:
    """One browser tab's chat: its engine sequence (earlier turns stay cached) and the tree of
    the last answer, whose every fork is a branch you can switch back to."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.key = f"chat:{uuid.uuid4().hex}"
        self.request: ChatRequest | None = None  # the request of the current answer (without prefix)
        self.tree: GenerationTree | None = None
        self.tip = ROOT
        self.updates: dict[int, ChatUpdate] = {}  # leaf node -> its final update (statistics)
        self._active: Control | None = None  # the running answer's control (one at a time)
        self._state = threading.Lock()

    def answer(
        self,
        request: ChatRequest,
        limit: int,
        control: Control | None = None,
        known: Sequence[TokenRecord] = (),
    ) -> Iterator[ChatUpdate]:
        """A new answer to request (a new tree). known: records of the first answer-prefix tokens,
        already computed elsewhere (a step path continued as chat)."""
        yield from self._run(request, limit, control, known=known, new_tree=True)

    def fork(
        self, position: int, token_id: Any, limit: int, control: Control | None = None
    ) -> Iterator[ChatUpdate]:
        """Cut the current answer before its token at `position` (0-based), put token_id there and
        continue with the same settings. The old continuation stays a branch."""
        with self._state:
            self._check_free()
        if self.request is None or self.tree is None:
            raise PlaygroundError("No answer to fork yet: send a message first.")
        records = self.tree.records(self.tip)
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(records):
            raise PlaygroundError(
                f"Fork position {position!r} is outside the answer (0..{len(records) - 1}): "
                "pick one of its tokens."
            )
        token_id = check_token_id(token_id, self.engine.vocab_size)
        kept = records[:position]
        request = replace(self.request, answer_prefix=[r.id for r in kept] + [token_id])
        yield from self._run(request, limit, control, known=kept)

    def switch(self, node_id: Any) -> ChatUpdate:
        """Show another branch of the current answer (no model work: its records are in the tree)."""
        if self.tree is None:
            raise PlaygroundError("No answer yet: send a message first.")
        node = self.tree.node(node_id)
        leaf = node.id
        while self.tree.nodes[leaf].children:
            leaf = self.tree.nodes[leaf].children[-1]
        if leaf not in self.updates:
            raise PlaygroundError(f"Node {node_id} does not end an answer.")
        self.tip = leaf
        return self.updates[leaf]

    def branches(self) -> list[AnswerBranch]:
        if self.tree is None:
            return []
        return [
            AnswerBranch(leaf, self.tree.depth(leaf), update.text, leaf == self.tip)
            for leaf, update in self.updates.items()
        ]

    def stop(self) -> None:
        """Cancel the running answer, if any: the model stops at its next chunk or token."""
        with self._state:
            if self._active is not None:
                self._active.cancel()

    def release(self) -> None:
        self.stop()
        self.engine.release(self.key)

    def _run(
        self,
        request: ChatRequest,
        limit: int,
        control: Control | None,
        known: Sequence[TokenRecord],
        new_tree: bool = False,
    ) -> Iterator[ChatUpdate]:
        control = self._start(control or Control())
        if new_tree:
            self.request, self.tree, self.tip, self.updates = (
                replace(request, answer_prefix=None),
                None,
                ROOT,
                {},
            )
        update, kept = None, False
        try:
            for update in stream_chat(
                self.engine, request, limit, key=self.key, control=control, known=known
            ):
                if update.finished:  # kept before it is shown, so its branch is listed with it
                    self._keep(update, control)
                    kept = True
                yield update
        finally:  # a stopped answer is kept too: it can be forked like any other
            if update is not None and update.tokens and not kept:
                self._keep(update, control)
            with self._state:
                if self._active is control:
                    self._active = None

    def _start(self, control: Control) -> Control:
        """Make control the running answer's. A second answer (a fork, a retry) while one runs is
        refused; a stopped one no longer counts (its generator may never be resumed to end)."""
        with self._state:
            self._check_free()
            self._active = control
        return control

    def _check_free(self) -> None:
        if self._active is not None and not self._active.cancelled:
            raise PlaygroundError(
                "An answer is still being written in this tab: wait for it, or press Stop first."
            )

    def _keep(self, update: ChatUpdate, control: Control) -> None:
        if self._active is not control:  # superseded after a Stop: the newer answer owns the tree
            return
        if self.tree is None:
            self.tree = GenerationTree(update.prompt_ids)
        self.tip = self.tree.extend(ROOT, update.tokens)[-1]
        self.updates[self.tip] = update

"""Streaming chat with per-token probabilities and timings, and answers you can fork.

`stream_chat` asks the engine to read the conversation (with progress while a long prompt is
read) and to generate the answer one token at a time, so every token comes with the model's
true distribution at its position: probability, log-prob, rank, the top-5 alternatives and
the probability it had under the sampling settings it was drawn with.

An answer can start with given tokens (`ChatRequest.answer_prefix`): they are reported with
their probabilities and marked as given, and generation continues after them. `ChatSession`
uses that to fork an answer at any token and keeps every branch in one `GenerationTree`, one
`ChatTurn` per exchange on screen: Undo and Clear forget theirs (`sync`), so nothing the page
no longer shows can come back.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from playground import messages as said

# Re-exported: the history helpers were here first.
from playground.chat_history import (  # noqa: F401
    FOOTER_START,
    as_typed,
    message_role,
    normalize_history,
    shown_history,
    with_footer,
)
from playground.engine.base import DecodePlan, Engine, Progress
from playground.engine.control import Control
from playground.engine.prompts import Message, encode_conversation
from playground.engine.records import TokenRecord
from playground.engine.sampling import SamplingSettings, validate_settings
from playground.engine.tokens import check_token_id, decode_ids
from playground.errors import Cancelled, PlaygroundError
from playground.tree import ROOT, GenerationTree

# Said with an answer of a model that has no chat template (a base model, e.g. gemma-3-270m); the UI
# says it in the page's language (its key).
NO_TEMPLATE_NOTE = said.Message(
    "notes.no_template",
    "no chat template: a base model continues your text (the system prompt is unused)",
)


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]  # [{"role": "user"|"assistant", "content": str}], last is user
    system_prompt: str = ""  # "" = the model's own default system prompt (from its chat template)
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    max_new_tokens: int = 256  # generated tokens after the answer prefix
    seed: int | None = None
    answer_prefix: list[int] | None = None  # token ids the answer starts with (given, not generated)
    notes: tuple[str, ...] = ()  # said of the request before it was made (a value brought into range)


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
        """One line of the answer's timings (a Message: the UI says it in the page's language)."""
        rate = (
            said.Message("chat.stats.rate", "{rate:.1f} tok/s", rate=self.decode_tokens_per_second)
            if self.generated_tokens > 1
            else said.Message("chat.stats.no_rate", "n/a")
        )
        wait = (
            said.Message(
                "chat.stats.waited", "waited {seconds:.1f} s for the model · ", seconds=self.wait_seconds
            )
            if self.wait_seconds >= 0.05
            else ""
        )
        return said.Message(
            "chat.stats.timings",
            "prompt {prompt} · {wait}prefill (time to first token) {prefill:,.0f} ms · generated "
            "{generated} · decode {rate}",
            prompt=token_count(self.prompt_tokens),
            wait=wait,
            prefill=self.prefill_seconds * 1000,
            generated=token_count(self.generated_tokens),
            rate=rate,
        )


def token_count(n: int) -> said.Message:
    """'1 token', '12 tokens' (a Message)."""
    if n == 1:
        return said.Message("chat.count.one", "{n:,} token", n=n)
    return said.Message("chat.count.many", "{n:,} tokens", n=n)


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


def check_request(engine: Engine, request: ChatRequest, max_new_tokens_limit: int) -> SamplingSettings:
    """Validate everything the user typed; raises PlaygroundError with the bad value."""
    if not request.messages or request.messages[-1]["role"] != "user":
        raise PlaygroundError(
            "Nothing to answer: the conversation must end with a user message.", key="chat.error.no_user"
        )
    if not request.messages[-1]["content"].strip():
        raise PlaygroundError("Empty message: type something to send.", key="chat.error.empty")
    if not 1 <= request.max_new_tokens <= max_new_tokens_limit:
        raise PlaygroundError(
            "max new tokens must be between 1 and {limit}, got {value}",
            key="chat.error.max_new_tokens",
            limit=max_new_tokens_limit,
            value=request.max_new_tokens,
        )
    if request.seed is not None and not 0 <= request.seed < 2**63:
        raise PlaygroundError(
            "seed must be between 0 and 2^63 - 1, got {seed}", key="chat.error.seed_range", seed=request.seed
        )
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
            notes.append(
                said.Message(
                    "chat.note.dropped",
                    "Earlier turns were dropped so that the conversation fits in the context.",
                )
            )
    if len(ids) > budget:
        with_prefix = (
            said.Message("chat.error.with_prefix", " plus an answer prefix of {prefix} tokens", prefix=prefix)
            if prefix
            else ""
        )
        raise PlaygroundError(
            "Prompt too long: {tokens} tokens{with_prefix}, but the model's context is {context} tokens "
            "(prompt + answer). Shorten the message.",
            key="chat.error.too_long",
            tokens=len(ids),
            with_prefix=with_prefix,
            context=engine.context_length,
        )
    if not engine.has_chat_template:
        notes.append(NO_TEMPLATE_NOTE)
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
    prompt_ids, fitted = build_prompt(engine, request)
    notes = [*request.notes, *fitted]
    prefix = list(request.answer_prefix or [])
    room = engine.context_length - len(prompt_ids) - len(prefix)
    max_new = min(request.max_new_tokens, room)
    if max_new < request.max_new_tokens:
        notes.append(
            said.Message(
                "chat.note.max_new_cut",
                "Max new tokens cut to {max_new} to stay within the {context}-token context.",
                max_new=max_new,
                context=engine.context_length,
            )
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


# --- forks: one answer, many branches; turns: the conversation on screen ---------------------------


@dataclass
class AnswerBranch:
    """One continuation of the current answer, for the branch list."""

    node_id: int
    length: int
    text: str
    current: bool


@dataclass(eq=False)  # turns are told apart by identity: two alike exchanges are still two
class ChatTurn:
    """One exchange: the conversation it answers and the tree of its answer, every fork a branch."""

    request: ChatRequest  # the conversation up to its user message (no answer prefix)
    tree: GenerationTree | None = None  # None until the answer has a token
    tip: int = ROOT  # the branch shown
    updates: dict[int, ChatUpdate] = field(default_factory=dict)  # leaf node -> its final update
    asked: dict[int, ChatRequest] = field(default_factory=dict)  # leaf node -> the request it answered

    @property
    def shown(self) -> ChatUpdate | None:
        return self.updates.get(self.tip)

    @property
    def shown_request(self) -> ChatRequest:
        """The request of the branch shown (a Retry may have answered with other settings)."""
        return self.asked.get(self.tip, self.request)

    def on_screen(self, messages: Sequence[Message]) -> bool:
        """Whether this exchange is part of messages (the conversation on screen): its
        conversation, then an answer. (The answer's text is not compared: a Stop may end the
        answer a token after the last one the page received.)"""
        n = len(self.request.messages)
        return (
            self.shown is not None
            and len(messages) > n
            and list(messages[:n]) == self.request.messages
            and messages[n].get("role") == "assistant"
        )


class ChatSession:
    """One browser tab's chat: its engine sequence (earlier turns stay cached) and its turns, the
    exchanges on screen, oldest first. Only the last turn's answer is shown with its tokens and can
    be forked; undoing an exchange forgets its turn, so the one before it is the last again."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.key = f"chat:{uuid.uuid4().hex}"
        self.turns: list[ChatTurn] = []
        self._active: Control | None = None  # the running answer's control (one at a time)
        self._writing: ChatTurn | None = None  # the turn it writes into
        self._state = threading.Lock()
        self._ended = threading.Condition(self._state)  # notified when an answer's generator ends

    @property
    def turn(self) -> ChatTurn | None:
        """The last exchange: the answer shown with its tokens."""
        return self.turns[-1] if self.turns else None

    @property
    def request(self) -> ChatRequest | None:
        """The request of the last answer's branch shown (without prefix)."""
        return self.turn.shown_request if self.turn else None

    @property
    def tree(self) -> GenerationTree | None:
        return self.turn.tree if self.turn else None

    @property
    def tip(self) -> int:
        return self.turn.tip if self.turn else ROOT

    @property
    def updates(self) -> dict[int, ChatUpdate]:
        return self.turn.updates if self.turn else {}

    def answer(
        self,
        request: ChatRequest,
        limit: int,
        control: Control | None = None,
        known: Sequence[TokenRecord] = (),
    ) -> Iterator[ChatUpdate]:
        """A new answer to request, a new turn after the earlier turns of its conversation (any
        other turn is forgotten). known: records of the first answer-prefix tokens, already
        computed elsewhere (a step path continued as chat). An answer that never gets a token
        (refused, stopped while reading the prompt) leaves the turns as they were."""
        turn = ChatTurn(replace(request, answer_prefix=None))
        yield from self._run(turn, request, limit, control, known, new_turn=True)

    def retry(self, request: ChatRequest, limit: int, control: Control | None = None) -> Iterator[ChatUpdate]:
        """Answer the last exchange's message again: a new branch of its answer, from its first token,
        the earlier answers and their forks kept (switch back to them). A request that is not the
        last exchange's conversation (or system prompt) gets a new answer instead."""
        turn = self.turn
        asked = (request.messages, request.system_prompt)  # the same prompt: the same tree
        if turn is None or turn.tree is None or (turn.request.messages, turn.request.system_prompt) != asked:
            yield from self.answer(request, limit, control)
            return
        yield from self._run(turn, replace(request, answer_prefix=None), limit, control, known=())

    def fork(
        self, position: int, token_id: Any, limit: int, control: Control | None = None
    ) -> Iterator[ChatUpdate]:
        """Cut the last answer before its token at `position` (0-based), put token_id there and
        continue with the same settings. The old continuation stays a branch."""
        with self._state:
            self._check_free()
            turn = self.turn
        if turn is None or turn.tree is None:
            raise PlaygroundError("No answer to fork yet: send a message first.", key="chat.error.no_fork")
        records = turn.tree.records(turn.tip)
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(records):
            raise PlaygroundError(
                "Fork position {position!r} is outside the answer (0..{last}): pick one of its tokens.",
                key="chat.error.fork_position",
                position=position,
                last=len(records) - 1,
            )
        token_id = check_token_id(token_id, self.engine.vocab_size)
        kept = records[:position]
        request = replace(turn.shown_request, answer_prefix=[r.id for r in kept] + [token_id])
        yield from self._run(turn, request, limit, control, known=kept)

    def switch(self, node_id: Any) -> ChatUpdate:
        """Show another branch of the last answer (no model work: its records are in the tree)."""
        turn = self.turn
        if turn is None or turn.tree is None:
            raise PlaygroundError("No answer yet: send a message first.", key="chat.error.no_answer")
        leaf = turn.tree.node(node_id).id
        while turn.tree.nodes[leaf].children:
            leaf = turn.tree.nodes[leaf].children[-1]
        if leaf not in turn.updates:
            raise PlaygroundError(
                "Node {node} does not end an answer.",
                key="chat.error.not_a_leaf",
                node=node_id,
            )
        turn.tip = leaf
        return turn.updates[leaf]

    def branches(self) -> list[AnswerBranch]:
        turn = self.turn
        if turn is None or turn.tree is None:
            return []
        return [
            AnswerBranch(leaf, turn.tree.depth(leaf), update.text, leaf == turn.tip)
            for leaf, update in turn.updates.items()
        ]

    def sync(self, messages: Sequence[Message]) -> None:
        """Keep only the turns of messages, the conversation on screen (after an Undo or a Clear):
        a later exchange is forgotten, and its answer stopped if it is still being written."""
        with self._state:
            kept = self._count_on_screen(messages)
            dropped = self.turns[kept:]
            del self.turns[kept:]
            if self._active is not None and any(turn is self._writing for turn in dropped):
                self._active.cancel()

    def check_last(self, messages: Sequence[Message]) -> None:
        """Refuse to act on the last answer unless messages (the conversation on screen before the
        answer) are the ones it answered: a fork or a branch must never bring back another one."""
        turn = self.turn
        if turn is not None and turn.shown is not None and list(messages) != turn.request.messages:
            raise PlaygroundError(
                "That answer is no longer this tab's last one (undone, or the chat was changed): "
                "send the message again to answer it.",
                key="chat.error.not_last",
            )

    def stop(self) -> None:
        """Cancel the running answer, if any: the model stops at its next chunk or token."""
        with self._state:
            if self._active is not None:
                self._active.cancel()

    @property
    def running(self) -> bool:
        """Whether an answer's generator runs (a cancelled one too, until it ends)."""
        with self._state:
            return self._active is not None

    def wait_ended(self, timeout: float = 3.0) -> bool:
        """Wait (at most timeout seconds) until no answer's generator runs: after a cancel, within
        a token or a prefill chunk. Whatever it showed was then sent before what the caller shows
        next (a page must not get a stale update after Undo or Stop). False on timeout (a stopped
        generator nobody resumes or closes)."""
        with self._ended:
            return self._ended.wait_for(lambda: self._active is None, timeout)

    def release(self) -> None:
        self.stop()
        self.engine.release(self.key)

    def _run(
        self,
        turn: ChatTurn,
        request: ChatRequest,
        limit: int,
        control: Control | None,
        known: Sequence[TokenRecord],
        new_turn: bool = False,
    ) -> Iterator[ChatUpdate]:
        control, before = self._start(control or Control(), turn, new_turn)
        update, kept = None, False
        try:
            for update in stream_chat(
                self.engine, request, limit, key=self.key, control=control, known=known
            ):
                if update.finished:  # kept before it is shown, so its branch is listed with it
                    self._keep(turn, update, control, request)
                    kept = True
                if self._forgotten(turn):  # undone or cleared meanwhile: show nothing more of it
                    return
                yield update
        except Cancelled:
            if not self._forgotten(turn):  # Stop: the caller hears of it; Undo, Clear: they asked
                raise
        finally:  # a stopped answer is kept too: it can be forked like any other
            if update is not None and update.tokens and not kept:
                self._keep(turn, update, control, request)
            self._end(turn, control, before)

    def _start(self, control: Control, turn: ChatTurn, new_turn: bool) -> tuple[Control, list[ChatTurn]]:
        """Make control the running answer's (and a new turn the last). A second answer (a fork, a
        retry) while one runs is refused; a stopped one no longer counts (its generator may never
        be resumed to end). Returns the turns as they were, to restore if no token comes."""
        with self._state:
            self._check_free()
            self._active, self._writing, before = control, turn, list(self.turns)
            if new_turn:
                self.turns[self._count_on_screen(turn.request.messages) :] = [turn]
        return control, before

    def _forgotten(self, turn: ChatTurn) -> bool:
        """Whether sync dropped turn (checked under the lock sync holds: no update shown after)."""
        with self._state:
            return not any(t is turn for t in self.turns)

    def _count_on_screen(self, messages: Sequence[Message]) -> int:
        """How many turns, from the first, are exchanges of messages."""
        kept = 0
        while kept < len(self.turns) and self.turns[kept].on_screen(messages):
            kept += 1
        return kept

    def _end(self, turn: ChatTurn, control: Control, before: list[ChatTurn]) -> None:
        with self._state:
            if turn.tree is None and self.turns and self.turns[-1] is turn:
                self.turns[:] = before  # no token came: the message was not answered
            if self._active is control:
                self._active, self._writing = None, None
                self._ended.notify_all()

    def _check_free(self) -> None:
        if self._active is not None and not self._active.cancelled:
            raise PlaygroundError(
                "An answer is still being written in this tab: wait for it, or press Stop first.",
                key="chat.error.busy",
            )

    def _keep(self, turn: ChatTurn, update: ChatUpdate, control: Control, request: ChatRequest) -> None:
        if self._active is not control:  # superseded after a Stop: the newer answer owns the turns
            return
        if turn.tree is None:
            turn.tree = GenerationTree(update.prompt_ids)
        turn.tip = turn.tree.extend(ROOT, update.tokens)[-1]
        turn.updates[turn.tip] = update
        turn.asked[turn.tip] = replace(request, answer_prefix=None)

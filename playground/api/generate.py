"""One OpenAI request through the engine: its prompt's ids, then the answer in pieces of text.

The answer comes from `Engine.stream`, the path every chat stream of the app takes: with continuous
batching the request joins the running batch like a chat tab's. Its text is decoded from all its ids
at once (a character split over byte tokens comes out whole), and held back while it may be the start
of a stop string; a stop string ends the answer there (cut off, finish_reason "stop").
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.api.params import ApiError, ChatBody, CompletionBody, Params
from playground.engine.base import DecodePlan, Engine, Progress
from playground.engine.control import Control
from playground.engine.prompts import encode_conversation, encode_text
from playground.engine.records import TOP_ALTERNATIVES, TokenRecord
from playground.engine.tokens import check_token_id, decode_ids


@dataclass
class Piece:
    """New text of the answer and the tokens it came with (in order, each once)."""

    text: str
    records: list[TokenRecord]
    finish_reason: str | None = None  # on the last piece: "stop" (end of sequence, a stop string) or "length"


@dataclass
class Generation:
    """A request as the engine gets it, and what it has produced so far."""

    prompt_ids: list[int]
    plan: DecodePlan
    stop: tuple[str, ...] = ()
    generated: int = 0  # tokens generated (the end-of-sequence token included, as servers count)
    ids: list[int] = field(default_factory=list)  # the answer's ids (no special tokens)

    @property
    def seed(self) -> int:
        return self.plan.seed


def chat_prompt(engine: Engine, body: ChatBody) -> list[int]:
    """The conversation through the model's chat template (plain text joined by lines without one)."""
    return encode_conversation(engine.tokenizer, body.messages, body.system_prompt)


def completion_prompt(engine: Engine, body: CompletionBody) -> list[int]:
    """A text prompt as a sequence's start (the model's own BOS where it wants one), or given ids."""
    if isinstance(body.prompt, str):
        return encode_text(engine.tokenizer, body.prompt)
    for token_id in body.prompt:
        try:
            check_token_id(token_id, engine.vocab_size)
        except ValueError as exc:
            raise ApiError(str(exc), param="prompt") from None
    return list(body.prompt)


def prepare(engine: Engine, prompt_ids: Sequence[int], params: Params, limit: int) -> Generation:
    """The plan of the request: max_tokens within the context (refused when it does not fit), a seed."""
    context, prompt = engine.context_length, len(prompt_ids)
    room = context - prompt
    wanted = params.max_tokens or min(limit, room)
    if room < 1 or wanted > room:
        raise ApiError(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt + max(wanted, 1)} tokens ({prompt} in the prompt, {max(wanted, 1)} for the answer). "
            "Please shorten the prompt or max_tokens.",
            param="max_tokens" if params.max_tokens else "messages",
            code="context_length_exceeded",
        )
    seed = params.seed if params.seed is not None else random.randrange(2**31 - 1)
    top = max(TOP_ALTERNATIVES, params.logprobs or 0)
    return Generation(list(prompt_ids), DecodePlan(params.settings, wanted, seed, top=top), params.stop)


def pieces(engine: Engine, run: Generation, control: Control) -> Iterator[Piece]:
    """The answer as it is generated: a piece whenever text can be released, the last one with the
    finish reason. Leaving early (a stop string, a client gone) takes the request out of the batch."""
    events = engine.stream(run.prompt_ids, run.plan, control=control)
    pending: list[TokenRecord] = []
    sent = 0
    try:
        for event in events:
            if isinstance(event, Progress):
                continue
            run.generated += 1
            eos = event.id in engine.eos_token_ids
            if not (eos and event.special):
                pending.append(event)
            if not event.special:
                run.ids.append(event.id)
            text = decode_ids(engine.tokenizer, run.ids).rstrip("\ufffd")
            end, hit = release(text, run.stop)
            end = max(end, sent)  # what was sent stays sent
            done = hit or eos or run.generated >= run.plan.max_new_tokens
            if end > sent or done:
                reason = ("stop" if hit or eos else "length") if done else None
                yield Piece(text[sent:end], pending, reason)
                pending, sent = [], end
            if done:
                return
    finally:
        events.close()  # a request left early leaves the batch at its next iteration


def release(text: str, stops: Sequence[str]) -> tuple[int, bool]:
    """How much of text can be sent: up to the first stop string (True: found), else all of it but
    an ending that may be the start of one."""
    hits = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    if hits:
        return min(hits), True
    held = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:k]):
                held = k
                break
    return len(text) - held, False

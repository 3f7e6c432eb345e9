"""How surprised a model is by a given text: per-token log-probs, and two models' scores side by side.

    scored = score_text(lm, "The capital of France is", " Paris.")
    [(t.piece, round(t.logprob, 2), t.rank) for t in scored.tokens]   # each token of the text
    other = score_text(gemma, "The capital of France is", " Paris.")
    for span in align_scores(scored, other): ...                     # the same characters, both models

`score_text` reads context + text in ONE forward (teacher forcing: each token of the text sees the
true text before it) and reports every token of the text with its log-probability, its rank among
the model's candidates and its surprise (-log p), and the characters of the text it covers. Its
numbers are teacher forcing's own (hood.teacher_forcing.forced_scores on the engine's rows).

Two tokenizers cut a text differently (SmolLM2 spells 美 in 3 byte tokens, Gemma in 1), so two
models' scores are compared on spans of characters that both tokenizations end on: `align_scores`
cuts the text at every place where a token of each model ends, and sums each model's log-probs
within a span (by the chain rule, the log-probability of those characters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.prompts import Message, encode_conversation, encode_text
from playground.errors import PlaygroundError
from playground.hood.teacher_forcing import forced_scores
from playground.hood.tokens import Token, text_tokens

__all__ = ["AlignedSpan", "ScoredText", "TokenScore", "align_scores", "score_text"]


@dataclass(frozen=True)
class TokenScore:
    """One token of the scored text."""

    id: int
    piece: str  # how it reads ('␣Paris', '美 (byte 1/3)')
    char_span: tuple[int, int]  # [start, end) in the text's characters
    byte_span: tuple[int, int]  # [start, end) in the text's UTF-8 bytes
    logprob: float  # log p(token | context and the text before it), natural log
    rank: int  # 1 = the model's top choice there

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)

    @property
    def surprise(self) -> float:
        """-log p in nats: 0 for a certain token, large for an unexpected one."""
        return -self.logprob


@dataclass(frozen=True)
class ScoredText:
    """A text scored by one model after a context."""

    model: str  # the engine's name
    text: str
    context_ids: list[int]  # the context as that model read it (special tokens included)
    tokens: list[TokenScore]

    @property
    def ids(self) -> list[int]:
        """The text's token ids (after the context)."""
        return [t.id for t in self.tokens]

    @property
    def logprob(self) -> float:
        """log p(text | context): the sum over its tokens."""
        return sum(t.logprob for t in self.tokens)

    @property
    def mean_surprise(self) -> float:
        """Nats per token (the log of the perplexity)."""
        return -self.logprob / len(self.tokens)


def score_text(
    lm: Engine, context: str | Sequence[Message], text: str, control: Control | None = None
) -> ScoredText:
    """Score `text` after `context` with one forward (see the module docstring).

    context: plain text (read with the tokenizer's own start token), or a conversation, read through
    the chat template ready for the assistant's answer (a model without one reads the messages' text).
    The text is tokenized on its own, as a model's answer after that prompt is."""
    if not isinstance(text, str) or not text:
        raise PlaygroundError(
            "The text to score is empty: give at least one character.", key="scoring.error.empty"
        )
    context_ids = _context_ids(lm, context)
    tokens = text_tokens(lm.tokenizer, text)
    if not tokens:
        raise PlaygroundError(
            "The text {text!r} has no tokens for {model}.",
            key="scoring.error.no_tokens",
            text=text,
            model=lm.name,
        )
    ids = [*context_ids, *(t.id for t in tokens)]
    if len(ids) > lm.context_length:
        raise PlaygroundError(
            "Context and text are {tokens:,} tokens for {model}, more than its context of {context:,}: "
            "shorten them.",
            key="scoring.error.too_long",
            tokens=len(ids),
            model=lm.name,
            context=lm.context_length,
        )
    rows = lm.score(ids, len(context_ids), control)  # (len(tokens), vocab): one forward
    logprobs, ranks = forced_scores(rows, [t.id for t in tokens])
    return ScoredText(
        lm.name,
        text,
        context_ids,
        [_scored(t, lp, r) for t, lp, r in zip(tokens, logprobs, ranks, strict=True)],
    )


def _context_ids(lm: Engine, context: str | Sequence[Message]) -> list[int]:
    if isinstance(context, str):
        ids = encode_text(lm.tokenizer, context)
    elif isinstance(context, Sequence) and all(isinstance(m, dict) and "content" in m for m in context):
        ids = encode_conversation(lm.tokenizer, list(context)) if context else []
    else:
        raise PlaygroundError(
            "The context must be text or a list of messages ({{'role': ..., 'content': ...}}).",
            key="scoring.error.context_type",
        )
    if not ids:
        raise PlaygroundError(
            "{model} reads an empty context as no token at all, so the text's first token has nothing "
            "to be predicted from: give a context of at least one character.",
            key="scoring.error.empty_context",
            model=lm.name,
        )
    return ids


def _scored(token: Token, logprob: float, rank: int) -> TokenScore:
    return TokenScore(token.id, token.piece, token.char_span, token.byte_span, logprob, rank)


# --- two models on one text ------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignedSpan:
    """Characters of the text on which both models' tokens start and end."""

    char_span: tuple[int, int]  # [start, end) in the text's characters
    text: str
    a_tokens: tuple[int, ...]  # indices into a.tokens that cover it
    b_tokens: tuple[int, ...]  # indices into b.tokens
    a_logprob: float  # log p of these characters under model a (its tokens' sum)
    b_logprob: float

    @property
    def difference(self) -> float:
        """How much more likely model a finds these characters than model b (nats)."""
        return self.a_logprob - self.b_logprob


def align_scores(a: ScoredText, b: ScoredText) -> list[AlignedSpan]:
    """Cut the text where a token of each model ends (and on a whole character), and give each span
    both models' log-probs. Raises PlaygroundError when the two scored different texts, or when a
    tokenization does not cover its text end to end (then no span can be cut)."""
    if a.text != b.text:
        raise PlaygroundError(
            "Cannot align the scores: {a} scored {a_text!r} and {b} scored {b_text!r}.",
            key="scoring.error.other_texts",
            a=a.model,
            a_text=a.text[:40],
            b=b.model,
            b_text=b.text[:40],
        )
    text = a.text
    char_at = _char_boundaries(text)
    a_ends, b_ends = _token_ends(a, char_at), _token_ends(b, char_at)
    cuts = [0, *sorted(set(a_ends) & set(b_ends) & set(char_at))]  # ends of both, on whole characters
    spans = []
    for start, end in pairwise(cuts):
        a_in = _covering(a_ends, start, end)
        b_in = _covering(b_ends, start, end)
        spans.append(
            AlignedSpan(
                (char_at[start], char_at[end]),
                text[char_at[start] : char_at[end]],
                a_in,
                b_in,
                sum(a.tokens[i].logprob for i in a_in),
                sum(b.tokens[i].logprob for i in b_in),
            )
        )
    return spans


def _char_boundaries(text: str) -> dict[int, int]:
    """Byte offset -> character index, for every character boundary of the text."""
    out, at = {0: 0}, 0
    for index, char in enumerate(text, start=1):
        at += len(char.encode())
        out[at] = index
    return out


def _token_ends(scored: ScoredText, char_at: dict[int, int]) -> list[int]:
    """Each token's end in bytes, after checking that the tokens cover the text end to end."""
    at = 0
    for token in scored.tokens:
        start, end = token.byte_span
        if start != at or end < start:
            raise PlaygroundError(
                "Cannot align the scores: {model}'s tokens do not cover the text end to end (a token at "
                "bytes {start}–{end}, expected one from byte {at}); its tokenizer changes the text "
                "(normalizes it), so its tokens have no exact place in it.",
                key="scoring.error.gap",
                model=scored.model,
                start=start,
                end=end,
                at=at,
            )
        at = end
    if at != max(char_at):
        raise PlaygroundError(
            "Cannot align the scores: {model}'s tokens cover {at} of the text's {size} bytes.",
            key="scoring.error.short",
            model=scored.model,
            at=at,
            size=max(char_at),
        )
    return [t.byte_span[1] for t in scored.tokens]


def _covering(ends: list[int], start: int, end: int) -> tuple[int, ...]:
    """The tokens (by index) whose bytes lie in [start, end): they end after start, at end at most."""
    return tuple(i for i, e in enumerate(ends) if start < e <= end)

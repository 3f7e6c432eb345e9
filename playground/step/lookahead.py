"""What a candidate that starts a character can still become: the characters its next tokens end.

A byte-level tokenizer writes a character it has no token for as its UTF-8 bytes, one token each or
a few together: `<0xE7>` alone is only "the first byte of a 3-byte character". Which characters?
The model says so a forward or two later: after the path and `<0xE7>`, the tokens that go on with the
character, and after each of those the tokens that end it. `characters_started` follows the likeliest
of those continuations through the session's own engine sequence (`StepSession.scores_after`: a
look ahead, nothing is appended) and returns the characters they end in, each with its probability
given the candidate: P(the character's other tokens | path, candidate), by the chain rule.

    guesses = characters_started(session, 231)   # <0xE7> after "今天天气很好，"
    guesses[0].char, guesses[0].prob             # ('的', 0.31): 31 % of what <0xE7> goes on to
"""

from __future__ import annotations

import heapq
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from playground.engine.records import raw_logprobs
from playground.engine.tokens import CONTEXT_TOKENS, ByteSlice, char_view, read_after, token_piece
from playground.errors import PlaygroundError
from playground.step.session import StepSession

WIDTH = 3  # characters kept per candidate, and open continuations followed from each forward
TOP = 64  # continuations read per forward (a character's next byte takes one of 64 values)
PER_CANDIDATE = 3  # forwards one candidate may take
KEPT = 256  # looked-up candidates remembered per session (path and token)


@dataclass(frozen=True)
class CharacterGuess:
    """A character a candidate starts, and how likely the model ends it so, given the candidate."""

    char: str
    prob: float


@dataclass
class Budget:
    """Forwards a snapshot may still spend on looking ahead (its candidates together)."""

    forwards: int
    spent: int = field(default=0)

    def take(self) -> bool:
        if self.spent >= self.forwards:
            return False
        self.spent += 1
        return True


def starts_character(session: StepSession, token_id: int) -> bool:
    """The token, read after the path, leaves a character open (its last bytes are to come)."""
    context = [token_piece(session.engine.tokenizer, i) for i in session.ids[-CONTEXT_TOKENS:]]
    return read_after(context, [token_piece(session.engine.tokenizer, token_id)])[0].continues


def characters_started(
    session: StepSession, token_id: int, budget: Budget | None = None
) -> tuple[CharacterGuess, ...]:
    """The likeliest characters the candidate token_id goes on to end (see the module doc); () when
    it starts none, or when no forward was left in the budget. Remembered per path and token."""
    ids = session.ids
    key = (len(ids), hash(tuple(ids)), int(token_id))  # the path and the token (not a copy of the path)
    remembered = _remembered(session)
    with _lock:
        if key in remembered:
            remembered.move_to_end(key)
            return remembered[key]
    if not starts_character(session, token_id):
        return ()
    budget = budget or Budget(PER_CANDIDATE)
    spent = budget.spent
    guesses = _follow(session, int(token_id), budget)
    if budget.spent > spent:  # looked up (a candidate the budget left out is looked up next time)
        with _lock:
            remembered[key] = guesses
            while len(remembered) > KEPT:
                remembered.popitem(last=False)
    return guesses


def _follow(session: StepSession, token_id: int, budget: Budget) -> tuple[CharacterGuess, ...]:
    """Best first over the continuations that keep the character open, at most PER_CANDIDATE forwards."""
    ended: dict[str, float] = {}
    # (-P given the candidate, the tokens after the path): the likeliest open one is followed first
    open_paths: list[tuple[float, tuple[int, ...]]] = [(-1.0, (token_id,))]
    forwards = 0
    while open_paths and forwards < PER_CANDIDATE and budget.take():
        neg_prob, tokens = heapq.heappop(open_paths)
        forwards += 1
        try:
            logprobs = raw_logprobs(session.scores_after(tokens), session.engine.capabilities.full_vocab)
        except PlaygroundError:  # no room left in the context: what was found so far
            break
        went_on = _continuations(session, tokens, logprobs, -neg_prob, ended)
        for prob, longer in went_on[:WIDTH]:
            heapq.heappush(open_paths, (-prob, longer))
    best = sorted(ended.items(), key=lambda item: -item[1])[:WIDTH]
    return tuple(CharacterGuess(char, prob) for char, prob in best)


def _continuations(
    session: StepSession,
    tokens: Sequence[int],
    logprobs: torch.Tensor,
    prob: float,
    ended: dict[str, float],
) -> list[tuple[float, tuple[int, ...]]]:
    """Read the likeliest next tokens after path + tokens: one that ends the character adds its
    probability to `ended`; the ones that go on with it are returned, likeliest first."""
    tokenizer = session.engine.tokenizer
    context = [token_piece(tokenizer, i) for i in [*session.ids, *tokens][-CONTEXT_TOKENS:]]
    known = int(torch.isfinite(logprobs).sum())
    top = torch.topk(logprobs, min(TOP, known))
    went_on = []
    for next_id, logprob in zip(top.indices.tolist(), top.values.tolist(), strict=True):
        first = read_after(context, [token_piece(tokenizer, next_id)])[0].parts[0]
        if not isinstance(first, ByteSlice) or not first.valid or first.first == 1:
            continue  # not the character's next bytes: it would stay unfinished
        joint = prob * math.exp(logprob)
        if first.char is not None:
            char = char_view(first.char)
            ended[char] = ended.get(char, 0.0) + joint
        else:
            went_on.append((joint, (*tokens, next_id)))
    return went_on


_lock = threading.Lock()
_by_session: weakref.WeakKeyDictionary[StepSession, OrderedDict] = weakref.WeakKeyDictionary()


def _remembered(session: StepSession) -> OrderedDict:
    with _lock:
        return _by_session.setdefault(session, OrderedDict())

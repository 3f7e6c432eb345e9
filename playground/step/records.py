"""What a step-by-step session shows: candidates, ledger entries, probabilities, branches."""

from __future__ import annotations

import math
from dataclasses import dataclass

from playground.engine.records import TokenRecord
from playground.engine.tokens import TokenPiece


@dataclass(frozen=True)
class Candidate:
    """One of the most likely next tokens."""

    rank: int  # 1-based rank under the raw distribution
    token_id: int
    piece: TokenPiece  # .text as decoded, .visible with whitespace/bytes/specials shown
    prob: float  # raw model probability
    logprob: float
    sampled_prob: float  # probability after every sampling stage (0 when removed)

    @property
    def kept(self) -> bool:
        return self.sampled_prob > 0


@dataclass(frozen=True)
class LedgerEntry:
    """One generated step on the current path (the chain rule, one factor at a time)."""

    step: int  # 1-based
    node_id: int
    token: TokenRecord  # id, piece, probability, log-prob, rank, entropy, how it was chosen
    cum_logprob: float  # sum of logprob up to this step = log P(tokens so far | prompt)
    perplexity: float  # exp(-cum_logprob / step)

    @property
    def token_id(self) -> int:
        return self.token.id

    @property
    def logprob(self) -> float:
        return self.token.logprob

    @property
    def prob(self) -> float:
        return self.token.prob


@dataclass(frozen=True)
class TextProbability:
    """How likely the model finds a text as the continuation, token by token (chain rule).
    The first token's record carries its probability after sampling."""

    text: str
    tokens: list[TokenRecord]

    @property
    def logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)


@dataclass(frozen=True)
class Branch:
    """A leaf of the tree: one continuation the user can return to."""

    node_id: int
    length: int  # generated tokens from the prompt to this leaf
    text: str  # the continuation, decoded
    current: bool  # the tip lies on this branch

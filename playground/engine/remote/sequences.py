"""What a RemoteEngine remembers per sequence key: the ids and the distributions already fetched,
so an undo, a branch switch or a fork costs no request (see remote/engine.py)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.engine.base import DecodePlan
from playground.engine.records import TokenRecord, describe_top
from playground.engine.remote.adapter import Position, StreamToken


@dataclass
class Row:
    """A remembered distribution, compact: top ids and log-probs as tensors, other known tokens."""

    ids: torch.Tensor  # (n,) int64
    logprobs: torch.Tensor  # (n,) float32
    extra: dict[int, float] = field(default_factory=dict)

    @classmethod
    def of(cls, position: Position) -> Row:
        return cls(
            torch.tensor(position.top_ids, dtype=torch.long),
            torch.tensor(position.top_logprobs, dtype=torch.float32),
            dict(position.extra),
        )

    @property
    def n(self) -> int:
        return int(self.ids.numel())

    @property
    def nbytes(self) -> int:
        return 12 * self.n + 64 * len(self.extra) + 200

    def tensor(self, vocab: int, given: int | None = None) -> torch.Tensor:
        """(vocab,) float32: the top-N log-probs at their ids, the given token's own, -inf elsewhere."""
        out = torch.full((vocab,), float("-inf"), dtype=torch.float32)
        out[self.ids] = self.logprobs
        if given is not None and given in self.extra:
            out[given] = self.extra[given]
        return out

    def knows(self, token_id: int) -> bool:
        return token_id in self.extra or bool((self.ids == token_id).any())


@dataclass
class RemoteSequence:
    """One key's ids and the distributions known after its prefixes."""

    ids: list[int] = field(default_factory=list)
    rows: dict[int, Row] = field(default_factory=dict)  # length m -> distribution after ids[:m]
    # Rows of paths left (an undo, another branch), by their prefix: going back costs no request.
    parked: OrderedDict[tuple[int, ...], Row] = field(default_factory=OrderedDict)

    @property
    def nbytes(self) -> int:
        return sum(row.nbytes for row in self.rows.values()) + sum(row.nbytes for row in self.parked.values())

    def unpark(self, m: int) -> Row | None:
        """The remembered row after ids[:m] (moved back from the parked ones when it is there)."""
        if m not in self.rows and self.parked:
            row = self.parked.pop(tuple(self.ids[:m]), None)
            if row is not None:
                self.rows[m] = row
        return self.rows.get(m)


@dataclass
class RemoteBeams:
    """The beams' token ids (the server's prefix cache holds their KV)."""

    sequences: list[list[int]]
    k: int  # candidates asked for per beam and step


def describe_streamed(
    tokenizer: Any, vocab: int, token: StreamToken, plan: DecodePlan, source: str
) -> TokenRecord:
    """A server-sampled token's record from its top-N alone (no vocabulary-wide tensors per token).
    After sampling: 1 for plain greedy (the server took the raw argmax), else not known here."""
    p, settings = token.position, plan.settings
    plain_greedy = settings.greedy and settings.repetition_penalty == 1 and p.top_ids[:1] == [token.id]
    return describe_top(
        tokenizer,
        p.top_ids,
        p.top_logprobs,
        token.id,
        p.logprob(token.id),
        sampled_prob=1.0 if plain_greedy else None,
        top=plan.top,
        source=source,
        rank_limit=None if p.n >= vocab else p.n,
    )

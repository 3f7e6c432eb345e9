"""The logit lens: what the model would say next if it stopped after each layer.

    probs = logit_lens(engine, ids)     # (layers, vocab): row i = softmax(head(norm(h_i)))
    probs[-1]                           # the model's own next-token distribution

Row i applies the model's final norm and LM head to the hidden state after decoder layer
i + 1 (at the last position). The last row is the model's own output: transformers returns
the last hidden state already normed, so it is never normed twice (engine/probes.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from playground.engine.base import Engine
from playground.engine.control import Control
from playground.engine.tokens import check_token_id, token_texts
from playground.errors import PlaygroundError
from playground.hood.common import Lesson, require
from playground.messages import Message

TOP = 5  # tokens listed per layer


def logit_lens(lm: Engine, ids: Sequence[int], control: Control | None = None) -> torch.Tensor:
    """Next-token probabilities (layers, vocab) float32 after each decoder layer (see the module doc)."""
    probes = require(lm, "hidden_states")
    if not list(ids):
        raise PlaygroundError("The prefix is empty: type some text first.", key="hood.lens.error.empty")
    return torch.softmax(probes.layer_logits(list(ids), control), dim=-1).cpu()


@dataclass(frozen=True)
class Track:
    """One token's probability and rank (1 = top) after every layer."""

    id: int
    visible: str
    probs: list[float]
    ranks: list[int]


@dataclass
class LensView:
    """What the view draws for one prefix."""

    ids: list[int]
    probs: torch.Tensor  # (layers, vocab)
    chosen: Track  # the model's own top token (after the last layer)
    top: list[list[tuple[int, str, float]]]  # per layer: the TOP most likely (id, piece, prob)
    candidates: list[Track] = field(default_factory=list)  # tokens the user asked about

    @property
    def settles_at(self) -> int:
        """The first layer (1-based) from which the chosen token stays the top token to the end."""
        layer = len(self.chosen.ranks)
        while layer > 1 and self.chosen.ranks[layer - 2] == 1:
            layer -= 1
        return layer


def track(lm: Engine, probs: torch.Tensor, token_id: int) -> Track:
    """Probability and rank of token_id after each layer (ties share the better rank)."""
    check_token_id(token_id, probs.shape[-1])
    column = probs[:, token_id : token_id + 1]  # (layers, 1)
    ranks = ((probs > column).sum(dim=-1) + 1).tolist()
    return Track(token_id, _candidate(lm, token_id), column[:, 0].tolist(), ranks)


def run(
    lm: Engine, ids: Sequence[int], candidates: Sequence[int] = (), control: Control | None = None
) -> LensView:
    """logit_lens with the chosen token's track, each layer's top tokens and the candidates' tracks."""
    probs = logit_lens(lm, ids, control)
    chosen = track(lm, probs, int(probs[-1].argmax()))
    best = torch.topk(probs, min(TOP, probs.shape[-1]), dim=-1)
    top = [
        [(int(i), _candidate(lm, int(i)), float(p)) for i, p in zip(row_ids, row_probs, strict=True)]
        for row_ids, row_probs in zip(best.indices.tolist(), best.values.tolist(), strict=True)
    ]
    tracks = [track(lm, probs, int(c)) for c in dict.fromkeys(candidates) if int(c) != chosen.id]
    return LensView(list(ids), probs, chosen, top, tracks)


def iter_run(
    lm: Engine, ids: Sequence[int], candidates: Sequence[int] = (), control: Control | None = None
) -> Iterator[LensView]:
    """run as a lesson run: the prefix read in cached chunks, then the lens."""
    yield (view := run(lm, ids, candidates, control))
    return view


LESSON = Lesson("lens", Message("hood.lens.title", "Logit lens"), ("hidden_states",), iter_run)


def _candidate(lm: Engine, token_id: int) -> str:
    """A next-token candidate as a label (a byte piece says so: '<0xE7> (byte 1/3)')."""
    return token_texts(lm.tokenizer, [token_id])[0].visible

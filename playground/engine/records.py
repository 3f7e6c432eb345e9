"""The one per-token record every feature keeps: chat answers, step paths and beam nodes.

`describe_rows` computes every number of a record on the device and copies them to the
host in one transfer (the chosen token's log-prob, rank, entropy, probability after
sampling, and the top alternatives), so a GPU decode step pays for one copy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from playground.engine.tokens import token_piece

TOP_ALTERNATIVES = 5
# How a token came to be in the text.
SOURCES = ("greedy", "sample", "pick", "force", "given", "beam")


@dataclass(frozen=True)
class Alternative:
    """One of the most likely tokens at a position (raw distribution)."""

    id: int
    visible: str
    prob: float


@dataclass
class TokenRecord:
    """One token and the model's distribution at its position."""

    id: int
    text: str  # exactly what the token adds when decoded on its own
    visible: str  # the same with whitespace (␣ ↵), partial bytes (<0xNN>) and specials made visible
    special: bool
    logprob: float  # raw log-softmax (temperature 1): the model's own; NaN when the engine did not say
    sampled_prob: (
        float | None
    )  # probability under the processed distribution it was drawn from; None if not drawn
    rank: int | None  # 1 = the model's most likely token; None when outside what the engine returned
    entropy: float | None  # nats, of the raw distribution (of the returned top-N on a partial engine)
    top: list[Alternative] = field(default_factory=list)  # best raw alternatives, best first
    seconds: float = 0.0  # model time spent producing this token (its forward pass and choice)
    source: str = "sample"  # one of SOURCES: how it was chosen

    @property
    def prob(self) -> float:
        """The model's probability of this token (exp of logprob; NaN when unknown)."""
        return math.exp(self.logprob) if not math.isnan(self.logprob) else math.nan

    @property
    def given(self) -> bool:
        """True when the token was supplied (picked, forced or an answer prefix), not generated."""
        return self.source in ("pick", "force", "given")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["top"] = [asdict(alt) for alt in self.top]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenRecord:
        values = dict(data)
        values["top"] = [Alternative(**alt) for alt in values.get("top", [])]
        return cls(**values)


def raw_logprobs(rows: torch.Tensor, complete: bool) -> torch.Tensor:
    """Log-probabilities from an engine's rows: log-softmax of full-vocabulary logits, or the
    rows as they are when the engine returned log-probs of its top-N only (-inf elsewhere)."""
    rows = rows.float()
    return torch.log_softmax(rows, dim=-1) if complete else rows


def describe_rows(
    tokenizer: Any,
    rows: torch.Tensor,
    token_ids: Sequence[int] | torch.Tensor,
    *,
    processed: torch.Tensor | None = None,
    complete: bool = True,
    top: int = TOP_ALTERNATIVES,
    source: str = "sample",
    seconds: Sequence[float] | None = None,
    rank_limit: int | None = None,
) -> list[TokenRecord]:
    """Records for token_ids[i] chosen after rows[i] (n, vocab) raw scores; processed (n, vocab)
    are the scores after the sampling chain they were drawn from (None: not drawn). token_ids
    may be a device tensor (a token just chosen on the GPU): it is read back in the same copy.
    rank_limit: rows hold the engine's top `rank_limit` (plus the chosen token's own log-prob), so
    a rank beyond it is unknown (None)."""
    n = len(token_ids)
    if n == 0:
        return []
    packed = _pack(rows[:n], token_ids, processed, complete, top).tolist()  # one host copy
    times = list(seconds) if seconds is not None else [0.0] * n
    return [
        _record(tokenizer, row, top, processed is not None, source, s, rank_limit)
        for row, s in zip(packed, times, strict=True)
    ]


def describe_top(
    tokenizer: Any,
    top_ids: Sequence[int],
    top_logprobs: Sequence[float],
    token_id: int,
    logprob: float,
    *,
    sampled_prob: float | None = None,
    top: int = TOP_ALTERNATIVES,
    source: str = "sample",
    rank_limit: int | None = None,
) -> TokenRecord:
    """describe_rows for one token when only an engine's top-N is known (best first) plus the
    token's own log-prob: the same record, computed on the N values instead of a vocabulary-wide
    row (a streamed token costs microseconds, not a pass over the vocabulary)."""
    finite = [lp for lp in top_logprobs if math.isfinite(lp)]
    if token_id not in top_ids and math.isfinite(logprob):
        finite.append(logprob)
    entropy = -sum(math.exp(lp) * lp for lp in finite)
    rank = 1 + sum(lp > logprob for lp in top_logprobs)
    row = [token_id, logprob, rank, entropy, sampled_prob, *top_ids[:top], *top_logprobs[:top]]
    return _record(tokenizer, row, top, sampled_prob is not None, source, 0.0, rank_limit)


def _pack(
    rows: torch.Tensor,
    token_ids: Sequence[int] | torch.Tensor,
    processed: torch.Tensor | None,
    complete: bool,
    top: int,
) -> torch.Tensor:
    """(n, 5 + 2 * top) float64 on the device: token id, logprob, rank, entropy, sampled prob,
    top ids, top logprobs."""
    logprobs = raw_logprobs(rows, complete)  # (n, vocab)
    if isinstance(token_ids, torch.Tensor):
        index = token_ids.reshape(-1, 1).to(device=rows.device, dtype=torch.long)  # (n, 1)
    else:
        index = torch.as_tensor(list(token_ids), dtype=torch.long, device=rows.device).unsqueeze(1)
    chosen = logprobs.gather(1, index)  # (n, 1)
    rank = (logprobs > chosen).sum(dim=1, keepdim=True) + 1
    entropy = -(logprobs.exp() * logprobs).nansum(dim=1, keepdim=True)
    if processed is None:
        sampled = torch.full_like(chosen, math.nan)
    else:
        sampled = torch.softmax(processed.float(), dim=-1).gather(1, index)
    best = torch.topk(logprobs, min(top, logprobs.shape[-1]), dim=-1)
    parts = [index, chosen, rank, entropy, sampled, best.indices, best.values]
    return torch.cat([p.to(torch.float64) for p in parts], dim=1)


def _record(
    tokenizer: Any,
    row: list[float],
    top: int,
    drawn: bool,
    source: str,
    seconds: float,
    rank_limit: int | None = None,
) -> TokenRecord:
    token_id, logprob, rank, entropy, sampled = int(row[0]), *row[1:5]
    k = (len(row) - 5) // 2
    known = math.isfinite(logprob)
    rank_known = known and (rank_limit is None or rank <= rank_limit)
    alternatives = [
        Alternative(int(i), token_piece(tokenizer, int(i)).visible, math.exp(lp))
        for i, lp in zip(row[5 : 5 + k], row[5 + k :], strict=True)
        if math.isfinite(lp)
    ]
    piece = token_piece(tokenizer, token_id)
    return TokenRecord(
        id=token_id,
        text=piece.text,
        visible=piece.visible,
        special=piece.special,
        logprob=logprob if known else math.nan,
        sampled_prob=sampled if drawn else None,
        rank=int(rank) if rank_known else None,
        entropy=entropy,
        top=alternatives[:top],
        seconds=seconds,
        source=source,
    )

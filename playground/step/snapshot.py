"""Everything the Step-by-step tab shows about a session, as plain data.

A `StepSnapshot` is taken from a live session (`take_snapshot`) and drawn by the UI; the same
data saved in a trace is drawn again with no model loaded (`python app.py --replay`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from playground.engine.records import TokenRecord
from playground.engine.tokens import decode_ids, stream_pieces
from playground.step.records import Branch
from playground.step.session import StepSession
from playground.tree import ROOT

CANDIDATES_KEPT = 40  # the most the chart shows


@dataclass(frozen=True)
class CandidateView:
    """One of the most likely next tokens and its probability after every stage."""

    rank: int
    token_id: int
    visible: str
    prob: float  # raw
    logprob: float
    stage_probs: dict[str, float]  # stage name -> probability after that stage (0 when removed)

    @property
    def sampled_prob(self) -> float:
        """After the last stage (what 'sample' draws from)."""
        return list(self.stage_probs.values())[-1]


@dataclass
class StepSnapshot:
    prompt: str
    chat: bool
    prompt_text: str  # the prompt's ids decoded (chat template included)
    prompt_tokens: int
    context_limit: int
    records: list[TokenRecord]  # the tokens on the current path
    pieces: list[str]  # the text each of them adds to the decoded sequence
    candidates: list[CandidateView]  # the next token's most likely candidates, best first
    stages: list[str]  # stage names, "raw" first
    tree: list[tuple[int, int, str]]  # (node, parent, visible token) for every generated node
    path: list[int]  # node ids from the root to the tip
    branches: list[Branch]
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what the engine says about its numbers

    @property
    def cum_logprobs(self) -> list[float]:
        """Running sums of the path's log-probs (the chain rule)."""
        total, sums = 0.0, []
        for record in self.records:
            total += record.logprob
            sums.append(total)
        return sums

    def perplexity(self, step: int) -> float:
        return math.exp(-self.cum_logprobs[step - 1] / step)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["records"] = [record.to_dict() for record in self.records]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepSnapshot:
        values = dict(data)
        values["records"] = [TokenRecord.from_dict(r) for r in data["records"]]
        values["candidates"] = [CandidateView(**c) for c in data["candidates"]]
        values["branches"] = [Branch(**b) for b in data["branches"]]
        values["tree"] = [tuple(node) for node in data["tree"]]
        return cls(**values)


def take_snapshot(session: StepSession, candidates: int = CANDIDATES_KEPT) -> StepSnapshot:
    """The session as the tab shows it: path, pieces, top candidates after every stage, tree."""
    engine = session.engine
    with session.locked():
        stages = session.stages()
        top = session.candidates(max(1, min(candidates, CANDIDATES_KEPT)))
        views = [
            CandidateView(c.rank, c.token_id, c.piece.visible, c.prob, c.logprob,
                          {s.name: float(s.probs[c.token_id]) for s in stages})
            for c in top
        ]  # fmt: skip
        nodes = session.tree.nodes
        return StepSnapshot(
            prompt=session.prompt,
            chat=session.chat,
            prompt_text=decode_ids(engine.tokenizer, session.prompt_ids),
            prompt_tokens=len(session.prompt_ids),
            context_limit=engine.context_length,
            records=session.records,
            pieces=stream_pieces(engine.tokenizer, session.ids, len(session.prompt_ids)),
            candidates=views,
            stages=[s.name for s in stages],
            tree=[(n.id, n.parent, n.token.visible) for n in nodes if n.id != ROOT],  # type: ignore[misc, union-attr]
            path=list(session.path),
            branches=session.branches(),
            settings=session.settings.to_dict(),
            notes=list(getattr(engine.capabilities, "notes", {}).values()),
        )

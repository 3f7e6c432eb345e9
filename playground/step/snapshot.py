"""Everything the Step-by-step tab shows about a session, as plain data.

A `StepSnapshot` is taken from a live session (`take_snapshot`) and drawn by the UI; the same
data saved in a trace is drawn again with no model loaded (`python app.py --replay`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from playground.engine.records import TokenRecord
from playground.engine.sampling import Stage
from playground.engine.tokens import (
    CONTEXT_TOKENS,
    cut_off_shown,
    decode_ids,
    read_next,
    stream_pieces,
    token_piece,
)
from playground.step.lookahead import Budget, characters_started
from playground.step.records import Branch, Candidate
from playground.step.session import StepSession
from playground.tree import ROOT

CANDIDATES_KEPT = 40  # the most the chart shows
LOOK_AHEAD = 10  # top candidates that say what a character they start may become (the tab's buttons)
LOOK_AHEAD_FORWARDS = 9  # forwards one snapshot may spend on that (a step of Chinese text: ~3 candidates)


@dataclass(frozen=True)
class CandidateView:
    """One of the most likely next tokens and its probability after every stage."""

    rank: int
    token_id: int
    visible: str  # as it reads after the path: a byte piece '美 (byte 3/3)', '<0xE7> (byte 1/3)'
    prob: float  # raw
    logprob: float
    stage_probs: dict[str, float]  # stage name -> probability after that stage (0 when removed)
    detail: str = ""  # a byte piece's bytes and what they are: '<0xE7> · first byte of a 3-byte character'
    # A token that leaves a character open: the likeliest characters it goes on to end, each with its
    # probability given this token (step/lookahead.py); empty for any other token, or when not looked up.
    becomes: list[tuple[str, float]] = field(default_factory=list)

    @property
    def shown(self) -> str:
        """The candidate on its button: a byte piece says which byte of what it is."""
        return self.detail or self.visible

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


def take_snapshot(
    session: StepSession, candidates: int = CANDIDATES_KEPT, look_ahead: int = LOOK_AHEAD
) -> StepSnapshot:
    """The session as the tab shows it: path, pieces, top candidates after every stage, tree;
    look_ahead: how many of the top candidates that start a character say what it may become."""
    engine = session.engine
    with session.locked():
        stages = session.stages()
        top = session.candidates(max(1, min(candidates, CANDIDATES_KEPT)))
        views = _candidate_views(session, stages, top, look_ahead)
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
            branches=[replace(b, text=cut_off_shown(b.text)) for b in session.branches()],  # no U+FFFD
            settings=session.settings.to_dict(),
            notes=list(getattr(engine.capabilities, "notes", {}).values()),
        )


def _candidate_views(
    session: StepSession, stages: list[Stage], top: list[Candidate], look_ahead: int
) -> list[CandidateView]:
    """Each candidate as it reads after the path (a character's first bytes may be there), its
    probability after every stage, and for the first look_ahead what a started character may become."""
    path = [token_piece(session.engine.tokenizer, i) for i in session.ids[-CONTEXT_TOKENS:]]
    budget = Budget(LOOK_AHEAD_FORWARDS)
    views = []
    for i, c in enumerate(top):
        read = read_next(path, c.piece)
        guesses = characters_started(session, c.token_id, budget) if i < look_ahead and read.continues else ()
        views.append(
            CandidateView(
                c.rank,
                c.token_id,
                read.visible,
                c.prob,
                c.logprob,
                {s.name: float(s.probs[c.token_id]) for s in stages},
                read.describe() and read.candidate,
                [(g.char, g.prob) for g in guesses],
            )
        )
    return views

"""From the beam search's recorded choices to the tree's nodes (see beam/search.py).

Each step of the search copies a few small index tensors to the host (`StepRecord`); `TreeBuilder`
names what they chose as BeamNodes: candidates, kept beams, finished hypotheses. It recomputes no
score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from playground.beam.tree import FINISHED, KEPT, PRUNED, BeamNode, BeamSettings, Hypothesis
from playground.engine.records import TokenRecord
from playground.engine.tokens import decode_ids, token_piece
from playground.messages import Message
from playground.tree import ROOT as ROOT_ID
from playground.tree import GenerationTree

# Why a candidate is not a running beam (BeamNode.note)
OUTRANKED = Message("beam.note.outranked", "outranked")
ENDED_NOT_BEST = Message("beam.note.ended_not_best", "ended, not among the best")
FINISHED_OUTRANKED = Message("beam.note.finished_outranked", "finished, later outranked")


@dataclass
class StepRecord:
    """What one search step chose, on the host. N = num_beams, K = contenders, C = candidates."""

    src_beam: list[int]  # (K,) running beam each contender extends
    token: list[int]  # (K,)
    cum: list[float]  # (K,) accumulated log-prob
    logprob: list[float]  # (K,) after the processors
    raw: list[float]  # (K,) raw log-prob (temperature 1)
    raw_rank: list[int]  # (K,) rank in its beam's raw distribution
    hits: list[bool]  # (K,) the token ends the text (EOS or length limit)
    next_running: list[int]  # (N,) contender index of each running beam for the next step
    merged: list[int]  # (N,) index into [finished slots (N) ; contenders (K)] kept as finished
    merged_finished: list[bool]  # (N,) the slot holds a finished hypothesis (not a -1e9 filler)
    entropy: list[float]  # (N,) entropy of each running beam's raw distribution
    cand_token: list[list[int]]  # (N, C) best tokens of every running beam
    cand_cum: list[list[float]]  # (N, C)
    cand_logprob: list[list[float]]  # (N, C)
    cand_raw: list[list[float]]  # (N, C)
    cand_rank: list[list[int]]  # (N, C)
    seconds: float  # the forward that produced this step's scores


class TreeBuilder:
    """Turns each step's recorded index choices into BeamNodes (no scoring is recomputed)."""

    def __init__(self, tokenizer: Any, settings: BeamSettings, prompt_ids: list[int]):
        self.tokenizer, self.settings = tokenizer, settings
        self.tree: GenerationTree[BeamNode] = GenerationTree(prompt_ids, BeamNode)
        n = settings.num_beams
        self.running: list[int | None] = [ROOT_ID] + [None] * (n - 1)  # node of each running beam slot
        self.finished: list[int | None] = [None] * n  # node of each finished slot

    @property
    def nodes(self) -> list[BeamNode]:
        return self.tree.nodes

    def _new_node(
        self,
        step: int,
        parent: int,
        token: int,
        facts: tuple[float, float, float, int, float],
        seconds: float,
    ) -> int:
        logprob, cum, raw, rank, entropy = facts
        piece = token_piece(self.tokenizer, token)
        record = TokenRecord(
            token,
            piece.text,
            piece.visible,
            piece.special,
            raw,
            math.exp(logprob),
            rank,
            entropy,
            seconds=seconds,
            source="beam",
        )
        score = cum / (step**self.settings.length_penalty)
        return self.tree.add(
            parent,
            record,
            reuse=False,
            step=step,
            logprob=logprob,
            cum_logprob=cum,
            score=score,
            fate=PRUNED,
            note=OUTRANKED,
        )

    def add_step(self, step: int, rec: StepRecord) -> None:
        contenders: dict[tuple[int, int], int] = {}
        ids: list[int | None] = []
        for k, (beam, token) in enumerate(zip(rec.src_beam, rec.token, strict=True)):
            parent = self.running[beam]
            facts = (rec.logprob[k], rec.cum[k], rec.raw[k], rec.raw_rank[k], rec.entropy[beam])
            node_id = None if parent is None else self._new_node(step, parent, token, facts, rec.seconds)
            if node_id is not None:
                self.nodes[node_id].ended = rec.hits[k]
                contenders[(beam, token)] = node_id
            ids.append(node_id)
        self._add_candidates(step, rec, contenders)
        self._mark_kept(rec, ids)
        self._mark_finished(rec, ids)

    def _add_candidates(self, step: int, rec: StepRecord, seen: dict[tuple[int, int], int]) -> None:
        """The per-beam best tokens that were not contenders: pruned outright."""
        for beam, parent in enumerate(self.running):
            if parent is None:
                continue
            for c, token in enumerate(rec.cand_token[beam]):
                if (beam, token) not in seen:
                    facts = (
                        rec.cand_logprob[beam][c],
                        rec.cand_cum[beam][c],
                        rec.cand_raw[beam][c],
                        rec.cand_rank[beam][c],
                        rec.entropy[beam],
                    )
                    seen[(beam, token)] = self._new_node(step, parent, token, facts, rec.seconds)

    def _mark_kept(self, rec: StepRecord, ids: list[int | None]) -> None:
        running: list[int | None] = []
        for k in rec.next_running:
            node_id = ids[k] if not rec.hits[k] else None
            if node_id is not None:
                self.nodes[node_id].fate, self.nodes[node_id].note = KEPT, ""
            running.append(node_id)
        self.running = running
        for k, node_id in enumerate(ids):
            if node_id is not None and rec.hits[k] and self.nodes[node_id].fate == PRUNED:
                self.nodes[node_id].note = ENDED_NOT_BEST

    def _mark_finished(self, rec: StepRecord, ids: list[int | None]) -> None:
        merged_ids = self.finished + ids
        # A slot whose flag is off holds a -1e9 filler (generate keeps one there), not a hypothesis.
        new_finished = [
            merged_ids[m] if done else None for m, done in zip(rec.merged, rec.merged_finished, strict=True)
        ]
        for node_id in new_finished:
            if node_id is not None and self.nodes[node_id].fate == PRUNED:
                self.nodes[node_id].fate, self.nodes[node_id].note = FINISHED, ""
        for node_id in set(self.finished) - set(new_finished) - {None}:
            self.nodes[node_id].note = FINISHED_OUTRANKED
        self.finished = new_finished

    def hypotheses(self, scores: list[float]) -> list[Hypothesis]:
        """The returned hypotheses, best first, with their ranks set on the nodes."""
        if any(node_id is None for node_id in self.finished[: len(scores)]):
            raise RuntimeError("beam search returned an empty hypothesis slot")  # cannot happen
        return self._ranked([n for n in self.finished if n is not None], scores)

    def best_so_far(self, count: int) -> list[Hypothesis]:
        """A search stopped part way: its best `count` beams, finished or still running, by score
        (cum log-prob / length^penalty), with their ranks set on the nodes."""
        beams = {n for n in [*self.finished, *self.running] if n is not None}
        best = sorted(beams, key=lambda n: -self.nodes[n].score)[:count]
        return self._ranked(best, [self.nodes[n].score for n in best])

    def _ranked(self, node_ids: list[int], scores: list[float]) -> list[Hypothesis]:
        result = []
        for rank, (node_id, score) in enumerate(zip(node_ids, scores, strict=False), start=1):
            self.nodes[node_id].rank = rank
            path = self.tree.token_ids(node_id)
            text = decode_ids(self.tokenizer, path)
            result.append(Hypothesis(rank, node_id, path, text, score, self.nodes[node_id].cum_logprob))
        return result

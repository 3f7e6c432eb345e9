"""The forwards of the lesson "Quantization" (playground/hood/quantization.py): the reference's
run, one quantized run, and their comparison, position by position.

Positions: for a text t_0 … t_{n-1} and the reference's greedy continuation c_0 … c_{m-1}, position
i < n - 1 predicts t_{i+1} from t_0 … t_i (the text is read in one forward, as a prompt is), and
position n - 1 + k predicts c_k from the text and c_0 … c_{k-1} (read one token per forward, as
decode reads them). A quantized run is teacher-forced along the reference's continuation, so both
are compared on the same inputs; its own greedy continuation forks off a copy of its cache at the
first token it would choose differently. Every forward goes through the engine's probes
(engine/probes.py over the one forward primitive).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.engine.control import Control
from playground.engine.probes import Picker
from playground.engine.protocols import Probes, ProbeSequence

CHUNK = 64  # positions compared at once (float64 over the vocabulary)


@dataclass
class Walk:
    """One model's run over the text and a continuation."""

    logits: torch.Tensor  # (positions, vocab) float32: the text's rows, then the continuation's
    continuation: list[int]  # its own greedy continuation
    divergence: int | None = None  # a quantized run: index where its continuation leaves the reference's
    steps: int = 0  # one-token forwards (decode steps)
    step_seconds: float = 0.0
    sequence: Any = None  # the teacher-forced sequence at the end (its cache is measured)

    @property
    def tok_s(self) -> float:
        return self.steps / self.step_seconds if self.step_seconds > 0 else math.nan


@dataclass
class Comparison:
    """Reference ‖ quantized at every position."""

    kl: list[float] = field(default_factory=list)  # nats
    top1: list[bool] = field(default_factory=list)  # the same most likely token
    nll: list[float] = field(default_factory=list)  # -log p_quantized(the position's next token)


def _step(sequence: ProbeSequence, ids: list[int], walk: Walk) -> torch.Tensor:
    rows, seconds = sequence.advance(ids)
    walk.steps += 1
    walk.step_seconds += seconds
    return rows[-1]


def reference_walk(
    probes: Probes,
    model: Any,
    text: list[int],
    new_tokens: int,
    pick: Picker,
    eos: tuple[int, ...],
    control: Control | None,
    report: Callable[[int], None],
) -> Iterator[None]:
    """The reference: the text in one forward, then its greedy continuation (stops after an EOS).
    Yields after each token; returns the Walk (generator return value)."""
    sequence = probes.sequence(control, model=model)
    rows, _ = sequence.advance(text, last=len(text))
    walk = Walk(rows, [], sequence=sequence)
    more, row = [], rows[-1]
    for k in range(new_tokens):
        walk.continuation.append(pick(row, text + walk.continuation))
        report(k + 1)
        yield
        if walk.continuation[-1] in eos or k == new_tokens - 1:
            break
        row = _step(sequence, text + walk.continuation, walk)
        more.append(row)
    walk.logits = torch.cat([rows, *(r[None] for r in more)])
    return walk


def quantized_walk(
    probes: Probes,
    model: Any,
    cache_factory: Callable[[], Any] | None,
    text: list[int],
    reference: list[int],
    new_tokens: int,
    pick: Picker,
    eos: tuple[int, ...],
    control: Control | None,
    report: Callable[[int], None],
) -> Iterator[None]:
    """A quantized model (or cache) teacher-forced along the reference's continuation; its own
    greedy continuation forks at its first different choice. Returns the Walk."""
    sequence = probes.sequence(control, model=model, new_cache=cache_factory)
    rows, _ = sequence.advance(text, last=len(text))
    walk = Walk(rows, [], sequence=sequence)
    more, row, free = [], rows[-1], None
    for k, expected in enumerate(reference):
        if free is None:
            walk.continuation.append(pick(row, text + walk.continuation))
            if walk.continuation[-1] != expected:
                walk.divergence, free = k, sequence.fork()  # covers text + reference[:k]
        report(k + 1)
        yield
        if k == len(reference) - 1:
            break
        row = _step(sequence, text + reference[: k + 1], walk)
        more.append(row)
    walk.logits = torch.cat([rows, *(r[None] for r in more)])
    if free is not None:
        yield from _free_run(free, text, walk, new_tokens, pick, eos)
    return walk


def _free_run(
    sequence: ProbeSequence, text: list[int], walk: Walk, new_tokens: int, pick: Picker, eos: tuple[int, ...]
) -> Iterator[None]:
    """Greedy on from the fork until new_tokens or an EOS."""
    while len(walk.continuation) < new_tokens and walk.continuation[-1] not in eos:
        row = _step(sequence, text + walk.continuation, walk)
        walk.continuation.append(pick(row, text + walk.continuation))
        yield


def compare(reference: torch.Tensor, quantized: torch.Tensor, targets: list[int]) -> Comparison:
    """KL(reference ‖ quantized) in float64 over the whole vocabulary, top-1 agreement and the
    quantized model's -log p of each position's next token (targets)."""
    out = Comparison()
    for start in range(0, reference.shape[0], CHUNK):
        ref = torch.log_softmax(reference[start : start + CHUNK].double(), dim=-1)
        quant = torch.log_softmax(quantized[start : start + CHUNK].double(), dim=-1)
        out.kl += (ref.exp() * (ref - quant)).sum(-1).clamp(min=0).tolist()
        out.top1 += (ref.argmax(-1) == quant.argmax(-1)).tolist()
        index = torch.tensor(targets[start : start + CHUNK], device=quant.device)[:, None]
        out.nll += (-quant.gather(-1, index)[:, 0]).tolist()
    return out


def nll(logits: torch.Tensor, targets: list[int]) -> list[float]:
    """-log p(next token) at each position (the reference's own)."""
    out: list[float] = []
    for start in range(0, logits.shape[0], CHUNK):
        rows = torch.log_softmax(logits[start : start + CHUNK].double(), dim=-1)
        index = torch.tensor(targets[start : start + CHUNK], device=rows.device)[:, None]
        out += (-rows.gather(-1, index)[:, 0]).tolist()
    return out

"""One decode step, the same in every loop: final scores -> the sampling chain's choice -> the token's
record -> the stop rule. The running batch (engine/batcher.py) and a request decoding on its own
(engine/local.py, batching off) both take their tokens from here, so they cannot differ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from playground.engine.plans import DecodePlan
from playground.engine.records import TokenRecord, describe_rows
from playground.engine.sampling import choose, final_scores, seeded_generator
from playground.errors import PlaygroundError


@dataclass
class Decoding:
    """A stream's decode after its prompt: its plan, its private RNG, and where it stops."""

    plan: DecodePlan
    eos: tuple[int, ...]
    context: int  # the model's context length
    generator: torch.Generator
    made: int = 0  # tokens chosen so far

    @classmethod
    def start(cls, plan: DecodePlan, eos: tuple[int, ...], context: int, device: torch.device) -> Decoding:
        return cls(plan, eos, context, seeded_generator(plan.seed, device))

    @property
    def source(self) -> str:
        return "greedy" if self.plan.settings.greedy else "sample"


def decode_step(
    tokenizer: Any, decoding: Decoding, row: torch.Tensor, history: Sequence[int], seconds: float
) -> TokenRecord:
    """Choose the next token from the model's row (vocab,) after `history` (the ids so far, for the
    repetition penalty), with the stream's settings and RNG; its record, whose `seconds` adds the
    choice to the model time already spent on it."""
    started, settings = time.perf_counter(), decoding.plan.settings
    logits = row.reshape(1, -1)  # (1, vocab)
    ids = torch.tensor(list(history), dtype=torch.long, device=logits.device)
    scores = final_scores(logits[0], ids, settings)  # (1, vocab)
    token = choose(scores, settings, decoding.generator)  # (1,) on the device: one host copy below
    record = describe_rows(
        tokenizer, logits, token, processed=scores, top=decoding.plan.top, source=decoding.source
    )[0]
    record.seconds = seconds + time.perf_counter() - started
    decoding.made += 1
    return record


def finished(decoding: Decoding, record: TokenRecord) -> bool:
    """The stop rule: an end-of-sequence token, or the plan's last token."""
    return record.id in decoding.eos or decoding.made >= decoding.plan.max_new_tokens


def check_room(length: int, context: int) -> None:
    """Refuse a token past the model's context (length: the sequence with that token)."""
    if length > context:
        raise PlaygroundError(
            "{tokens} tokens is more than the model's context of {context} tokens.",
            key="tokens.error.past_context",
            tokens=length,
            context=context,
        )

"""What a request asks of the engine and what it hears back while the prompt is read: a leaf module
that every part of the engine (and its callers) may import."""

from __future__ import annotations

from dataclasses import dataclass

from playground.engine.sampling import SamplingSettings


@dataclass
class Progress:
    """Yielded by `stream` while the prompt is read: ("prefill", 1536, 4468)."""

    phase: str
    done: int
    total: int


@dataclass(frozen=True)
class DecodePlan:
    """How `stream` chooses tokens."""

    settings: SamplingSettings
    max_new_tokens: int
    seed: int  # a private RNG per request: the same seed draws the same tokens
    top: int = 5  # alternatives recorded per token

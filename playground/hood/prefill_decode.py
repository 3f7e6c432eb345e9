"""Prefill vs decode, measured live: tokens/s of reading a prompt and of generating after it at
each prompt length, with the estimated arithmetic intensity (FLOPs per byte moved) of each.

    curve = run(engine)   # tok/s of prefill and decode from 16 to 4096 tokens
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.protocols import ModelShape, Probes
from playground.errors import PlaygroundError
from playground.hood.common import Lesson, preset_ids, require, whole_in_range
from playground.messages import Message

DEFAULT_LENGTHS = (16, 64, 256, 1024, 4096)
DECODE_TOKENS = 8  # decode steps timed at each prompt length (median reported)


@dataclass(frozen=True)
class Work:
    """Estimated work of one forward: FLOPs, and bytes moved to and from memory (the weights
    read once per forward, the KV cache read or written; activations are left out)."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes


def kv_bytes_per_token(shape: ModelShape) -> int:
    """Keys and values of one token in every layer: 2 × layers × kv_heads × head_dim × bytes."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.element_bytes


def prefill_work(shape: ModelShape, tokens: int, chunk: int) -> Work:
    """Reading a prompt of `tokens` in chunks of `chunk`: every matmul weight × every token (the
    head for the last token only), causal attention over earlier tokens; the weights are read
    once per chunk and the new keys and values written once."""
    body = shape.matmul_params - shape.head_params
    attention = 2 * shape.layers * shape.heads * shape.head_dim * tokens * (tokens + 1)  # QKᵀ and AV, causal
    flops = 2 * body * tokens + 2 * shape.head_params + attention
    chunks = math.ceil(tokens / chunk)
    return Work(flops, chunks * shape.weight_bytes + tokens * kv_bytes_per_token(shape))


def decode_work(shape: ModelShape, context: int) -> Work:
    """One decode step after `context` tokens: every weight × one token, attention over
    context + 1 keys; every weight read once and the whole KV cache read once."""
    attention = 4 * shape.layers * shape.heads * shape.head_dim * (context + 1)
    flops = 2 * shape.matmul_params + attention
    return Work(flops, shape.weight_bytes + (context + 1) * kv_bytes_per_token(shape))


@dataclass(frozen=True)
class CostPoint:
    """Prefill of a prompt of `length` tokens, then decode steps right after it."""

    length: int
    prefill_seconds: float
    decode_seconds: float  # median seconds of one decode step at this context
    prefill: Work
    decode: Work

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.length / self.prefill_seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return 1 / self.decode_seconds


@dataclass
class PrefillDecode:
    shape: ModelShape
    device: str
    chunk: int  # the engine reads prompts in chunks of this many tokens
    decode_tokens: int
    points: list[CostPoint] = field(default_factory=list)
    phase: str = ""


def run(
    lm: Engine,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    decode_tokens: int = DECODE_TOKENS,
    control: Control | None = None,
) -> PrefillDecode:
    """Tokens/s of reading a prompt (prefill) and of generating after it (decode) at each prompt
    length, with the estimated arithmetic intensity of each (see Work)."""
    return run_to_end(iter_run(lm, lengths, decode_tokens, control))


def iter_run(
    lm: Engine,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    decode_tokens: int = DECODE_TOKENS,
    control: Control | None = None,
) -> Iterator[PrefillDecode]:
    """run, yielding the result after each length (and before, with its phase)."""
    probes = require(lm)
    whole_in_range(decode_tokens, 1, 64, Message("hood.name.decode_steps", "Decode steps per length"))
    lengths = _check_lengths(lm, lengths, decode_tokens)
    result = PrefillDecode(probes.shape(), probes.device.type, probes.prefill_chunk, decode_tokens)
    _measure_point(lm, probes, preset_ids(lm.tokenizer, 8), 2, control)  # warm-up, not recorded
    for length in lengths:
        result.phase = Message(
            "hood.prefill_decode.phase.measuring",
            "prefill of {length:,} tokens, then {steps} decode steps",
            length=length,
            steps=decode_tokens,
        )
        yield result
        prefill, decode = _measure_point(lm, probes, preset_ids(lm.tokenizer, length), decode_tokens, control)
        point = CostPoint(
            length,
            prefill,
            decode,
            prefill_work(result.shape, length, result.chunk),
            decode_work(result.shape, length),
        )
        result.points.append(point)
        result.phase = Message("hood.prefill_decode.phase.done", "{length:,} tokens done", length=length)
        yield result
    return result


def _measure_point(
    lm: Engine, probes: Probes, ids: list[int], steps: int, control: Control | None
) -> tuple[float, float]:
    """(prefill seconds, median decode step seconds) for one prompt."""
    sequence = probes.sequence(control=control)
    rows, prefill = sequence.advance(ids)
    times = []
    for _ in range(steps):
        token = int(rows[-1].argmax())
        rows, seconds = sequence.advance([*sequence.ids, token])
        times.append(seconds)
    return prefill, statistics.median(times)


def _check_lengths(lm: Engine, lengths: Sequence[int], decode_tokens: int) -> list[int]:
    limit = lm.context_length - decode_tokens
    if not lengths:
        raise PlaygroundError("Give at least one prompt length.", key="hood.prefill_decode.error.no_lengths")
    for length in lengths:
        whole_in_range(length, 1, limit, Message("hood.name.prompt_length", "Prompt length"))
    return sorted(set(lengths))


LESSON = Lesson("prefill_decode", Message("hood.prefill_decode.title", "Prefill vs decode"), (), iter_run)

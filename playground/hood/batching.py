"""Batching: N prompts decoded one by one vs together in one padded batch, on the loaded model.

    result = run(engine, [ids_a, ids_b, ...], new_tokens=32)
    result.throughput_ratio        # batch tok/s ÷ one-by-one tok/s
    result.solo_finished           # when each sequence was done, one by one (it waited its turn)
    result.batch_finished          # when each was done in the batch
    result.identical               # each sequence's tokens equal its solo greedy run

Decoding is memory-bound: a step reads every weight once whether it serves one sequence or
sixteen, so a batch turns the same weight reads into N tokens. The prompts are left-padded to
one width and an attention mask hides the pads (as `generate` batches).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.probes import Picker, greedy_picker
from playground.engine.protocols import Probes
from playground.errors import PlaygroundError
from playground.hood.common import NEW_TOKENS, Lesson, Stopwatch, fits_context, require, whole_in_range
from playground.kv import format_bytes, kv_cache_bytes
from playground.messages import Message

# Short questions the view and bench/bench_batching.py batch (the first N are used).
PRESET_QUESTIONS = (
    "What is the capital of Italy?",
    "Name three primary colours.",
    "How many legs does a spider have?",
    "Say hello in Spanish.",
    "What is 12 times 12?",
    "Give me a synonym for happy.",
    "What gas do plants breathe in?",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water in Celsius?",
    "Name a planet with rings.",
    "Translate 'thank you' into French.",
    "What is the largest ocean?",
    "How many days are in a leap year?",
    "What colour is a ripe banana?",
    "Name a mammal that can fly.",
    "What is the square root of 81?",
)

MAX_BATCH = 16
MAX_NEW_TOKENS = 256
MEMORY_MARGIN = 0.8  # use at most this share of the free memory


@dataclass
class BatchingResult:
    prompts: list[list[int]]
    new_tokens: int  # asked for (a sequence stops earlier at its EOS token)
    solo_ids: list[list[int]] = field(default_factory=list)
    batch_ids: list[list[int]] = field(default_factory=list)
    solo_seconds: list[float] = field(default_factory=list)  # each sequence's own run
    solo_finished: list[float] = field(default_factory=list)  # done at, from the start of the one-by-one runs
    batch_finished: list[float] = field(default_factory=list)  # done at, from the start of the batch run
    batch_seconds: float = 0.0
    phase: str = ""

    @property
    def size(self) -> int:
        return len(self.prompts)

    @property
    def solo_tokens_per_second(self) -> float:
        total = sum(self.solo_seconds)
        return sum(len(ids) for ids in self.solo_ids) / total if total else 0.0

    @property
    def batch_tokens_per_second(self) -> float:
        return sum(len(ids) for ids in self.batch_ids) / self.batch_seconds if self.batch_seconds else 0.0

    @property
    def throughput_ratio(self) -> float:
        solo = self.solo_tokens_per_second
        return self.batch_tokens_per_second / solo if solo else 0.0

    @property
    def same(self) -> list[bool]:
        """Per sequence: the batch gave exactly its solo tokens."""
        return [a == b for a, b in zip(self.solo_ids, self.batch_ids, strict=False)]

    @property
    def identical(self) -> bool:
        return len(self.batch_ids) == self.size and all(self.same)


def memory_needed(lm: Engine, probes: Probes, size: int, width: int, new_tokens: int) -> int:
    """Bytes a batch needs beyond the weights: its KV cache at full length, the prefill's
    activations (hidden and MLP states, attention scores) and the kept logits."""
    shape = probes.shape()
    dtype = str(lm.dtype).removeprefix("torch.")
    cache = kv_cache_bytes(lm.config, width + new_tokens, size, dtype, mode="transformers")
    activations = size * width * (4 * shape.hidden + 2 * shape.intermediate) * shape.element_bytes
    scores = size * shape.heads * width * width * shape.element_bytes
    return cache + activations + scores + 2 * size * shape.vocab * 4


def check_fits(
    lm: Engine, probes: Probes, size: int, width: int, new_tokens: int, memory_bytes: int | None
) -> None:
    """Refuse a batch whose estimate exceeds MEMORY_MARGIN of the free memory."""
    free = probes.free_memory_bytes() if memory_bytes is None else memory_bytes
    need = memory_needed(lm, probes, size, width, new_tokens)
    if free is not None and need > MEMORY_MARGIN * free:
        raise PlaygroundError(
            "A batch of {size} × {tokens:,} tokens needs about {need} (KV cache and activations) but only "
            "{free} is free on {device}: use fewer prompts, shorter prompts or fewer new tokens.",
            key="hood.batching.error.memory",
            size=size,
            tokens=width + new_tokens,
            need=format_bytes(need),
            free=format_bytes(free),
            device=lm.device.type,
        )


def run(
    lm: Engine,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    *,
    memory_bytes: int | None = None,
    control: Control | None = None,
) -> BatchingResult:
    """Greedy-decode new_tokens after each prompt, one by one and then in one padded batch.
    memory_bytes: the free memory to plan with (None: what the model's device has free now)."""
    return run_to_end(iter_run(lm, prompts, new_tokens, memory_bytes=memory_bytes, control=control))


def iter_run(
    lm: Engine,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    *,
    memory_bytes: int | None = None,
    control: Control | None = None,
) -> Iterator[BatchingResult]:
    """batching, yielding the result after each solo run and after each batch step."""
    probes = require(lm, "batched")
    prompts = [list(p) for p in prompts]
    whole_in_range(len(prompts), 1, MAX_BATCH, Message("hood.name.prompts", "The number of prompts"))
    whole_in_range(new_tokens, 1, MAX_NEW_TOKENS, NEW_TOKENS)
    for ids in prompts:
        if not ids:
            raise PlaygroundError(
                "Every prompt needs at least one token: one of them is empty.",
                key="hood.batching.error.empty",
            )
        fits_context(lm, len(ids), new_tokens)
    width = max(len(p) for p in prompts)
    check_fits(lm, probes, len(prompts), width, new_tokens, memory_bytes)
    control = control or Control()
    result = BatchingResult(prompts, new_tokens)
    pickers = [greedy_picker(lm, p) for p in prompts]
    yield from _solo_runs(lm, probes, result, pickers, control)
    yield from _batch_run(lm, probes, result, pickers, control)
    return result


def _solo_runs(
    lm: Engine, probes: Probes, result: BatchingResult, pickers: list[Picker], control: Control
) -> Iterator[BatchingResult]:
    elapsed = 0.0
    for i, (prompt, pick) in enumerate(zip(result.prompts, pickers, strict=True)):
        result.phase = Message(
            "hood.batching.phase.solo", "one by one: sequence {i}/{n}", i=i + 1, n=result.size
        )
        yield result
        sequence, ids, watch = probes.sequence(control=control), [], Stopwatch(control)
        while len(ids) < result.new_tokens and not (ids and ids[-1] in lm.eos_token_ids):
            rows, _ = sequence.advance(prompt + ids)
            ids.append(pick(rows[-1], prompt + ids))
        seconds = watch.seconds
        elapsed += seconds
        result.solo_ids.append(ids)
        result.solo_seconds.append(seconds)
        result.solo_finished.append(elapsed)


def _batch_run(
    lm: Engine, probes: Probes, result: BatchingResult, pickers: list[Picker], control: Control
) -> Iterator[BatchingResult]:
    """All prompts in one batch; a finished row is fed pads until every row is done."""
    batch, watch = probes.batch(result.prompts, control), Stopwatch(control)
    result.batch_ids, result.batch_finished = [[] for _ in result.prompts], [0.0] * result.size
    done = [False] * result.size
    rows, _ = batch.prefill()
    while True:
        for i, ids in enumerate(result.batch_ids):
            if not done[i]:
                ids.append(pickers[i](rows[i], result.prompts[i] + ids))
                done[i] = len(ids) == result.new_tokens or ids[-1] in lm.eos_token_ids
                result.batch_finished[i] = watch.seconds
        result.batch_seconds = watch.seconds
        step = max(len(ids) for ids in result.batch_ids)
        result.phase = Message(
            "hood.batching.phase.batch", "batch: step {i}/{n}", i=step, n=result.new_tokens
        )
        with watch.paused():
            yield result
        if all(done):
            return
        pad = max(lm.pad_token_id, 0)
        rows, _ = batch.step([pad if done[i] else ids[-1] for i, ids in enumerate(result.batch_ids)])


LESSON = Lesson("batching", Message("hood.batching.title", "Batching"), ("batched",), iter_run)

"""KV cache on vs off, measured live: the same greedy continuation with the cache (one token per
forward) and recomputing the whole prefix at every step.

    result = run(engine, prompt_ids, new_tokens=16)
    result.cached_step_seconds      # flat: each step forwards one token against the cache
    result.recomputed_step_seconds  # growing: each step forwards the whole prefix again
    result.identical                # the same tokens either way
    result.cache_bytes == result.formula_bytes   # the cache grows by exactly the KV formula
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.probes import greedy_picker
from playground.hood.common import NEW_TOKENS, Lesson, fits_context, preset_ids, require, whole_in_range
from playground.kv import kv_cache_bytes
from playground.messages import Message

__all__ = ["LESSON", "KVOnOff", "iter_run", "preset_ids", "run"]

MAX_NEW_TOKENS = 256  # recomputing the prefix makes every step slower; keep it short


@dataclass
class KVOnOff:
    """The same greedy continuation with the cache and recomputing the prefix at every step.

    Token 1 comes from reading the prompt (the prefill: time to first token); each later token is
    one decode step. `*_step_seconds` hold the decode steps only, the prefill is apart."""

    prompt_tokens: int
    new_tokens: int  # asked for
    dtype: str  # the cache's dtype
    cached_ids: list[int] = field(default_factory=list)
    recomputed_ids: list[int] = field(default_factory=list)
    cached_prefill_seconds: float = 0.0
    recomputed_prefill_seconds: float = 0.0
    cached_step_seconds: list[float] = field(default_factory=list)
    recomputed_step_seconds: list[float] = field(default_factory=list)
    cache_lengths: list[int] = field(default_factory=list)  # tokens in the cache after each cached forward
    cache_bytes: list[int] = field(default_factory=list)  # bytes it held then (measured)
    formula_bytes: list[int] = field(default_factory=list)  # the KV tab's formula at that length
    phase: str = ""  # what was just done (progress text: a Message)

    @property
    def identical(self) -> bool:
        return self.cached_ids == self.recomputed_ids

    @property
    def bytes_match(self) -> bool:
        return self.cache_bytes == self.formula_bytes

    @property
    def step_ratio(self) -> float:
        """Median recomputed step / median cached step (nan before the first step)."""
        if not self.cached_step_seconds:
            return math.nan
        return statistics.median(self.recomputed_step_seconds) / statistics.median(self.cached_step_seconds)

    def cumulative(self, cached: bool) -> list[float]:
        """Seconds spent after each token (prefill first)."""
        steps = self.cached_step_seconds if cached else self.recomputed_step_seconds
        total = self.cached_prefill_seconds if cached else self.recomputed_prefill_seconds
        out = [total]
        for seconds in steps:
            total += seconds
            out.append(total)
        return out


def run(lm: Engine, prompt_ids: Sequence[int], new_tokens: int, control: Control | None = None) -> KVOnOff:
    """Greedy-decode new_tokens after prompt_ids twice, step by step side by side: with a KV cache
    (one token per forward) and without (the whole prefix every forward). See KVOnOff."""
    return run_to_end(iter_run(lm, prompt_ids, new_tokens, control))


def iter_run(
    lm: Engine, prompt_ids: Sequence[int], new_tokens: int, control: Control | None = None
) -> Iterator[KVOnOff]:
    """kv_on_off, yielding the result after every pair of forwards (stops after an EOS token)."""
    probes = require(lm, *LESSON_NEEDS)
    prompt = list(prompt_ids)
    whole_in_range(new_tokens, 1, MAX_NEW_TOKENS, NEW_TOKENS)
    fits_context(lm, len(prompt), new_tokens)
    dtype = str(lm.dtype).removeprefix("torch.")
    result = KVOnOff(len(prompt), new_tokens, dtype)
    pick, sequence = greedy_picker(lm, prompt), probes.sequence(control=control)
    for step in range(new_tokens):
        rows, cached_seconds = sequence.advance(prompt + result.cached_ids)
        row, recomputed_seconds = probes.recompute(prompt + result.recomputed_ids, control)
        _record_bytes(lm, result, sequence.ids, sequence.cache_bytes)
        if step == 0:
            result.cached_prefill_seconds, result.recomputed_prefill_seconds = (
                cached_seconds,
                recomputed_seconds,
            )
        else:
            result.cached_step_seconds.append(cached_seconds)
            result.recomputed_step_seconds.append(recomputed_seconds)
        result.cached_ids.append(pick(rows[-1], prompt + result.cached_ids))
        result.recomputed_ids.append(pick(row, prompt + result.recomputed_ids))
        result.phase = Message("hood.kv_on_off.phase", "token {i}/{n}", i=step + 1, n=new_tokens)
        yield result
        if result.cached_ids[-1] in lm.eos_token_ids:
            break
    return result


def _record_bytes(lm: Engine, result: KVOnOff, ids: list[int], measured: int) -> None:
    result.cache_lengths.append(len(ids))
    result.cache_bytes.append(measured)
    result.formula_bytes.append(kv_cache_bytes(lm.config, len(ids), 1, result.dtype, mode="transformers"))


LESSON_NEEDS = ("cache_bytes",)
LESSON = Lesson("kv_on_off", Message("hood.kv_on_off.title", "KV cache on vs off"), LESSON_NEEDS, iter_run)

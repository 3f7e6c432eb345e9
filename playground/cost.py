"""What generation costs, measured live on the loaded model: the KV cache on vs off, and
prefill vs decode.

    result = kv_on_off(engine, prompt_ids, new_tokens=16)
    result.cached_step_seconds      # flat: each step forwards one token against the cache
    result.recomputed_step_seconds  # growing: each step forwards the whole prefix again
    result.identical                # the same tokens either way
    result.cache_bytes == result.formula_bytes   # the cache grows by exactly the KV formula

    curve = prefill_vs_decode(engine)   # tok/s of prefill and decode from 16 to 4096 tokens

Each `iter_*` function yields its result object as it fills (for live plots and progress);
the plain function runs it to the end. Cancellation: pass a Control and cancel it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.engine.control import Control
from playground.engine.probes import ModelShape, greedy_picker
from playground.errors import PlaygroundError
from playground.kv import kv_cache_bytes
from playground.views import probes_needing, run_to_end, whole_in_range

MAX_NEW_TOKENS = 256  # KV on/off: recomputing the prefix makes every step slower; keep it short
DEFAULT_LENGTHS = (16, 64, 256, 1024, 4096)
DECODE_TOKENS = 8  # decode steps timed at each prompt length (median reported)

# Ordinary English prose, repeated to make long prompts of any length.
LONG_TEXT = (
    "The history of the printing press begins long before Gutenberg. Carved wooden blocks were inked "
    "and pressed onto paper in China, and movable type made of clay and later metal followed in China "
    "and Korea. In Europe, around 1440, a goldsmith from Mainz combined a screw press, oil-based ink and "
    "type cast from a lead alloy in a hand mould. Books that had taken a scribe a year to copy could now "
    "be printed by the hundred in weeks, and within fifty years presses were working in more than two "
    "hundred cities. Prices fell, literacy rose, and ideas travelled faster than any ruler could stop "
    "them. Scholars could compare identical copies of a text, errors stopped multiplying with every copy, "
    "and the pamphlet became a weapon in every religious and political quarrel of the age. "
)


def preset_ids(tokenizer: Any, length: int) -> list[int]:
    """`length` token ids of ordinary prose (the tokenizer's start token first where it adds one)."""
    if length < 1:
        raise PlaygroundError(f"A prompt needs at least 1 token, got {length}.")
    ids = list(tokenizer(LONG_TEXT, add_special_tokens=True).input_ids)
    body = list(tokenizer(" " + LONG_TEXT, add_special_tokens=False).input_ids)
    while len(ids) < length:
        ids += body
    return ids[:length]


# --- KV cache on vs off --------------------------------------------------------------------------


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
    phase: str = ""  # what was just done (progress text)

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


def kv_on_off(lm: Any, prompt_ids: Sequence[int], new_tokens: int, control: Control | None = None) -> KVOnOff:
    """Greedy-decode new_tokens after prompt_ids twice, step by step side by side: with a KV cache
    (one token per forward) and without (the whole prefix every forward). See KVOnOff."""
    return run_to_end(iter_kv_on_off(lm, prompt_ids, new_tokens, control))


def iter_kv_on_off(
    lm: Any, prompt_ids: Sequence[int], new_tokens: int, control: Control | None = None
) -> Iterator[KVOnOff]:
    """kv_on_off, yielding the result after every pair of forwards (stops after an EOS token)."""
    probes = probes_needing(lm, "cache_bytes")
    prompt = list(prompt_ids)
    whole_in_range(new_tokens, 1, MAX_NEW_TOKENS, "New tokens")
    if len(prompt) + new_tokens > lm.context_length:
        raise PlaygroundError(
            f"{len(prompt)} + {new_tokens} tokens is more than the context of {lm.context_length}."
        )
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
        result.phase = f"token {step + 1}/{new_tokens}"
        yield result
        if result.cached_ids[-1] in lm.eos_token_ids:
            break
    return result


def _record_bytes(lm: Any, result: KVOnOff, ids: list[int], measured: int) -> None:
    result.cache_lengths.append(len(ids))
    result.cache_bytes.append(measured)
    result.formula_bytes.append(kv_cache_bytes(lm.config, len(ids), 1, result.dtype, mode="transformers"))


# --- prefill vs decode -----------------------------------------------------------------------


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


def prefill_vs_decode(
    lm: Any,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    decode_tokens: int = DECODE_TOKENS,
    control: Control | None = None,
) -> PrefillDecode:
    """Tokens/s of reading a prompt (prefill) and of generating after it (decode) at each prompt
    length, with the estimated arithmetic intensity of each (see Work)."""
    return run_to_end(iter_prefill_vs_decode(lm, lengths, decode_tokens, control))


def iter_prefill_vs_decode(
    lm: Any,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    decode_tokens: int = DECODE_TOKENS,
    control: Control | None = None,
) -> Iterator[PrefillDecode]:
    """prefill_vs_decode, yielding the result after each length (and before, with its phase)."""
    probes = probes_needing(lm)
    whole_in_range(decode_tokens, 1, 64, "Decode steps per length")
    lengths = _check_lengths(lm, lengths, decode_tokens)
    result = PrefillDecode(probes.shape(), lm.device.type, lm.prefill_chunk, decode_tokens)
    _measure_point(lm, probes, preset_ids(lm.tokenizer, 8), 2, control)  # warm-up, not recorded
    for length in lengths:
        result.phase = f"prefill of {length:,} tokens, then {decode_tokens} decode steps"
        yield result
        prefill, decode = _measure_point(lm, probes, preset_ids(lm.tokenizer, length), decode_tokens, control)
        point = CostPoint(
            length, prefill, decode, prefill_work(result.shape, length, result.chunk),
            decode_work(result.shape, length),
        )  # fmt: skip
        result.points.append(point)
        result.phase = f"{length:,} tokens done"
        yield result
    return result


def _measure_point(
    lm: Any, probes: Any, ids: list[int], steps: int, control: Control | None
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


def _check_lengths(lm: Any, lengths: Sequence[int], decode_tokens: int) -> list[int]:
    limit = lm.context_length - decode_tokens
    if not lengths:
        raise PlaygroundError("Give at least one prompt length.")
    for length in lengths:
        whole_in_range(length, 1, limit, "Prompt length")
    return sorted(set(lengths))

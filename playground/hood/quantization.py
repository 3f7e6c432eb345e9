"""Quantization, measured token by token: the loaded model against copies of it with quantized
weights (8, 4, 3, 2 bits) or a quantized KV cache (fp8, int8, int4, int2), made with real libraries.

    r = run(lm, ids, weights="hqq4", new_tokens=32)   # or kv="int4", or both
    r.kl                 # KL(reference ‖ quantized) in nats at every position (see quant_runs.py)
    r.top1_agreement     # share of positions where both put the same token first
    r.first_divergence   # where the two greedy continuations part (None: they never do)
    r.reference_ids, r.quantized_ids
    r.weight_bytes, r.kv_bytes    # measured on the tensors (scales included)
    r.tok_s              # decode tokens/s: (reference, quantized)

`iter_run(lm, ids, formats, new_tokens)` runs a whole ladder of formats against one
reference run (the view's run). A copy is made when its turn comes (its memory estimated first),
and freed at once after. The text is read in one forward as a prompt is, so a quantized KV cache
changes nothing there (attention reads the new keys before they are stored): its error appears
when the cache is read back, token by token, in the continuation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.kv_quant import (
    KV_FORMATS,
    KVFormat,
    cache_bytes,
    kv_format,
    quantized_cache,
    quanto_kernel_built,
)
from playground.engine.probes import greedy_picker
from playground.engine.quant_bytes import model_bytes, release_memory
from playground.engine.quantize import (
    WEIGHT_FORMATS,
    QuantizedWeights,
    QuantSpec,
    quantized_copy,
    weight_format,
)
from playground.errors import PlaygroundError
from playground.hood.common import NEW_TOKENS, Lesson, fits_context, require, whole_in_range
from playground.hood.quant_runs import Walk, compare, nll, quantized_walk, reference_walk
from playground.kv import kv_cache_bytes, quantized_prediction
from playground.messages import Message

__all__ = ["LADDER", "LESSON", "QuantizationResult", "QuantizationRun", "iter_run", "run"]

MAX_TEXT_TOKENS = 512
MAX_NEW_TOKENS = 64
# The view's default ladder: weights at 8, 4, 3 and 2 bits, the --quantize int8 format, and the
# KV cache at 8, 4 and 2 bits ("kv-<dtype>"); "hqq4+kv-int4" quantizes both.
LADDER = ("hqq8", "hqq4", "hqq3", "hqq2", "int8", "kv-fp8", "kv-int8", "kv-int4", "kv-int2")


@dataclass(frozen=True)
class Rung:
    """One format of the ladder: quantized weights, a quantized KV cache, or both."""

    weights: Any  # a WeightFormat, a QuantizedWeights made beforehand, or None
    kv: KVFormat | None

    @property
    def weight_format(self) -> Any:
        return self.weights.fmt if isinstance(self.weights, QuantizedWeights) else self.weights

    @property
    def key(self) -> str:
        parts = [self.weight_format.name] if self.weights is not None else []
        return "+".join([*parts, *([f"kv-{self.kv.name}"] if self.kv else [])])

    @property
    def label(self) -> str:
        parts = [self.weight_format.label] if self.weights is not None else []
        return " + ".join([*parts, *([self.kv.label] if self.kv else [])])

    @property
    def library(self) -> str:
        parts = [self.weight_format.library] if self.weights is not None else []
        return " + ".join([*parts, *([self.kv.library] if self.kv else [])])


def rung(spec: Any) -> Rung:
    """'hqq4', 'kv-int4', 'hqq4+kv-int4' (or a Rung) -> a Rung; unknown names: a clear error."""
    if isinstance(spec, Rung):
        return spec
    weights, kv = None, None
    for part in str(spec).lower().replace(" ", "").split("+"):
        if part.startswith("kv-") or part.startswith("kv:"):
            kv = kv_format(part[3:])
        elif part in WEIGHT_FORMATS:
            weights = weight_format(part)
        else:
            known = ", ".join([*WEIGHT_FORMATS, *(f"kv-{k}" for k in KV_FORMATS)])
            raise PlaygroundError(
                "Unknown format {spec!r}: use one of {known} (or weights+kv-…).",
                key="hood.quantization.error.format",
                spec=spec,
                known=known,
            )
    return Rung(weights, kv)


@dataclass
class QuantizationResult:
    """One format against the reference (see the module docstring)."""

    key: str
    label: str
    library: str
    text_tokens: int
    bits: float  # weights: bits per weight of the quantized layers; KV: bits per cached value
    kl: list[float]  # one per position: the text's, then the continuation's
    top1: list[bool]
    nll: list[float]
    reference_nll: list[float]
    reference_ids: list[int]
    quantized_ids: list[int]
    first_divergence: int | None
    weight_bytes: int
    reference_weight_bytes: int
    kv_bytes: int  # the cache after the text and the continuation (measured)
    kv_formula_bytes: int  # the KV tab's formula for what it holds (quantized + residual)
    reference_kv_bytes: int
    tok_s: tuple[float, float]  # decode tokens/s: (reference, quantized)
    quantize_seconds: float = 0.0

    @property
    def mean_kl(self) -> float:
        return statistics.fmean(self.kl) if self.kl else math.nan

    @property
    def p99_kl(self) -> float:
        return _quantile(self.kl, 0.99)

    @property
    def top1_agreement(self) -> float:
        return sum(self.top1) / len(self.top1) if self.top1 else math.nan

    @property
    def first_flip(self) -> int | None:
        """The first position whose most likely token differs (None: none does)."""
        return next((i for i, same in enumerate(self.top1) if not same), None)

    @property
    def perplexity(self) -> float:
        return math.exp(statistics.fmean(self.nll)) if self.nll else math.nan

    @property
    def reference_perplexity(self) -> float:
        return math.exp(statistics.fmean(self.reference_nll)) if self.reference_nll else math.nan

    @property
    def kv_bytes_match(self) -> bool:
        return self.kv_bytes == self.kv_formula_bytes


@dataclass
class QuantizationRun:
    """A ladder against one reference run: what `iter_run` yields as it fills."""

    text_ids: list[int]
    new_tokens: int
    device: str
    dtype: str
    reference_note: str  # what the reference is (a dequantized GGUF, or full precision)
    formats: list[str]  # the ladder's keys, in order
    reference_ids: list[int] = field(default_factory=list)
    reference_tok_s: float = math.nan
    reference_weight_bytes: int = 0
    reference_kv_bytes: int = 0
    reference_nll: list[float] = field(default_factory=list)
    results: list[QuantizationResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # key -> why it could not run here
    phase: str = ""

    @property
    def positions(self) -> list[int]:
        """The token each position predicts: the text's after the first, then the continuation."""
        return [*self.text_ids[1:], *self.reference_ids]

    @property
    def reference_perplexity(self) -> float:
        return math.exp(statistics.fmean(self.reference_nll)) if self.reference_nll else math.nan


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def reference_note(lm: Engine) -> Message:
    """What the reference is: a GGUF file's weights dequantized, or the model at full precision."""
    dtype = str(lm.dtype).removeprefix("torch.")
    if "q4_1" in lm.name.lower():
        return Message(
            "hood.quantization.reference.q4_1",
            "The reference is the loaded model, {name}, dequantized to {dtype}: its weights already lie "
            "on a 4-bit grid (Q4_1: blocks of 32 with a float16 scale and minimum), so re-quantizing them to "
            "Q4_1 would lose nothing. Every format here re-quantizes onto another grid, which costs more "
            "than it would from the bf16 checkpoint (--model HuggingFaceTB/SmolLM2-135M-Instruct).",
            name=lm.name,
            dtype=dtype,
        )
    if "gguf" in f"{lm.name} {lm.source}".lower():
        return Message(
            "hood.quantization.reference.gguf",
            "The reference is the loaded model, {name}, a GGUF file dequantized to {dtype}: its weights "
            "were quantized in the file already, so these copies are re-quantized.",
            name=lm.name,
            dtype=dtype,
        )
    return Message(
        "hood.quantization.reference.full",
        "The reference is the loaded model, {name}, in {dtype} as loaded: full precision.",
        name=lm.name,
        dtype=dtype,
    )


# --- the lesson -----------------------------------------------------------------------------------


def run(
    lm: Engine,
    ids: Sequence[int],
    weights: Any = None,
    kv: str | None = None,
    new_tokens: int = 32,
    control: Control | None = None,
) -> QuantizationResult:
    """One format against the loaded model (weights: a format name such as "hqq4", or a copy from
    quantized_weights(); kv: "fp8", "int8", "int4" or "int2"). Raises when it cannot run here."""
    if weights is None and kv is None:
        raise PlaygroundError(
            "Name a weights format, a KV cache format, or both.", key="hood.quantization.error.no_format"
        )
    if isinstance(weights, str):
        weights = weight_format(weights)
    one = Rung(weights, kv_format(str(kv).removeprefix("kv-")) if kv else None)
    run = run_to_end(iter_run(lm, ids, [one], new_tokens, control))
    if not run.results:
        raise PlaygroundError(next(iter(run.skipped.values())))
    return run.results[0]


def quantized_weights(lm: Engine, name: str, control: Control | None = None) -> QuantizedWeights:
    """A quantized copy of the loaded model (weights shared where not quantized), to pass to
    quantization() several times; call .free() when done."""
    probes = _probes(lm)
    fmt = weight_format(name)
    spec = QuantSpec(probes.device, lm.dtype)
    return quantized_copy(probes.model, fmt, spec, probes.free_memory_bytes(), control)


def _probes(lm: Engine) -> Any:
    probes = require(lm)
    served = getattr(lm, "quantization", None)
    if served:
        raise PlaygroundError(
            "The app serves {served} weights (--quantize {served}): this lesson needs the loaded model at "
            "full precision as its reference. Start the app without --quantize.",
            key="hood.quantization.error.served",
            served=served,
        )
    return probes


def check_text(lm: Engine, ids: Sequence[int], new_tokens: int) -> list[int]:
    text = list(ids)
    if not text:
        raise PlaygroundError(
            "The text is empty: type a sentence or two.", key="hood.quantization.error.empty"
        )
    if len(text) > MAX_TEXT_TOKENS:
        raise PlaygroundError(
            "The text is {tokens:,} tokens: this lesson takes at most {most} (every format reads it again).",
            key="hood.quantization.error.too_long",
            tokens=len(text),
            most=MAX_TEXT_TOKENS,
        )
    whole_in_range(new_tokens, 1, MAX_NEW_TOKENS, NEW_TOKENS)
    fits_context(lm, len(text), new_tokens)
    lm.probes.check(text)
    return text


def iter_run(
    lm: Engine,
    ids: Sequence[int],
    formats: Sequence[Any] = LADDER,
    new_tokens: int = 32,
    control: Control | None = None,
) -> Iterator[QuantizationRun]:
    """The reference run, then each format of the ladder in turn; yields the run as it fills (its
    phase says what is being done). A format that cannot run here is listed in .skipped with why."""
    probes = _probes(lm)
    rungs = [rung(f) for f in formats]
    if not rungs:
        raise PlaygroundError("Choose at least one format.", key="hood.quantization.error.no_formats")
    text = check_text(lm, ids, new_tokens)
    run = QuantizationRun(
        text,
        new_tokens,
        probes.device.type,
        str(lm.dtype).removeprefix("torch."),
        reference_note(lm),
        [r.key for r in rungs],
    )
    reference = yield from _reference(lm, probes, run, control)
    for index, one in enumerate(rungs):
        prefix = f"{index + 1}/{len(rungs)} {one.label}"
        try:
            result = yield from _one(lm, probes, run, reference, one, prefix, control)
        except PlaygroundError as exc:
            if type(exc) is not PlaygroundError:  # Stop (Cancelled) ends the run
                raise
            run.skipped[one.key] = exc.message
            continue
        finally:
            release_memory()
        run.results.append(result)
        run.phase = Message("hood.quantization.phase.done", "{prefix}: done", prefix=prefix)
        yield run
    run.phase = _last_phase(run)
    return run


def _last_phase(run: QuantizationRun) -> Message:
    skipped = (
        Message("hood.quantization.phase.skipped", ", {count} could not run here", count=len(run.skipped))
        if run.skipped
        else ""
    )
    return Message(
        "hood.quantization.phase.measured",
        "{count} formats measured against the reference{skipped}",
        count=len(run.results),
        skipped=skipped,
    )


def _reference(lm: Engine, probes: Any, run: QuantizationRun, control: Control | None) -> Iterator[Any]:
    """The loaded model's own run: its logits at every position, greedy continuation, speed, bytes."""
    text = run.text_ids

    def report(k: int) -> None:
        run.phase = Message(
            "hood.quantization.phase.reference",
            "reference ({dtype}): token {k}/{n}",
            dtype=run.dtype,
            k=k,
            n=run.new_tokens,
        )

    walk = yield from _driven(
        reference_walk(
            probes,
            probes.model,
            text,
            run.new_tokens,
            greedy_picker(lm, text),
            lm.eos_token_ids,
            control,
            report,
        ),
        run,
    )
    run.reference_ids, run.reference_tok_s = walk.continuation, walk.tok_s
    run.reference_nll = nll(walk.logits, run.positions)
    run.reference_weight_bytes = model_bytes(probes.model)[0]
    run.reference_kv_bytes = cache_bytes(walk.sequence.cache).total
    walk.sequence = None
    return walk


def _driven(walk: Iterator[None], run: QuantizationRun) -> Iterator[QuantizationRun]:
    """Yield the run after each step of a walk; the walk's result."""
    while True:
        try:
            next(walk)
        except StopIteration as done:
            return done.value
        yield run


def _one(
    lm: Engine,
    probes: Any,
    run: QuantizationRun,
    reference: Walk,
    one: Rung,
    prefix: str,
    control: Control | None,
) -> Iterator[Any]:
    """One format: its copy (or cache), its walk, the comparison; a copy made here is freed after."""
    made = None
    copy = one.weights if isinstance(one.weights, QuantizedWeights) else None
    if one.weights is not None and copy is None:
        run.phase = Message(
            "hood.quantization.phase.quantizing",
            "{prefix}: quantizing the weights ({library})",
            prefix=prefix,
            library=one.weights.library,
        )
        yield run
        spec = QuantSpec(probes.device, lm.dtype)
        made = copy = quantized_copy(probes.model, one.weights, spec, probes.free_memory_bytes(), control)
    try:
        factory = None
        if one.kv is not None:
            run.phase = Message(
                "hood.quantization.phase.step", "{prefix}: {what}", prefix=prefix, what=_preparing(one.kv)
            )
            yield run
            factory = _cache_factory(lm, probes, one.kv)
        model = copy.model if copy is not None else probes.model

        def report(k: int) -> None:
            run.phase = Message(
                "hood.quantization.phase.token",
                "{prefix}: token {k}/{n}",
                prefix=prefix,
                k=k,
                n=len(run.reference_ids),
            )

        pick = greedy_picker(lm, run.text_ids)
        walk = yield from _driven(
            quantized_walk(
                probes,
                model,
                factory,
                run.text_ids,
                run.reference_ids,
                run.new_tokens,
                pick,
                lm.eos_token_ids,
                control,
                report,
            ),
            run,
        )
        return _result(lm, run, reference, one, walk, copy)
    finally:
        if made is not None:
            made.free()


def _preparing(fmt: KVFormat) -> Message:
    if fmt.backend == "quanto" and not quanto_kernel_built():
        return Message(
            "hood.quantization.phase.kernel",
            "optimum-quanto compiles its C++ kernel once for this machine (about 2 minutes on 2 cores; "
            "kept in the cache folder)",
        )
    return Message("hood.quantization.phase.cache", "preparing the cache ({library})", library=fmt.library)


def _cache_factory(lm: Engine, probes: Any, fmt: KVFormat) -> Any:
    """A maker of empty caches in fmt (one built now, so a problem shows before any forward)."""
    dims = lm.dims
    if dims is not None and (dims.kv_heads * dims.head_dim) % 64:
        raise PlaygroundError(
            "{label} groups 64 values, and this model caches {kv_heads} × {head_dim} values "
            "per token and layer: not a multiple of 64.",
            key="hood.quantization.error.groups",
            label=fmt.label,
            kv_heads=dims.kv_heads,
            head_dim=dims.head_dim,
        )
    quantized_cache(lm.config, fmt, probes.device)
    return lambda: quantized_cache(lm.config, fmt, probes.device)


def _result(
    lm: Engine, run: QuantizationRun, reference: Walk, one: Rung, walk: Walk, copy: QuantizedWeights | None
) -> QuantizationResult:
    """Compare the walk with the reference's, measure the bytes, check them against the formula."""
    same = compare(reference.logits, walk.logits, run.positions)
    held = cache_bytes(walk.sequence.cache)
    if one.kv is None:
        formula = kv_cache_bytes(lm.config, max(held.residual_tokens, 1), 1, run.dtype, "transformers")
    else:
        formula = _quantized_formula(lm, one.kv, held.quantized_tokens, held.residual_tokens, run.dtype)
    bits = (
        copy.bits_per_weight if copy is not None else _kv_bits(lm, one.kv, held.quantized_tokens, run.dtype)
    )
    walk.sequence = None
    return QuantizationResult(
        one.key,
        one.label,
        one.library,
        len(run.text_ids),
        bits,
        same.kl,
        same.top1,
        same.nll,
        run.reference_nll,
        run.reference_ids,
        walk.continuation,
        walk.divergence,
        copy.total_bytes if copy is not None else run.reference_weight_bytes,
        run.reference_weight_bytes,
        held.total,
        formula,
        run.reference_kv_bytes,
        (run.reference_tok_s, walk.tok_s),
        copy.seconds if copy is not None else 0.0,
    )


def _quantized_formula(lm: Engine, fmt: KVFormat, quantized: int, residual: int, dtype: str) -> int:
    """The KV tab's formula for a quantized cache: its quantized tokens in fmt (scales in the model's
    dtype), plus the residual window in the model's dtype."""
    return sum(quantized_prediction(lm.config, fmt.name, quantized, residual, dtype))


def _kv_bits(lm: Engine, fmt: KVFormat | None, quantized: int, dtype: str) -> float:
    """Bits per cached value of a KV format (scales and zeros included), from the formula at the
    tokens it holds quantized (64 when none yet); the model's dtype without a KV format."""
    tokens = quantized or 64
    plain = kv_cache_bytes(lm.config, tokens, 1, "float32", "transformers")  # 4 bytes per value
    if fmt is None:
        return 32 * kv_cache_bytes(lm.config, tokens, 1, dtype, "transformers") / plain
    return 32 * sum(quantized_prediction(lm.config, fmt.name, tokens, 0, dtype)) / plain


LESSON = Lesson(
    "quantization", Message("hood.quantization.title", "Quantization, token by token"), (), iter_run
)

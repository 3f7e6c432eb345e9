"""Sampling as a chain of small processors, each visible as a stage.

Every processor is a callable `(input_ids, scores) -> scores` that never mutates its
input (like a transformers `LogitsProcessor`). `sampling_stages` runs the chain and keeps
the distribution after every stage, so the UI can show what each stage removed.

Default order is the one `model.generate` uses in transformers 5: repetition penalty,
temperature, top-k, top-p, min-p, typical-p. Temperature 0 means greedy: only the
argmax survives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from playground.errors import PlaygroundError
from playground.messages import Message

FILTERED = -float("inf")  # the value transformers gives removed tokens
DEFAULT_ORDER: tuple[str, ...] = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "typical_p")

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# How a setting is named in a message (the Chat and Step tabs' sliders say the same)
SETTING_NAMES = {
    "temperature": Message("sampling.name.temperature", "temperature"),
    "top_k": Message("sampling.name.top_k", "top-k"),
    "top_p": Message("sampling.name.top_p", "top-p"),
    "min_p": Message("sampling.name.min_p", "min-p"),
    "typical_p": Message("sampling.name.typical_p", "typical-p"),
    "repetition_penalty": Message("sampling.name.repetition_penalty", "repetition-penalty"),
}


@dataclass(frozen=True)
class SamplingSettings:
    # Divide logits by this; 0 = greedy (argmax only); 1 = unchanged.
    temperature: float = 1.0
    # Keep only the k most likely tokens; 0 = off.
    top_k: int = 0
    # Keep the smallest set of tokens whose probability sums to at least p; 1 = off.
    top_p: float = 1.0
    # Drop tokens less likely than min_p x the top token's probability; 0 = off.
    min_p: float = 0.0
    # Keep tokens whose surprise is closest to the entropy, up to this mass; 1 = off.
    typical_p: float = 1.0
    # Penalize tokens already in the text (>1 discourages repeats); 1 = off.
    repetition_penalty: float = 1.0
    # Order the stages run in (names from DEFAULT_ORDER); the user may reorder them.
    order: tuple[str, ...] = field(default=DEFAULT_ORDER)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["order"] = list(self.order)
        return data


@dataclass
class Stage:
    """The distribution after one stage of the chain."""

    name: str  # "raw" for the model's own distribution, else the processor's name
    logits: torch.Tensor  # (vocab,) scores after this stage; removed tokens are -inf
    probs: torch.Tensor  # (vocab,) softmax of logits
    removed_ids: torch.Tensor  # (n,) token ids this stage removed (not removed before it)


def validate_settings(settings: SamplingSettings | Mapping[str, Any] | None) -> SamplingSettings:
    """Check every value and return a SamplingSettings; the error names the bad value."""
    if settings is None:
        return SamplingSettings()
    if isinstance(settings, Mapping):
        known = {f.name for f in fields(SamplingSettings)}
        unknown = set(settings) - known
        if unknown:
            raise PlaygroundError(
                "Unknown sampling settings: {unknown}; known: {known}",
                key="sampling.unknown",
                unknown=str(sorted(unknown)),
                known=str(sorted(known)),
            )
        values = {k: v for k, v in settings.items() if v is not None}
        if isinstance(values.get("order"), (list, tuple)):
            values["order"] = tuple(values["order"])
        if isinstance(values.get("top_k"), float) and values["top_k"].is_integer():
            values["top_k"] = int(values["top_k"])  # sliders and JSON may send 40.0
        settings = SamplingSettings(**values)
    _check_ranges(settings)
    return settings


_NUMBER_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty")


def _check_types(s: SamplingSettings) -> None:
    """Every numeric setting must be a finite real number (not text, not a bool, not NaN/inf)."""
    for name in _NUMBER_FIELDS:
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise PlaygroundError(
                "{name} must be a finite number, got {value!r}",
                key="sampling.not_finite",
                name=SETTING_NAMES[name],
                value=value,
            )
    if not isinstance(s.order, (tuple, list)) or not all(isinstance(name, str) for name in s.order):
        raise PlaygroundError(
            "stage order must be a list of stage names, got {order!r}",
            key="sampling.order_type",
            order=s.order,
        )


def _check_ranges(s: SamplingSettings) -> None:
    _check_types(s)
    checks = [
        (
            s.temperature >= 0,
            Message(
                "sampling.temperature",
                "temperature must be >= 0 (0 = greedy), got {value}",
                value=s.temperature,
            ),
        ),
        (
            isinstance(s.top_k, int) and s.top_k >= 0,
            Message("sampling.top_k", "top-k must be an integer >= 0 (0 = off), got {value}", value=s.top_k),
        ),
        (0 < s.top_p <= 1, Message("sampling.top_p", "top-p must be in (0, 1], got {value}", value=s.top_p)),
        (0 <= s.min_p <= 1, Message("sampling.min_p", "min-p must be in [0, 1], got {value}", value=s.min_p)),
        (
            0 < s.typical_p <= 1,
            Message("sampling.typical_p", "typical-p must be in (0, 1], got {value}", value=s.typical_p),
        ),
        (
            s.repetition_penalty > 0,
            Message(
                "sampling.repetition_penalty",
                "repetition penalty must be > 0, got {value}",
                value=s.repetition_penalty,
            ),
        ),
        (
            sorted(s.order) == sorted(set(s.order)) and set(s.order) <= set(DEFAULT_ORDER),
            Message(
                "sampling.order",
                "stage order must use each of {stages} at most once, got {order}",
                stages=str(list(DEFAULT_ORDER)),
                order=str(list(s.order)),
            ),
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise PlaygroundError(message)


# --- processors: (input_ids (1, seq), scores (1, vocab)) -> new scores (1, vocab) ----------


def repetition_penalty(penalty: float) -> Processor:
    """Scores of tokens already in input_ids: divided by penalty if > 0, multiplied if < 0."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        seen = torch.gather(scores, 1, input_ids)
        penalized = torch.where(seen < 0, seen * penalty, seen / penalty)
        return scores.scatter(1, input_ids, penalized)

    return apply


def temperature(value: float) -> Processor:
    """Divide by the temperature; 0 keeps only the argmax (greedy)."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if value == 0:
            keep = scores == scores.max(dim=-1, keepdim=True).values
            first_max = keep.cumsum(-1) == 1  # ties: the first index wins, as argmax does
            return scores.masked_fill(~(keep & first_max), FILTERED)
        return scores / value

    return apply


def top_k(k: int) -> Processor:
    """Remove every token scoring below the k-th best (ties at the k-th are kept)."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        kth_best = torch.topk(scores, min(k, scores.size(-1)))[0][..., -1, None]
        return scores.masked_fill(scores < kth_best, FILTERED)

    return apply


def top_p(p: float) -> Processor:
    """Nucleus: keep the most likely tokens until their mass reaches p (at least one)."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_remove = cumulative <= (1 - p)
        sorted_remove[..., -1:] = False
        remove = sorted_remove.scatter(1, sorted_indices, sorted_remove)
        return scores.masked_fill(remove, FILTERED)

    return apply


def min_p(fraction: float) -> Processor:
    """Remove tokens whose probability is below fraction x the top token's probability."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores, dim=-1)
        remove = probs < fraction * probs.amax(dim=-1, keepdim=True)
        remove = remove.scatter(-1, probs.argmax(dim=-1, keepdim=True), False)
        return scores.masked_fill(remove, FILTERED)

    return apply


def typical_p(mass: float) -> Processor:
    """Locally typical sampling: keep tokens whose surprise is closest to the entropy."""

    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(scores, dim=-1)
        entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)
        shifted, sorted_indices = torch.sort(torch.abs(-log_probs - entropy), descending=False)
        cumulative = scores.gather(-1, sorted_indices).softmax(dim=-1).cumsum(dim=-1)
        last = (cumulative < mass).sum(dim=1).clamp(max=shifted.shape[-1] - 1)
        sorted_remove = shifted > shifted.gather(1, last.view(-1, 1))
        sorted_remove[..., :1] = False
        remove = sorted_remove.scatter(1, sorted_indices, sorted_remove)
        return scores.masked_fill(remove, FILTERED)

    return apply


def build_processors(settings: SamplingSettings) -> list[tuple[str, Processor]]:
    """The active processors in the settings' order (stages that would do nothing are skipped,
    as `generate` skips them)."""
    active = {
        "repetition_penalty": settings.repetition_penalty != 1.0
        and repetition_penalty(settings.repetition_penalty),
        "temperature": settings.temperature != 1.0 and temperature(settings.temperature),
        "top_k": settings.top_k != 0 and not settings.greedy and top_k(settings.top_k),
        "top_p": settings.top_p < 1.0 and not settings.greedy and top_p(settings.top_p),
        "min_p": settings.min_p > 0 and not settings.greedy and min_p(settings.min_p),
        "typical_p": settings.typical_p < 1.0 and not settings.greedy and typical_p(settings.typical_p),
    }
    return [(name, active[name]) for name in settings.order if active.get(name)]


def _as_batch(
    logits: torch.Tensor, input_ids: torch.Tensor | Sequence[int] | None
) -> tuple[torch.Tensor, ...]:
    scores = logits.detach().float().reshape(1, -1)  # (1, vocab)
    if input_ids is None:
        ids = torch.zeros((1, 0), dtype=torch.long, device=scores.device)
    else:
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=scores.device).reshape(1, -1)
    return scores, ids


def sampling_stages(
    logits: torch.Tensor,
    input_ids: torch.Tensor | Sequence[int] | None,
    settings: SamplingSettings | Mapping[str, Any] | None,
) -> list[Stage]:
    """Run the chain on one position's logits (vocab,) or (1, vocab).

    Returns [raw, stage1, stage2, ...]: the last stage is the distribution sampled from.
    input_ids are the tokens so far (for the repetition penalty).
    """
    settings = validate_settings(settings)
    scores, ids = _as_batch(logits, input_ids)
    stages = [_stage("raw", scores, torch.zeros(1, scores.size(-1), dtype=torch.bool))]
    for name, processor in build_processors(settings):
        before = scores
        scores = processor(ids, scores)
        newly_removed = torch.isneginf(scores) & ~torch.isneginf(before)
        stages.append(_stage(name, scores, newly_removed))
    return stages


def _stage(name: str, scores: torch.Tensor, removed: torch.Tensor) -> Stage:
    return Stage(
        name=name,
        logits=scores[0],
        probs=torch.softmax(scores[0], dim=-1),
        removed_ids=removed[0].nonzero().flatten(),
    )


def final_scores(logits: torch.Tensor, input_ids: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """The processed scores (1, vocab) without keeping intermediate stages (the fast path)."""
    scores, ids = _as_batch(logits, input_ids)
    for _, processor in build_processors(settings):
        scores = processor(ids, scores)
    return scores


def choose(
    scores: torch.Tensor, settings: SamplingSettings, generator: torch.Generator | None
) -> torch.Tensor:
    """Greedy argmax or one multinomial draw from softmax(scores) (1, vocab), as generate does;
    the chosen id stays on the device as a (1,) tensor (no host copy).

    A torch.Generator seeded with s draws the same tokens as `torch.manual_seed(s)` + generate.
    """
    if settings.greedy:
        return scores.argmax(dim=-1).reshape(1)
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).reshape(1)


def choose_token(scores: torch.Tensor, settings: SamplingSettings, generator: torch.Generator | None) -> int:
    """`choose` as a Python int."""
    return int(choose(scores, settings, generator))


def seeded_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A private RNG: one session's draws never disturb another's."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def with_changes(settings: SamplingSettings, **changes: Any) -> SamplingSettings:
    """A validated copy with some fields changed."""
    return validate_settings(replace(settings, **changes))

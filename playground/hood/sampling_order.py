"""Sampling order, measured on the loaded model: temperature before the top-p cut, or after it.

    order = run(engine, ids, SamplingSettings(temperature=1.5, top_p=0.9))
    order.kept_before, order.kept_after     # the token ids each order keeps
    order.difference                        # total-variation distance between the two results
    hist = sample_histogram(engine, ids, settings, n=2000, seed=0)
    hist.counts[token_id], hist.probs[token_id], hist.tv   # drawn N times vs the probabilities

`generate` applies temperature first, then top-k, then top-p: the cut is taken on the tempered
distribution, so a high temperature lets more tokens through the same p. Applying the cut to the
raw distribution and the temperature afterwards keeps a different set and gives it other
probabilities. Both orders are the engine's own sampling chain (engine/sampling.py) with its
`order` changed; the draws are the chain's final distribution sampled with a seeded generator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.sampling import SamplingSettings, sampling_stages, seeded_generator, validate_settings
from playground.errors import PlaygroundError
from playground.hood.common import Lesson, require, whole_in_range
from playground.messages import Message

MAX_DRAWS = 5000
CHECKPOINTS = (10, 30, 100, 300, 1000, 3000, 5000)  # draws after which the TV distance is recorded
FILTERS = ("top_k", "top_p", "min_p", "typical_p")  # the cuts temperature can go before or after


@dataclass
class SamplingOrder:
    """One position's distribution through the chain in both orders (temperature first: generate's)."""

    ids: list[int]  # the prefix the next token follows
    settings: SamplingSettings  # generate's order (temperature before the cuts)
    raw: torch.Tensor  # (vocab,) the model's own probabilities
    before: torch.Tensor  # (vocab,) temperature applied before the cuts, then sampled from
    after: torch.Tensor  # (vocab,) the cuts on the raw distribution, temperature after
    phase: str = ""

    @property
    def kept_before(self) -> set[int]:
        return set((self.before > 0).nonzero().flatten().tolist())

    @property
    def kept_after(self) -> set[int]:
        return set((self.after > 0).nonzero().flatten().tolist())

    @property
    def difference(self) -> float:
        """Total-variation distance between the two final distributions (0: the same)."""
        return total_variation(self.before, self.after)

    def top(self, n: int = 12) -> list[int]:
        """The tokens to show: the most likely under either order (and the raw), best first."""
        score = torch.maximum(torch.maximum(self.before, self.after), self.raw)
        return torch.topk(score, min(n, score.numel())).indices.tolist()


@dataclass
class Histogram:
    """N seeded draws from the chain's final distribution, against its probabilities."""

    n: int
    seed: int
    probs: dict[int, float] = field(default_factory=dict)  # token id -> probability (kept tokens)
    counts: dict[int, int] = field(default_factory=dict)  # token id -> times drawn
    tv_by_draws: list[tuple[int, float]] = field(default_factory=list)  # (draws so far, TV distance)

    @property
    def tv(self) -> float:
        """Total-variation distance of the empirical frequencies from the probabilities."""
        return self.tv_by_draws[-1][1] if self.tv_by_draws else 1.0


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """Half the L1 distance between two distributions over the same support."""
    return float((p.double() - q.double()).abs().sum() / 2)


def orders(settings: SamplingSettings) -> tuple[SamplingSettings, SamplingSettings]:
    """(temperature before the cuts: generate's order, temperature after them)."""
    chain = [name for name in settings.order if name != "temperature"]
    first = [name for name in chain if name not in FILTERS]
    cuts = [name for name in chain if name in FILTERS]
    before = SamplingSettings(**{**settings.to_dict(), "order": (*first, "temperature", *cuts)})
    after = SamplingSettings(**{**settings.to_dict(), "order": (*first, *cuts, "temperature")})
    return before, after


def run(
    lm: Engine, ids: Sequence[int], settings: SamplingSettings, control: Control | None = None
) -> SamplingOrder:
    """The next-token distribution after ids, through the chain with temperature before the cuts and
    after them (one forward of the model)."""
    settings = _checked(settings)
    rows, _ = require(lm).sequence(control=control).advance(list(ids))
    before, after = orders(settings)
    raw = torch.softmax(rows[-1].float().cpu(), dim=-1)
    first = sampling_stages(rows[-1].cpu(), list(ids), before)[-1].probs
    second = sampling_stages(rows[-1].cpu(), list(ids), after)[-1].probs
    phase = Message("hood.sampling_order.phase", "both orders computed")
    return SamplingOrder(list(ids), before, raw, first, second, phase=phase)


def sample_histogram(
    lm: Engine,
    prompt_ids: Sequence[int],
    settings: SamplingSettings,
    n: int,
    seed: int = 0,
    control: Control | None = None,
) -> Histogram:
    """Draw the next token n times (seeded) from the chain's final distribution after prompt_ids."""
    order = run(lm, prompt_ids, settings, control)
    return run_to_end(draw(order.before, n, seed))


def draw(probs: torch.Tensor, n: int, seed: int = 0) -> Iterator[Histogram]:
    """n seeded draws from probs (vocab,), yielding the histogram at each checkpoint."""
    whole_in_range(n, 1, MAX_DRAWS, Message("hood.name.draws", "Draws (N)"))
    generator = seeded_generator(seed, torch.device("cpu"))
    kept = (probs > 0).nonzero().flatten()
    histogram = Histogram(n, seed, dict(zip(kept.tolist(), probs[kept].tolist(), strict=True)))
    counts = torch.zeros_like(probs, dtype=torch.float64)
    done = 0
    for checkpoint in [c for c in CHECKPOINTS if c < n] + [n]:
        drawn = torch.multinomial(probs, checkpoint - done, replacement=True, generator=generator)
        counts += torch.bincount(drawn, minlength=probs.numel())
        done = checkpoint
        histogram.tv_by_draws.append((done, total_variation(counts / done, probs)))
        histogram.counts = {int(i): int(counts[i]) for i in counts.nonzero().flatten()}
        yield histogram
    return histogram


def iter_run(
    lm: Engine,
    ids: Sequence[int],
    settings: SamplingSettings,
    n: int = 2000,
    seed: int = 0,
    control: Control | None = None,
) -> Iterator[SamplingOrder | Histogram]:
    """The lesson's run: both orders (one forward), then n draws with progress."""
    whole_in_range(n, 1, MAX_DRAWS, Message("hood.name.draws", "Draws (N)"))
    order = run(lm, ids, settings, control)
    yield order
    histogram = None
    for histogram in draw(order.before, n, seed):
        yield histogram
    return order, histogram


def _checked(settings: SamplingSettings) -> SamplingSettings:
    settings = validate_settings(settings)
    if settings.greedy:
        raise PlaygroundError(
            "Temperature 0 is greedy: there is nothing to sample. Use a temperature above 0.",
            key="hood.sampling_order.error.greedy",
        )
    return settings


LESSON = Lesson("sampling_order", Message("hood.sampling_order.title", "Sampling order"), (), iter_run)

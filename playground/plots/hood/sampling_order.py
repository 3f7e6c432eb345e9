"""Figures of the lesson "Sampling order" (playground/hood/sampling_order.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import (
    CACHED,
    DECODE,
    MASKED_SOLID,
    RECOMPUTED,
    Series,
    bar_figure,
    line_figure,
)

PROB = "%{x}: %{y:.4f}"


def orders_figure(
    labels: Sequence[str], raw: Sequence[float], before: Sequence[float], after: Sequence[float]
) -> go.Figure:
    """The same tokens' probabilities: the model's own, temperature before the cut, after it."""
    return bar_figure(
        [
            Series("the model's own (raw)", labels, raw, MASKED_SOLID, PROB),
            Series("temperature, then the cut (generate's order)", labels, before, CACHED, PROB),
            Series("the cut, then temperature", labels, after, RECOMPUTED, PROB),
        ],
        "next token (✂ = kept in one order only)",
        "probability",
        340,
    )


def histogram_figure(
    labels: Sequence[str], probs: Sequence[float], frequencies: Sequence[float], n: int
) -> go.Figure:
    """Probability vs how often each token was drawn in n draws."""
    return bar_figure(
        [
            Series("probability (after the chain)", labels, probs, CACHED, PROB),
            Series(f"frequency in {n:,} draws", labels, frequencies, DECODE, PROB),
        ],
        "next token",
        "share",
    )


def tv_figure(draws: Sequence[int], tv: Sequence[float]) -> go.Figure:
    """The total-variation distance of the frequencies from the probabilities as draws add up."""
    return line_figure(
        [Series("TV(frequencies, probabilities)", draws, tv, DECODE, "%{x:,} draws: TV %{y:.3f}")],
        "draws",
        "total-variation distance",
        log=True,
    )

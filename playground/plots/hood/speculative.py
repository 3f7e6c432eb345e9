"""Figures of the lesson "Speculative decoding" (playground/hood/speculative.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, BONUS, RECOMPUTED, REJECTED, Series, bar_figure, line_figure


def acceptance_figure(drafted: Sequence[int], accepted: Sequence[int], bonus: Sequence[bool]) -> go.Figure:
    """Per round: accepted drafts (green), rejected (red) and the model's own bonus token (blue)."""
    rounds = list(range(1, len(drafted) + 1))
    rejected = [d - a for d, a in zip(drafted, accepted, strict=True)]
    hover = "round %{x}: %{y}"
    return bar_figure(
        [
            Series("accepted drafts", rounds, accepted, ACCEPTED, hover),
            Series("rejected", rounds, rejected, REJECTED, hover),
            Series("bonus (the model's own token)", rounds, [int(b) for b in bonus], BONUS, hover),
        ],
        "round (one forward of the model each)",
        "tokens",
        barmode="stack",
    )


def speed_figure(
    plain_times: Sequence[float], spec_times: Sequence[float], spec_tokens: Sequence[int]
) -> go.Figure:
    """Tokens out against seconds: plain decoding (one per forward) vs speculative (several per round)."""
    hover = "%{x:.2f} s: %{y} tokens"
    plain = range(1, len(plain_times) + 1)
    return line_figure(
        [
            Series("plain decoding", plain_times, plain, RECOMPUTED, hover, mode="lines", shape="hv"),
            Series("speculative", spec_times, spec_tokens, ACCEPTED, hover, shape="hv"),
        ],
        "seconds",
        "tokens out",
        zero=True,
    )

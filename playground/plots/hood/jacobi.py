"""Figures of the lesson "Why not all at once" (playground/hood/jacobi.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, CACHED, Series, bar_figure, line_figure


def progress_figure(final: Sequence[int], n: int) -> go.Figure:
    """Tokens known to be right after each forward: Jacobi's final prefix per round against plain
    decoding's one token per forward (the diagonal)."""
    forwards = list(range(1, n + 1))
    rounds = list(range(1, len(final) + 1))
    fig = line_figure(
        [
            Series("plain: 1 token per forward", forwards, forwards, CACHED, "forward %{x}: %{y}"),
            Series("Jacobi: final after each round", rounds, final, ACCEPTED, "round %{x}: %{y} final"),
        ],
        "forwards of the model after the prompt",
        "tokens final",
        height=280,
        zero=True,
    )
    fig.update_traces(selector=0, line={"dash": "dash", "width": 3})  # visible where the lines coincide
    return fig


def time_figure(round_seconds: Sequence[float], step_seconds: Sequence[float], n: int) -> go.Figure:
    """Model time of each Jacobi round (n + 1 tokens at once) and of each plain decode step (one)."""
    return bar_figure(
        [
            Series(
                "plain step (1 token)",
                list(range(2, len(step_seconds) + 2)),
                [s * 1000 for s in step_seconds],
                CACHED,
                "step %{x}: %{y:.1f} ms",
            ),
            Series(
                f"Jacobi round ({n + 1} tokens)",
                list(range(1, len(round_seconds) + 1)),
                [s * 1000 for s in round_seconds],
                ACCEPTED,
                "round %{x}: %{y:.1f} ms",
            ),
        ],
        "forward (plain: token number; Jacobi: round)",
        "ms",
        height=280,
    )

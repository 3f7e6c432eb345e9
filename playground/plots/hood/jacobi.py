"""Figures of the lesson "Why not all at once" (playground/hood/jacobi.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, CACHED, Series, bar_figure, line_figure
from playground.ui.i18n import DEFAULT, t


def progress_figure(final: Sequence[int], n: int, lang: str = DEFAULT) -> go.Figure:
    """Tokens known to be right after each forward: Jacobi's final prefix per round against plain
    decoding's one token per forward (the diagonal)."""
    forwards = list(range(1, n + 1))
    rounds = list(range(1, len(final) + 1))
    fig = line_figure(
        [
            Series(
                t("hood.jacobi.plot.plain", lang),
                forwards,
                forwards,
                CACHED,
                t("hood.jacobi.plot.forward_hover", lang),
            ),
            Series(
                t("hood.jacobi.plot.jacobi", lang),
                rounds,
                final,
                ACCEPTED,
                t("hood.jacobi.plot.final_hover", lang),
            ),
        ],
        t("hood.jacobi.plot.forwards", lang),
        t("hood.jacobi.plot.final", lang),
        height=280,
        zero=True,
    )
    fig.update_traces(selector=0, line={"dash": "dash", "width": 3})  # visible where the lines coincide
    return fig


def time_figure(
    round_seconds: Sequence[float], step_seconds: Sequence[float], n: int, lang: str = DEFAULT
) -> go.Figure:
    """Model time of each Jacobi round (n + 1 tokens at once) and of each plain decode step (one)."""
    return bar_figure(
        [
            Series(
                t("hood.jacobi.plot.step", lang),
                list(range(2, len(step_seconds) + 2)),
                [s * 1000 for s in step_seconds],
                CACHED,
                t("hood.jacobi.plot.step_hover", lang),
            ),
            Series(
                t("hood.jacobi.plot.round", lang, tokens=n + 1),
                list(range(1, len(round_seconds) + 1)),
                [s * 1000 for s in round_seconds],
                ACCEPTED,
                t("hood.jacobi.plot.round_hover", lang),
            ),
        ],
        t("hood.jacobi.plot.forward", lang),
        "ms",
        height=280,
    )

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
from playground.ui.i18n import DEFAULT, t

PROB = "%{x}: %{y:.4f}"


def orders_figure(
    labels: Sequence[str],
    raw: Sequence[float],
    before: Sequence[float],
    after: Sequence[float],
    lang: str = DEFAULT,
) -> go.Figure:
    """The same tokens' probabilities: the model's own, temperature before the cut, after it."""
    return bar_figure(
        [
            Series(t("hood.order.plot.raw", lang), labels, raw, MASKED_SOLID, PROB),
            Series(t("hood.order.plot.before", lang), labels, before, CACHED, PROB),
            Series(t("hood.order.plot.after", lang), labels, after, RECOMPUTED, PROB),
        ],
        t("hood.order.plot.next_cut", lang),
        t("hood.order.plot.probability", lang),
        340,
    )


def histogram_figure(
    labels: Sequence[str], probs: Sequence[float], frequencies: Sequence[float], n: int, lang: str = DEFAULT
) -> go.Figure:
    """Probability vs how often each token was drawn in n draws."""
    return bar_figure(
        [
            Series(t("hood.order.plot.chain", lang), labels, probs, CACHED, PROB),
            Series(t("hood.order.plot.frequency", lang, n=n), labels, frequencies, DECODE, PROB),
        ],
        t("hood.order.plot.next", lang),
        t("hood.order.plot.share", lang),
    )


def tv_figure(draws: Sequence[int], tv: Sequence[float], lang: str = DEFAULT) -> go.Figure:
    """The total-variation distance of the frequencies from the probabilities as draws add up."""
    hover = t("hood.order.plot.tv_hover", lang)
    return line_figure(
        [Series(t("hood.order.plot.tv_name", lang), draws, tv, DECODE, hover)],
        t("hood.order.plot.draws", lang),
        t("hood.order.plot.tv_axis", lang),
        log=True,
    )

"""Figures of the lesson "Speculative decoding" (playground/hood/speculative.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, BONUS, RECOMPUTED, REJECTED, Series, bar_figure, line_figure
from playground.ui.i18n import DEFAULT, t


def acceptance_figure(
    drafted: Sequence[int], accepted: Sequence[int], bonus: Sequence[bool], lang: str = DEFAULT
) -> go.Figure:
    """Per round: accepted drafts (green), rejected (red) and the model's own bonus token (blue)."""
    rounds = list(range(1, len(drafted) + 1))
    rejected = [d - a for d, a in zip(drafted, accepted, strict=True)]
    hover = t("hood.spec.plot.round_hover", lang)
    bonuses = [int(b) for b in bonus]
    return bar_figure(
        [
            Series(t("hood.spec.plot.accepted", lang), rounds, accepted, ACCEPTED, hover),
            Series(t("hood.spec.plot.rejected", lang), rounds, rejected, REJECTED, hover),
            Series(t("hood.spec.plot.bonus", lang), rounds, bonuses, BONUS, hover),
        ],
        t("hood.spec.plot.rounds", lang),
        t("hood.spec.plot.tokens", lang),
        barmode="stack",
    )


def speed_figure(
    plain_times: Sequence[float], spec_times: Sequence[float], spec_tokens: Sequence[int], lang: str = DEFAULT
) -> go.Figure:
    """Tokens out against seconds: plain decoding (one per forward) vs speculative (several per round)."""
    hover = t("hood.spec.plot.speed_hover", lang)
    plain = range(1, len(plain_times) + 1)
    return line_figure(
        [
            Series(
                t("hood.spec.plot.plain", lang),
                plain_times,
                plain,
                RECOMPUTED,
                hover,
                mode="lines",
                shape="hv",
            ),
            Series(
                t("hood.spec.plot.speculative", lang), spec_times, spec_tokens, ACCEPTED, hover, shape="hv"
            ),
        ],
        t("hood.spec.plot.seconds", lang),
        t("hood.spec.plot.tokens_out", lang),
        zero=True,
    )

"""Figures of the lesson "Batching" (playground/hood/batching.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import CACHED, RECOMPUTED, Series, bar_figure, style
from playground.ui.i18n import DEFAULT, t


def batch_throughput_figure(solo: float, batch: float, size: int, lang: str = DEFAULT) -> go.Figure:
    """Total tokens/s one by one vs in one batch."""
    fig = go.Figure()
    fig.add_bar(
        x=[t("hood.batch.plot.solo", lang), t("hood.batch.plot.batch", lang, size=size)],
        y=[solo, batch],
        marker_color=[RECOMPUTED, CACHED],
        text=[f"{solo:,.1f} tok/s", f"{batch:,.1f} tok/s"],
        textposition="auto",
        hovertemplate="%{x}: %{y:,.1f} tok/s<extra></extra>",
    )
    fig.update_yaxes(title_text=t("hood.batch.plot.tok_s", lang))
    return style(fig, 300, showlegend=False)


def batch_latency_figure(
    solo_finished: Sequence[float], batch_finished: Sequence[float], lang: str = DEFAULT
) -> go.Figure:
    """When each sequence was done: one by one (it waits for those before it) vs in the batch."""
    names = [f"#{i}" for i in range(1, len(solo_finished) + 1)]
    hover = t("hood.batch.plot.done_hover", lang)
    return bar_figure(
        [
            Series(t("hood.batch.plot.solo", lang), names, solo_finished, RECOMPUTED, hover),
            Series(t("hood.batch.plot.in_batch", lang), names, batch_finished, CACHED, hover),
        ],
        t("hood.batch.plot.sequence", lang),
        t("hood.batch.plot.until_done", lang),
    )

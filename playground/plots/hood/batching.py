"""Figures of the lesson "Batching" (playground/hood/batching.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import CACHED, RECOMPUTED, Series, bar_figure, style


def batch_throughput_figure(solo: float, batch: float, size: int) -> go.Figure:
    """Total tokens/s one by one vs in one batch."""
    fig = go.Figure()
    fig.add_bar(
        x=["one by one", f"one batch of {size}"],
        y=[solo, batch],
        marker_color=[RECOMPUTED, CACHED],
        text=[f"{solo:,.1f} tok/s", f"{batch:,.1f} tok/s"],
        textposition="auto",
        hovertemplate="%{x}: %{y:,.1f} tok/s<extra></extra>",
    )
    fig.update_yaxes(title_text="tok/s, all sequences")
    return style(fig, 300, showlegend=False)


def batch_latency_figure(solo_finished: Sequence[float], batch_finished: Sequence[float]) -> go.Figure:
    """When each sequence was done: one by one (it waits for those before it) vs in the batch."""
    names = [f"#{i}" for i in range(1, len(solo_finished) + 1)]
    hover = "sequence %{x} done after %{y:.2f} s"
    return bar_figure(
        [
            Series("one by one", names, solo_finished, RECOMPUTED, hover),
            Series("in one batch", names, batch_finished, CACHED, hover),
        ],
        "sequence",
        "s until done",
    )

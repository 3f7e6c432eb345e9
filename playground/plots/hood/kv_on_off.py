"""Figures of the lesson "KV cache on vs off" (playground/hood/kv_on_off.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.plots.hood.style import CACHED, RECOMPUTED, Series, line_figure, style
from playground.ui.i18n import DEFAULT, t


def step_latency_figure(
    cached_prefill: float,
    recomputed_prefill: float,
    cached_steps: Sequence[float],
    recomputed_steps: Sequence[float],
    lang: str = DEFAULT,
) -> go.Figure:
    """Left: the prefill (time to first token) of each path; right: every decode step's time (ms)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.22, 0.78],
        horizontal_spacing=0.09,
        subplot_titles=(t("hood.kv.plot.prefill", lang), t("hood.kv.plot.decode", lang)),
    )
    fig.add_bar(
        x=[t("hood.kv.plot.cache", lang), t("hood.kv.plot.no_cache", lang)],
        y=[cached_prefill * 1000, recomputed_prefill * 1000],
        row=1,
        col=1,
        marker_color=[CACHED, RECOMPUTED],
        showlegend=False,
        hovertemplate="%{x}: %{y:,.0f} ms<extra></extra>",
    )
    steps = list(range(2, len(cached_steps) + 2))
    for name, values, color in (
        (t("hood.kv.plot.cached_steps", lang), cached_steps, CACHED),
        (t("hood.kv.plot.recomputed_steps", lang), recomputed_steps, RECOMPUTED),
    ):
        fig.add_scatter(
            x=steps,
            y=[v * 1000 for v in values],
            name=name,
            mode="lines+markers",
            line_color=color,
            row=1,
            col=2,
            hovertemplate=t("hood.kv.plot.step_hover", lang) + "<extra></extra>",
        )
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    dtick = 1 if len(steps) <= 16 else None
    fig.update_xaxes(title_text=t("hood.kv.plot.token", lang), row=1, col=2, tickformat="d", dtick=dtick)
    return style(
        fig, 340, margin={"l": 60, "r": 20, "t": 70, "b": 50}, legend={"orientation": "h", "y": -0.25}
    )


def cumulative_figure(cached: Sequence[float], recomputed: Sequence[float], lang: str = DEFAULT) -> go.Figure:
    """Seconds spent after each token, prefill included: a line vs a parabola."""
    hover = t("hood.kv.plot.cumulative_hover", lang)
    return line_figure(
        [
            Series(t("hood.kv.plot.with_cache", lang), range(1, len(cached) + 1), cached, CACHED, hover),
            Series(
                t("hood.kv.plot.without", lang), range(1, len(recomputed) + 1), recomputed, RECOMPUTED, hover
            ),
        ],
        t("hood.kv.plot.generated", lang),
        t("hood.kv.plot.seconds", lang),
        zero=True,
    )


def cache_bytes_figure(
    lengths: Sequence[int], measured: Sequence[int], formula: Sequence[int], lang: str = DEFAULT
) -> go.Figure:
    """The real cache's bytes after each forward (markers) on the KV formula (line), in MiB."""
    fig = go.Figure()
    fig.add_scatter(
        x=list(lengths),
        y=[b / 2**20 for b in formula],
        name=t("hood.kv.plot.formula", lang),
        mode="lines",
        line={"color": "rgba(128,128,128,0.9)", "width": 6},
        customdata=list(formula),
        hovertemplate=t("hood.kv.plot.formula_hover", lang) + "<extra></extra>",
    )
    fig.add_scatter(
        x=list(lengths),
        y=[b / 2**20 for b in measured],
        name=t("hood.kv.plot.measured", lang),
        mode="markers",
        marker={"color": CACHED, "size": 7},
        customdata=list(measured),
        hovertemplate=t("hood.kv.plot.measured_hover", lang) + "<extra></extra>",
    )
    fig.update_xaxes(title_text=t("hood.kv.plot.in_cache", lang))
    fig.update_yaxes(title_text="MiB")
    return style(fig, 300)

"""What every "Under the hood" figure shares: colours, the style, and the same-shape builders.

Styling works on light and dark pages: transparent backgrounds, grey grid lines, no font
colour set (a dark template applied later takes over), colours readable on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

CACHED = "#2a7de1"
RECOMPUTED = "#e4572e"
PREFILL = "#9467bd"
DECODE = "#2ca02c"
ACCEPTED = "#2ca02c"
REJECTED = "#d62728"
BONUS = "#2a7de1"
MASKED = "rgba(128, 128, 128, 0.30)"
MASKED_SOLID = "rgb(150, 150, 150)"  # inside a colour scale (no transparency there)
MASK_VALUE = -0.08  # where a heatmap's colour scale draws future (masked) cells
GRID = "rgba(128, 128, 128, 0.25)"
COLORSCALE = "Viridis"
WEIGHT_TICKS = (0, 0.01, 0.05, 0.2, 0.5, 1)  # attention colours use sqrt(weight): faint weights stay visible


def style(fig: go.Figure, height: int, **layout: Any) -> go.Figure:
    """Transparent backgrounds, grey grid lines, a legend on top, compact margins."""
    defaults = {
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        # right-aligned above the plot: the component's label covers the top left corner
        "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"},
    }
    fig.update_layout(
        height=height,
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        hoverlabel={"namelength": -1},
        **{**defaults, **layout},
    )
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID, automargin=True)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID, automargin=True)
    return fig


@dataclass(frozen=True)
class Series:
    """One line (or bar set) of a figure: its legend name, values, colour and hover text."""

    name: str
    x: Sequence[Any]
    y: Sequence[float]
    color: str
    hover: str = "%{x}: %{y}"  # plotly hovertemplate (without the <extra> part)
    mode: str = "lines+markers"
    shape: str = "linear"  # "hv": a step line


def line_figure(
    series: Sequence[Series],
    x_title: str,
    y_title: str,
    height: int = 300,
    *,
    log: bool = False,
    zero: bool = False,
    **layout: Any,
) -> go.Figure:
    """Lines over one x axis (log-log when log; the y axis from 0 when zero)."""
    fig = go.Figure()
    for s in series:
        fig.add_scatter(
            x=list(s.x),
            y=list(s.y),
            name=s.name,
            mode=s.mode,
            line={"color": s.color, "shape": s.shape},
            hovertemplate=s.hover + "<extra></extra>",
        )
    axis = {"type": "log"} if log else {}
    fig.update_xaxes(title_text=x_title, **axis)
    fig.update_yaxes(title_text=y_title, **axis, **({"rangemode": "tozero"} if zero else {}))
    return style(fig, height, **layout)


def bar_figure(
    series: Sequence[Series],
    x_title: str,
    y_title: str,
    height: int = 300,
    *,
    barmode: str = "group",
    **layout: Any,
) -> go.Figure:
    """Bars over one x axis (grouped, or stacked with barmode="stack")."""
    fig = go.Figure()
    for s in series:
        fig.add_bar(
            x=list(s.x),
            y=list(s.y),
            name=s.name,
            marker_color=s.color,
            hovertemplate=s.hover + "<extra></extra>",
        )
    fig.update_layout(barmode=barmode)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return style(fig, height, **layout)

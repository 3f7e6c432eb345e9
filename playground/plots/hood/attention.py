"""Figures of the lesson "Attention and the causal mask" (playground/hood/attention.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.colors as pcolors
import plotly.graph_objects as go

from playground.plots.hood.style import (
    CACHED,
    MASK_VALUE,
    MASKED,
    MASKED_SOLID,
    WEIGHT_TICKS,
    style,
)
from playground.ui.i18n import DEFAULT, t


def _sqrt_colorbar(masked: bool = False, lang: str = DEFAULT) -> dict[str, Any]:
    """Ticks at weights on the sqrt colour scale; with the masked band below 0, the smallest weight
    ticks (0, 0.01) would overlap its label, so they give way to it."""
    ticks = [t for t in WEIGHT_TICKS if t >= 0.05] if masked else list(WEIGHT_TICKS)
    values = [math.sqrt(t) for t in ticks]
    labels = [str(t) for t in ticks]
    if masked:
        values, labels = [MASK_VALUE, *values], [t("hood.attn.plot.masked", lang), *labels]
    return {"title": {"text": t("hood.attn.plot.weight", lang)}, "tickvals": values, "ticktext": labels}


def _masked_colorscale() -> list[list[Any]]:
    """Grey for MASK_VALUE (future cells), then Viridis from 0 to 1: one trace draws both."""
    edge = -MASK_VALUE / (1 - MASK_VALUE)
    viridis = pcolors.sequential.Viridis
    stops = [[edge + (1 - edge) * i / (len(viridis) - 1), c] for i, c in enumerate(viridis)]
    return [[0, MASKED_SOLID], [edge, MASKED_SOLID], *stops]


def attention_grid_figure(thumbnails: Any, sink: Any, lang: str = DEFAULT) -> go.Figure:
    """Every head of every layer as a thumbnail: x = layer, y = head; click one to enlarge it.
    thumbnails (layers, heads, s, s) array-like, future cells NaN. One float32 trace (about 150,000
    cells) whose x and y are the layer and the head plus a fraction: hover rounds them, and a
    click anywhere on a thumbnail, masked half included, names its layer and head."""
    maps = np.asarray(thumbnails, dtype=np.float32)
    layers, heads, size = maps.shape[0], maps.shape[1], maps.shape[2]
    step = size + 1  # one blank cell between thumbnails
    tiles = np.full((heads, step, layers, step), np.nan, dtype=np.float32)
    tiles[:, :size, :, :size] = np.where(
        np.isnan(maps), MASK_VALUE, np.sqrt(np.clip(maps, 0, None))
    ).transpose(1, 2, 0, 3)
    z = tiles.reshape(heads * step, layers * step)[:-1, :-1]
    offsets = (np.arange(step) - (size - 1) / 2) / step  # within ±0.5 of the tile's centre
    x = (np.arange(1, layers + 1)[:, None] + offsets[None, :]).ravel()[:-1]
    y = (np.arange(1, heads + 1)[:, None] + offsets[None, :]).ravel()[:-1]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x.astype(np.float32),
            y=y.astype(np.float32),
            colorscale=_masked_colorscale(),
            zmin=MASK_VALUE,
            zmax=1,
            hoverongaps=False,
            colorbar=_sqrt_colorbar(masked=True, lang=lang),
            hovertemplate=t("hood.attn.plot.grid_hover", lang),
        )
    )
    fig.update_xaxes(
        tickvals=list(range(1, layers + 1)),
        title_text=t("hood.attn.plot.layer", lang),
        showgrid=False,
        zeroline=False,
    )
    fig.update_yaxes(
        tickvals=list(range(1, heads + 1)),
        ticktext=[f"h{n}" for n in range(1, heads + 1)],
        title_text=t("hood.attn.plot.head", lang),
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    fig.add_annotation(  # the sink column is the left edge of every thumbnail
        x=0,
        y=1.0,
        xref="paper",
        yref="paper",
        yanchor="bottom",
        xanchor="left",
        showarrow=False,
        text=t("hood.attn.plot.sink_note", lang),
        font={"size": 11},
    )
    return style(fig, max(220, 34 * heads + 100), margin={"l": 50, "r": 10, "t": 28, "b": 45})


def attention_map_figure(
    matrix: Sequence[Sequence[float]], tokens: Sequence[str], title: str, sink: float, lang: str = DEFAULT
) -> go.Figure:
    """One head's full causal triangle: rows are queries, columns keys; future keys drawn as
    masked; the first column labelled as the attention sink when it holds much of the weight."""
    n = len(tokens)
    labels = [f"{i}·{t}" for i, t in enumerate(tokens)]
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    weights = np.where(future, np.float32(0), np.asarray(matrix, dtype=np.float32))
    colours = np.where(future, np.float32(MASK_VALUE), np.sqrt(np.clip(weights, 0, None)))
    fig = go.Figure()
    fig.add_heatmap(  # future cells are MASK_VALUE: grey, weight 0
        z=colours,
        x=labels,
        y=labels,
        customdata=weights,
        colorscale=_masked_colorscale(),
        zmin=MASK_VALUE,
        zmax=1,
        colorbar=_sqrt_colorbar(masked=True, lang=lang),
        hovertemplate=t("hood.attn.plot.map_hover", lang) + "<extra></extra>",
    )
    if n > 1:
        fig.add_annotation(
            x=labels[0],
            y=1.0,
            yref="paper",
            yanchor="bottom",
            xanchor="left",
            showarrow=False,
            text=t("hood.attn.plot.sink", lang, share=sink),
            bgcolor="rgba(128,128,128,0.2)",
        )
    fig.update_xaxes(title_text=t("hood.attn.plot.key", lang), tickangle=-60, showgrid=False, type="category")
    fig.update_yaxes(
        title_text=t("hood.attn.plot.query", lang), autorange="reversed", showgrid=False, type="category"
    )
    fig.update_yaxes(scaleanchor="x", constrain="domain")  # square cells: a true triangle
    fig.update_xaxes(constrain="domain")
    return style(
        fig,
        560,
        title={"text": title, "x": 0.99, "xanchor": "right", "y": 0.98, "font": {"size": 14}},
        margin={"l": 80, "r": 10, "t": 70, "b": 80},
    )


def query_row_figure(
    weights: Sequence[float], tokens: Sequence[str], position: int, title: str, lang: str = DEFAULT
) -> go.Figure:
    """The query at `position` over every key: earlier keys' weights, later keys shaded as masked."""
    labels = [f"{i}·{t}" for i, t in enumerate(tokens)]
    visible = list(weights[: position + 1])
    fig = go.Figure()
    fig.add_bar(
        x=labels[: position + 1],
        y=visible,
        marker_color=CACHED,
        name=t("hood.attn.plot.weight", lang),
        hovertemplate=t("hood.attn.plot.row_hover", lang) + "<extra></extra>",
    )
    if position + 1 < len(labels):
        fig.add_bar(
            x=labels[position + 1 :],
            y=[0] * (len(labels) - position - 1),
            name=t("hood.attn.plot.future", lang),
            marker_color=MASKED,
            hovertemplate=t("hood.attn.plot.future_hover", lang) + "<extra></extra>",
        )
        fig.add_vrect(
            x0=position + 0.5,
            x1=len(labels) - 0.5,
            fillcolor=MASKED,
            line_width=0,
            annotation_text=t("hood.attn.plot.future_note", lang),
            annotation_position="top left",
        )
    fig.update_xaxes(
        title_text=t("hood.attn.plot.key_short", lang),
        tickangle=-60,
        type="category",
        categoryarray=labels,
        range=[-0.5, len(labels) - 0.5],
    )
    fig.update_yaxes(title_text=t("hood.attn.plot.row_weight", lang), range=[0, max([*visible, 0.05]) * 1.1])
    return style(fig, 300, title={"text": title, "x": 0.01, "font": {"size": 14}}, showlegend=False)

"""Plotly figures for the "Under the hood" tab, built from plain lists (no model, no gradio).

Styling works on light and dark pages: transparent backgrounds, grey grid lines, no font
colour set (a dark template applied later takes over), colours readable on both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.colors as pcolors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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


# --- KV cache on vs off -------------------------------------------------------------------------


def step_latency_figure(
    cached_prefill: float,
    recomputed_prefill: float,
    cached_steps: Sequence[float],
    recomputed_steps: Sequence[float],
) -> go.Figure:
    """Left: the prefill (time to first token) of each path; right: every decode step's time (ms)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.22, 0.78],
        horizontal_spacing=0.09,
        subplot_titles=("prefill (time to first token)", "each decode step"),
    )
    fig.add_bar(
        x=["cache", "no cache"],
        y=[cached_prefill * 1000, recomputed_prefill * 1000],
        row=1,
        col=1,
        marker_color=[CACHED, RECOMPUTED],
        showlegend=False,
        hovertemplate="%{x}: %{y:,.0f} ms<extra></extra>",
    )
    steps = list(range(2, len(cached_steps) + 2))
    for name, values, color in (
        ("with the KV cache: one new token per forward", cached_steps, CACHED),
        ("without: the whole prefix every forward", recomputed_steps, RECOMPUTED),
    ):
        fig.add_scatter(
            x=steps,
            y=[v * 1000 for v in values],
            name=name,
            mode="lines+markers",
            line_color=color,
            row=1,
            col=2,
            hovertemplate="token %{x}: %{y:,.1f} ms<extra></extra>",
        )
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    fig.update_xaxes(title_text="token", row=1, col=2)
    return style(
        fig, 340, margin={"l": 60, "r": 20, "t": 70, "b": 50}, legend={"orientation": "h", "y": -0.25}
    )


def cumulative_figure(cached: Sequence[float], recomputed: Sequence[float]) -> go.Figure:
    """Seconds spent after each token, prefill included: a line vs a parabola."""
    fig = go.Figure()
    for name, values, color in (("with the KV cache", cached, CACHED), ("without", recomputed, RECOMPUTED)):
        fig.add_scatter(
            x=list(range(1, len(values) + 1)),
            y=list(values),
            name=name,
            mode="lines+markers",
            line_color=color,
            hovertemplate="after token %{x}: %{y:,.2f} s<extra></extra>",
        )
    fig.update_xaxes(title_text="tokens generated")
    fig.update_yaxes(title_text="seconds, cumulative", rangemode="tozero")
    return style(fig, 300)


def cache_bytes_figure(lengths: Sequence[int], measured: Sequence[int], formula: Sequence[int]) -> go.Figure:
    """The real cache's bytes after each forward (markers) on the KV formula (line), in MiB."""
    fig = go.Figure()
    fig.add_scatter(
        x=list(lengths),
        y=[b / 2**20 for b in formula],
        name="the KV tab's formula",
        mode="lines",
        line={"color": "rgba(128,128,128,0.9)", "width": 6},
        customdata=list(formula),
        hovertemplate="%{x} tokens: %{customdata:,} bytes (2 × layers × KV heads × head_dim × tokens × bytes)"
        "<extra></extra>",
    )
    fig.add_scatter(
        x=list(lengths),
        y=[b / 2**20 for b in measured],
        name="measured in the cache",
        mode="markers",
        marker={"color": CACHED, "size": 7},
        customdata=list(measured),
        hovertemplate="%{x} tokens: %{customdata:,} bytes (measured)<extra></extra>",
    )
    fig.update_xaxes(title_text="tokens in the cache")
    fig.update_yaxes(title_text="MiB")
    return style(fig, 300)


# --- prefill vs decode -------------------------------------------------------------------------


def throughput_figure(lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float]) -> go.Figure:
    """Tokens/s of prefill and of decode against the prompt length (log-log)."""
    fig = go.Figure()
    fig.add_scatter(
        x=list(lengths),
        y=list(prefill),
        name="prefill: read the prompt",
        mode="lines+markers",
        line_color=PREFILL,
        hovertemplate="%{x:,} tokens: %{y:,.0f} tok/s<extra></extra>",
    )
    fig.add_scatter(
        x=list(lengths),
        y=list(decode),
        name="decode: one token after it",
        mode="lines+markers",
        line_color=DECODE,
        hovertemplate="after %{x:,} tokens: %{y:,.1f} tok/s<extra></extra>",
    )
    fig.update_xaxes(type="log", title_text="prompt length (tokens)")
    fig.update_yaxes(type="log", title_text="tokens / s")
    return style(fig, 320)


def intensity_figure(lengths: Sequence[int], prefill: Sequence[float], decode: Sequence[float]) -> go.Figure:
    """Estimated FLOPs per byte moved (arithmetic intensity) of prefill and decode (log-log)."""
    fig = go.Figure()
    fig.add_scatter(
        x=list(lengths),
        y=list(prefill),
        name="prefill",
        mode="lines+markers",
        line_color=PREFILL,
        hovertemplate="%{x:,} tokens: %{y:,.1f} FLOP/byte<extra></extra>",
    )
    fig.add_scatter(
        x=list(lengths),
        y=list(decode),
        name="decode",
        mode="lines+markers",
        line_color=DECODE,
        hovertemplate="after %{x:,} tokens: %{y:,.2f} FLOP/byte<extra></extra>",
    )
    fig.update_xaxes(type="log", title_text="prompt length (tokens)")
    fig.update_yaxes(type="log", title_text="FLOPs per byte (estimated)")
    return style(fig, 320)


# --- attention ---------------------------------------------------------------------------------


def _sqrt_colorbar(masked: bool = False) -> dict[str, Any]:
    values = (
        [MASK_VALUE, *(math.sqrt(t) for t in WEIGHT_TICKS)]
        if masked
        else [math.sqrt(t) for t in WEIGHT_TICKS]
    )
    labels = ["masked", *(str(t) for t in WEIGHT_TICKS)] if masked else [str(t) for t in WEIGHT_TICKS]
    return {"title": {"text": "weight"}, "tickvals": values, "ticktext": labels}


def _masked_colorscale() -> list[list[Any]]:
    """Grey for MASK_VALUE (future cells), then Viridis from 0 to 1: one trace draws both."""
    edge = -MASK_VALUE / (1 - MASK_VALUE)
    viridis = pcolors.sequential.Viridis
    stops = [[edge + (1 - edge) * i / (len(viridis) - 1), c] for i, c in enumerate(viridis)]
    return [[0, MASKED_SOLID], [edge, MASKED_SOLID], *stops]


def attention_grid_figure(thumbnails: Any, sink: Any) -> go.Figure:
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
            colorbar=_sqrt_colorbar(masked=True),
            hovertemplate="layer %{x:.0f}, head %{y:.0f}<extra>click to enlarge</extra>",
        )
    )
    fig.update_xaxes(tickvals=list(range(1, layers + 1)), title_text="layer", showgrid=False, zeroline=False)
    fig.update_yaxes(
        tickvals=list(range(1, heads + 1)),
        ticktext=[f"h{n}" for n in range(1, heads + 1)],
        title_text="head",
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
        text="bright left edges: the first token soaks up attention (the sink)",
        font={"size": 11},
    )
    return style(fig, max(220, 34 * heads + 100), margin={"l": 50, "r": 10, "t": 28, "b": 45})


def attention_map_figure(
    matrix: Sequence[Sequence[float]], tokens: Sequence[str], title: str, sink: float
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
        colorbar=_sqrt_colorbar(masked=True),
        hovertemplate="query %{y}<br>key %{x}<br>weight %{customdata:.4f}<extra></extra>",
    )
    if n > 1:
        fig.add_annotation(
            x=labels[0],
            y=1.0,
            yref="paper",
            yanchor="bottom",
            xanchor="left",
            showarrow=False,
            text=f"↓ attention sink: the first token gets {sink:.0%} of the weight",
            bgcolor="rgba(128,128,128,0.2)",
        )
    fig.update_xaxes(title_text="key (what is looked at)", tickangle=-60, showgrid=False, type="category")
    fig.update_yaxes(title_text="query (who looks)", autorange="reversed", showgrid=False, type="category")
    fig.update_yaxes(scaleanchor="x", constrain="domain")  # square cells: a true triangle
    fig.update_xaxes(constrain="domain")
    return style(
        fig,
        560,
        title={"text": title, "x": 0.99, "xanchor": "right", "y": 0.98, "font": {"size": 14}},
        margin={"l": 80, "r": 10, "t": 70, "b": 80},
    )


def query_row_figure(weights: Sequence[float], tokens: Sequence[str], position: int, title: str) -> go.Figure:
    """The query at `position` over every key: earlier keys' weights, later keys shaded as masked."""
    labels = [f"{i}·{t}" for i, t in enumerate(tokens)]
    visible = list(weights[: position + 1])
    fig = go.Figure()
    fig.add_bar(
        x=labels[: position + 1],
        y=visible,
        marker_color=CACHED,
        name="weight",
        hovertemplate="key %{x}: %{y:.4f}<extra></extra>",
    )
    if position + 1 < len(labels):
        fig.add_bar(
            x=labels[position + 1 :],
            y=[0] * (len(labels) - position - 1),
            name="future: masked (weight 0)",
            marker_color=MASKED,
            hovertemplate="key %{x}: masked, weight 0<extra></extra>",
        )
        fig.add_vrect(
            x0=position + 0.5,
            x1=len(labels) - 0.5,
            fillcolor=MASKED,
            line_width=0,
            annotation_text="future tokens: masked",
            annotation_position="top left",
        )
    fig.update_xaxes(
        title_text="key",
        tickangle=-60,
        type="category",
        categoryarray=labels,
        range=[-0.5, len(labels) - 0.5],
    )
    fig.update_yaxes(title_text="attention weight", range=[0, max([*visible, 0.05]) * 1.1])
    return style(fig, 300, title={"text": title, "x": 0.01, "font": {"size": 14}}, showlegend=False)


# --- logit lens -------------------------------------------------------------------------------------


def lens_track_figure(
    tracks: Sequence[tuple[str, Sequence[float], Sequence[int]]], settles_at: int
) -> go.Figure:
    """Probability (top) and rank (bottom, log scale, 1 on top) of each tracked token after every
    layer; a line where the model's choice settles."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.5, 0.5])
    palette = [CACHED, RECOMPUTED, DECODE, PREFILL, "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    for i, (label, probs, ranks) in enumerate(tracks):
        color = palette[i % len(palette)]
        layers = list(range(1, len(probs) + 1))
        fig.add_scatter(
            x=layers,
            y=list(probs),
            name=label,
            mode="lines+markers",
            line_color=color,
            legendgroup=label,
            hovertemplate=f"{label}<br>layer %{{x}}: p = %{{y:.4f}}<extra></extra>",
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=layers,
            y=list(ranks),
            name=label,
            mode="lines+markers",
            line_color=color,
            legendgroup=label,
            showlegend=False,
            hovertemplate=f"{label}<br>layer %{{x}}: rank %{{y:,}}<extra></extra>",
            row=2,
            col=1,
        )
    fig.add_vline(x=settles_at, line_dash="dash", line_color="rgba(128,128,128,0.9)")
    fig.add_annotation(
        x=settles_at,
        y=1,
        yref="y domain",
        text=f"settles at layer {settles_at}",
        showarrow=False,
        xanchor="right",
        bgcolor="rgba(128,128,128,0.2)",
        row=1,
        col=1,
    )
    fig.update_yaxes(title_text="probability", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title_text="rank", type="log", autorange="reversed", row=2, col=1)
    fig.update_xaxes(title_text="after layer", dtick=1 if len(tracks[0][1]) <= 32 else None, row=2, col=1)
    return style(fig, 460)


def lens_top_figure(top: Sequence[Sequence[tuple[int, str, float]]]) -> go.Figure:
    """The classic logit-lens picture: each layer's most likely next tokens (id, piece, p),
    coloured by probability, the last layer on top; click a token to track it."""
    layers = len(top)
    fig = go.Figure(
        go.Heatmap(
            z=[[p for _, _, p in row] for row in top],
            x=[f"#{i}" for i in range(1, len(top[0]) + 1)],
            y=[f"layer {n}" for n in range(1, layers + 1)],
            text=[[piece for _, piece, _ in row] for row in top],
            texttemplate="%{text}",
            customdata=[[[token_id, piece] for token_id, piece, _ in row] for row in top],
            colorscale=COLORSCALE,
            zmin=0,
            zmax=1,
            colorbar={"title": {"text": "p"}},
            hovertemplate="%{y}, %{x}: %{customdata[1]} (id %{customdata[0]})<br>p = %{z:.4f}"
            "<extra>click to track</extra>",
        )
    )
    fig.update_yaxes(type="category", showgrid=False)
    fig.update_xaxes(side="top", showgrid=False)
    return style(fig, max(300, 20 * layers + 80), margin={"l": 70, "r": 10, "t": 40, "b": 10})


# --- speculative decoding ----------------------------------------------------------------------


def acceptance_figure(drafted: Sequence[int], accepted: Sequence[int], bonus: Sequence[bool]) -> go.Figure:
    """Per round: accepted drafts (green), rejected (red) and the model's own bonus token (blue)."""
    rounds = list(range(1, len(drafted) + 1))
    fig = go.Figure()
    fig.add_bar(x=rounds, y=list(accepted), name="accepted drafts", marker_color=ACCEPTED)
    fig.add_bar(
        x=rounds,
        y=[d - a for d, a in zip(drafted, accepted, strict=True)],
        name="rejected",
        marker_color=REJECTED,
    )
    fig.add_bar(x=rounds, y=[int(b) for b in bonus], name="bonus (the model's own token)", marker_color=BONUS)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="round (one forward of the model each)")
    fig.update_yaxes(title_text="tokens")
    return style(fig, 300)


def speed_figure(
    plain_times: Sequence[float], spec_times: Sequence[float], spec_tokens: Sequence[int]
) -> go.Figure:
    """Tokens out against seconds: plain decoding (one per forward) vs speculative (several per round)."""
    fig = go.Figure()
    fig.add_scatter(
        x=list(plain_times),
        y=list(range(1, len(plain_times) + 1)),
        name="plain decoding",
        mode="lines",
        line={"color": RECOMPUTED, "shape": "hv"},
        hovertemplate="%{x:.2f} s: %{y} tokens<extra></extra>",
    )
    fig.add_scatter(
        x=list(spec_times),
        y=list(spec_tokens),
        name="speculative",
        mode="lines+markers",
        line={"color": ACCEPTED, "shape": "hv"},
        hovertemplate="%{x:.2f} s: %{y} tokens<extra></extra>",
    )
    fig.update_xaxes(title_text="seconds", rangemode="tozero")
    fig.update_yaxes(title_text="tokens out", rangemode="tozero")
    return style(fig, 300)


# --- batching ----------------------------------------------------------------------------------


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
    fig.update_yaxes(title_text="tokens / s, all sequences")
    return style(fig, 300, showlegend=False)


def batch_latency_figure(solo_finished: Sequence[float], batch_finished: Sequence[float]) -> go.Figure:
    """When each sequence was done: one by one (it waits for those before it) vs in the batch."""
    names = [f"#{i}" for i in range(1, len(solo_finished) + 1)]
    fig = go.Figure()
    fig.add_bar(
        x=names,
        y=list(solo_finished),
        name="one by one",
        marker_color=RECOMPUTED,
        hovertemplate="sequence %{x} done after %{y:.2f} s<extra></extra>",
    )
    fig.add_bar(
        x=names,
        y=list(batch_finished),
        name="in one batch",
        marker_color=CACHED,
        hovertemplate="sequence %{x} done after %{y:.2f} s<extra></extra>",
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="sequence")
    fig.update_yaxes(title_text="seconds until done")
    return style(fig, 300)

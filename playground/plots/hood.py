"""Plotly figures for the "Under the hood" tab, built from plain lists (no model, no gradio).

Styling works on light and dark pages: transparent backgrounds, grey grid lines, no font
colour set (a dark template applied later takes over), colours readable on both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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
GRID = "rgba(128, 128, 128, 0.25)"
COLORSCALE = "Viridis"
WEIGHT_TICKS = (0, 0.01, 0.05, 0.2, 0.5, 1)  # attention colours use sqrt(weight): faint weights stay visible


def style(fig: go.Figure, height: int, **layout: Any) -> go.Figure:
    """Transparent backgrounds, grey grid lines, a legend on top, compact margins."""
    defaults = {
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
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
        name="formula: 2 × layers × KV heads × head_dim × tokens × bytes",
        mode="lines",
        line={"color": "rgba(128,128,128,0.9)", "width": 6},
        customdata=list(formula),
        hovertemplate="%{x} tokens: %{customdata:,} bytes (formula)<extra></extra>",
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


def _sqrt_colorbar() -> dict[str, Any]:
    return {
        "title": {"text": "weight"},
        "tickvals": [math.sqrt(t) for t in WEIGHT_TICKS],
        "ticktext": [str(t) for t in WEIGHT_TICKS],
    }


def attention_grid_figure(
    thumbnails: Sequence[Sequence[Sequence[Sequence[float]]]], sink: Sequence[Sequence[float]]
) -> go.Figure:
    """Every head of every layer as a thumbnail: x = layer, y = head; click one to enlarge it.
    thumbnails[layer][head] is an s × s map (future cells NaN); sink[layer][head] its sink share."""
    layers, heads = len(thumbnails), len(thumbnails[0])
    size = len(thumbnails[0][0])
    step = size + 1  # one blank cell between thumbnails
    z = [[None] * (layers * step - 1) for _ in range(heads * step - 1)]
    cells = [[None] * (layers * step - 1) for _ in range(heads * step - 1)]
    for layer in range(layers):
        for head in range(heads):
            for q in range(size):
                for k in range(size):
                    value = thumbnails[layer][head][q][k]
                    row, col = head * step + q, layer * step + k
                    z[row][col] = None if value is None or value != value else math.sqrt(max(value, 0.0))
                    cells[row][col] = [layer + 1, head + 1, round(sink[layer][head], 3)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            customdata=cells,
            colorscale=COLORSCALE,
            zmin=0,
            zmax=1,
            hoverongaps=False,
            colorbar=_sqrt_colorbar(),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<br>weight on the first token: "
            "%{customdata[2]}<extra>click to enlarge</extra>",
        )
    )
    fig.update_xaxes(
        tickvals=[layer * step + size / 2 for layer in range(layers)],
        ticktext=[str(n) for n in range(1, layers + 1)],
        title_text="layer",
        showgrid=False,
        zeroline=False,
    )
    fig.update_yaxes(
        tickvals=[head * step + size / 2 for head in range(heads)],
        ticktext=[f"h{n}" for n in range(1, heads + 1)],
        title_text="head",
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    return style(fig, max(220, 34 * heads + 90), margin={"l": 50, "r": 10, "t": 20, "b": 45})


def attention_map_figure(
    matrix: Sequence[Sequence[float]], tokens: Sequence[str], title: str, sink: float
) -> go.Figure:
    """One head's full causal triangle: rows are queries, columns keys; future keys drawn as
    masked; the first column labelled as the attention sink when it holds much of the weight."""
    n = len(tokens)
    labels = [f"{i}·{t}" for i, t in enumerate(tokens)]
    weights = [[matrix[q][k] if k <= q else None for k in range(n)] for q in range(n)]
    colours = [[math.sqrt(max(w, 0.0)) if w is not None else None for w in row] for row in weights]
    masked = [[1 if k > q else None for k in range(n)] for q in range(n)]
    fig = go.Figure()
    fig.add_heatmap(
        z=colours,
        x=labels,
        y=labels,
        customdata=weights,
        colorscale=COLORSCALE,
        zmin=0,
        zmax=1,
        colorbar=_sqrt_colorbar(),
        hoverongaps=False,
        hovertemplate="query %{y}<br>key %{x}<br>weight %{customdata:.4f}<extra></extra>",
    )
    fig.add_heatmap(
        z=masked,
        x=labels,
        y=labels,
        colorscale=[[0, MASKED], [1, MASKED]],
        showscale=False,
        hoverongaps=False,
        hovertemplate="key %{x} comes after query %{y}: masked (weight 0)<extra></extra>",
    )
    if n > 1:
        fig.add_annotation(
            x=labels[0],
            y=labels[n - 1],
            text=f"attention sink: {sink:.0%} of the weight",
            showarrow=True,
            arrowhead=2,
            ax=60,
            ay=-30,
            bgcolor="rgba(128,128,128,0.2)",
        )
    fig.update_xaxes(title_text="key (what is looked at)", tickangle=-60, showgrid=False, type="category")
    fig.update_yaxes(title_text="query (who looks)", autorange="reversed", showgrid=False, type="category")
    side = min(720, max(320, 14 * n + 160))
    return style(
        fig,
        side,
        title={"text": title, "x": 0.01, "font": {"size": 14}},
        margin={"l": 80, "r": 10, "t": 40, "b": 80},
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

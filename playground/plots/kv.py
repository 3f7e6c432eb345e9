"""Plotly figures for the KV-cache calculator, built from plain numbers (no engine or UI imports)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

GIB = 2**30


@dataclass(frozen=True)
class CurveSeries:
    """One line on the KV-bytes-vs-context plot."""

    label: str
    tokens: list[int]  # x: context length in tokens
    bytes: list[int]  # y: KV-cache bytes at that length
    dash: str = "solid"  # "solid" for models, "dash"/"dot" for other dtypes of the selected model


def kv_curve_figure(series: list[CurveSeries], marker_tokens: int | None = None) -> go.Figure:
    """KV-cache GiB against context length; sliding-window models level off at their window."""
    fig = go.Figure()
    for s in series:
        fig.add_trace(
            go.Scatter(
                x=s.tokens,
                y=[b / GIB for b in s.bytes],
                mode="lines",
                name=s.label,
                line={"dash": s.dash},
                hovertemplate="%{x:,} tokens: %{y:.3f} GiB<extra>" + s.label + "</extra>",
            )
        )
    if marker_tokens:
        fig.add_vline(x=marker_tokens, line_dash="dot", line_color="gray", annotation_text="your length")
    fig.update_layout(
        title="KV cache vs context length (batch as chosen)",
        xaxis_title="context length (tokens)",
        yaxis_title="KV cache (GiB = 2^30 bytes)",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        height=420,
    )
    return fig


def memory_bar_figure(label: str, weights: int, kv: int, overhead: int, gpu: int) -> go.Figure:
    """Stacked bar of weights + KV cache + reserved overhead, against the GPU's memory (a red line)."""
    parts = [
        ("weights", weights, "#4c78a8"),
        ("KV cache", kv, "#f58518"),
        ("overhead reserve", overhead, "#bab0ac"),
    ]
    fig = go.Figure()
    for name, value, color in parts:
        fig.add_trace(
            go.Bar(
                x=[label],
                y=[value / GIB],
                name=name,
                marker_color=color,
                hovertemplate=f"{name}: %{{y:.2f}} GiB<extra></extra>",
            )
        )
    fig.add_hline(
        y=gpu / GIB, line_color="red", line_dash="dash", annotation_text=f"GPU: {gpu / GIB:.1f} GiB"
    )
    top = max(gpu, weights + kv + overhead) / GIB
    fig.update_layout(
        barmode="stack",
        title="Weights + KV cache against GPU memory",
        yaxis_title="GiB (2^30 bytes)",
        yaxis_range=[0, top * 1.1],
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        height=420,
    )
    return fig

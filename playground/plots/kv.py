"""Plotly figures for the KV-cache calculator, built from plain numbers (no engine imports); their
words in the language asked for (the string tables of playground/ui/i18n, no Gradio)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from playground.ui.i18n import t

GIB = 2**30
# A horizontal legend above the plot area (plotly grows the top margin to hold it).
TOP_LEGEND = {
    "orientation": "h",
    "x": 0,
    "xanchor": "left",
    "y": 1.02,
    "yanchor": "bottom",
    "traceorder": "normal",
}


@dataclass(frozen=True)
class CurveSeries:
    """One line on the KV-bytes-vs-context plot."""

    label: str
    tokens: list[int]  # x: context length in tokens
    bytes: list[int]  # y: KV-cache bytes at that length
    dash: str = "solid"  # "solid" for models, "dash"/"dot" for other dtypes of the selected model


def kv_curve_figure(
    series: list[CurveSeries], marker_tokens: int | None = None, lang: str = "en"
) -> go.Figure:
    """KV-cache GiB against context length; sliding-window models level off at their window."""
    fig = go.Figure()
    hover = t("kv.plot.hover", lang)
    for s in series:
        fig.add_trace(
            go.Scatter(
                x=s.tokens,
                y=[b / GIB for b in s.bytes],
                mode="lines",
                name=s.label,
                line={"dash": s.dash},
                hovertemplate=f"{hover}<extra>{s.label}</extra>",
            )
        )
    if marker_tokens:
        fig.add_vline(
            x=marker_tokens,
            line_dash="dot",
            line_color="gray",
            annotation_text=t("kv.plot.your_length", lang),
            annotation_position="bottom right",
        )
    # No in-figure title (the component's label names the chart); the legend is a column on the right,
    # clear of both axis titles (plotly widens the right margin for it).
    fig.update_layout(
        xaxis_title=t("kv.plot.context", lang),
        yaxis={"title": {"text": t("kv.plot.kv_gib", lang)}, "automargin": True},
        legend={"x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
        margin={"l": 60, "r": 20, "t": 20, "b": 40},
        height=420,
    )
    return fig


def memory_bar_figure(
    label: str, weights: int, kv: int, overhead: int, gpu: int, lang: str = "en"
) -> go.Figure:
    """One horizontal stacked bar, weights + KV cache + reserved overhead, against the GPU's memory (a
    red line): a gauge as wide as the page and only as tall as it needs."""
    parts = [
        (t("kv.plot.weights", lang), weights, "#4c78a8"),
        (t("kv.plot.kv", lang), kv, "#f58518"),
        (t("kv.plot.reserve", lang), overhead, "#bab0ac"),
    ]
    fig = go.Figure()
    for name, value, color in parts:
        fig.add_trace(
            go.Bar(
                y=[label],
                x=[value / GIB],
                name=name,
                orientation="h",
                marker_color=color,
                hovertemplate=f"{name}: %{{x:.2f}} GiB<extra></extra>",
            )
        )
    fig.add_vline(
        x=gpu / GIB,
        line_color="red",
        line_dash="dash",
        annotation_text=t("kv.plot.gpu", lang, gib=gpu / GIB),
    )
    top = max(gpu, weights + kv + overhead) / GIB
    fig.update_layout(
        barmode="stack",
        legend=TOP_LEGEND,
        xaxis_title=t("kv.plot.gib", lang),
        xaxis_range=[0, top * 1.1],
        yaxis={"automargin": True},
        margin={"l": 20, "r": 20, "t": 10, "b": 40},
        height=240,
    )
    return fig

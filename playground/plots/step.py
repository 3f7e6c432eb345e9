"""Plotly figures for the step-by-step view, built from plain lists (no session objects)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.ui.i18n import DEFAULT, t

RAW_COLOR = "#8fa8c8"
KEPT_COLOR = "#2a7de1"
REMOVED_COLOR = "#c8c8c8"


def distribution_figure(
    labels: Sequence[str],
    raw_probs: Sequence[float],
    stage_probs: Sequence[float],
    removed: Sequence[bool],
    stage_name: str,
    raw: bool = False,
    lang: str = DEFAULT,
) -> go.Figure:
    """Grouped horizontal bars, most likely token on top: raw probability vs the probability
    after `stage_name` (raw: no stage applied yet); tokens removed by then are grey. In lang."""
    colors = [REMOVED_COLOR if gone else KEPT_COLOR for gone in removed]
    fig = go.Figure()
    fig.add_bar(
        name=t("plot.step.raw", lang),
        y=list(labels),
        x=list(raw_probs),
        orientation="h",
        marker_color=RAW_COLOR,
    )
    fig.add_bar(
        name=t("plot.step.no_stage", lang) if raw else t("plot.step.after", lang, stage=stage_name),
        y=list(labels),
        x=list(stage_probs),
        orientation="h",
        marker_color=colors,
        customdata=[t("plot.step.removed" if gone else "plot.step.kept", lang) for gone in removed],
        hovertemplate="%{y}: %{x:.2%} (%{customdata})<extra></extra>",
    )
    fig.update_layout(
        template="none",  # small payloads; the app's theme styles the page
        barmode="group",
        height=max(260, 34 * len(labels) + 80),
        margin={"l": 70, "r": 10, "t": 50, "b": 30},
        yaxis={"autorange": "reversed", "type": "category", "automargin": True},
        xaxis={"tickformat": ".0%", "title": t("plot.step.probability", lang)},
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"},
        meta={"stage_rows": STAGE_ROWS},  # on stage (static/theme.js) only the top rows, each labelled
    )
    return fig


STAGE_ROWS = 5  # the candidates presenter mode shows as buttons


MAX_TOKEN_LABELS = 12  # more steps than this: label every k-th bar (hover still names each token)


def cumulative_logprob_figure(
    logprobs: Sequence[float], labels: Sequence[str], lang: str = DEFAULT
) -> go.Figure:
    """Per-step log-prob bars and the running sum (the log-probability of the whole continuation), in
    lang.

    No in-figure title: the component's label names the chart."""
    steps = list(range(1, len(logprobs) + 1))
    running, total = [], 0.0
    for value in logprobs:
        total += value
        running.append(total)
    fig = go.Figure()
    fig.add_bar(
        name=t("plot.step.logprob", lang),
        x=steps,
        y=list(logprobs),
        text=thinned_labels(labels),
        textposition="auto",  # inside a bar when it fits, else just past its end
        textangle=-90,  # vertical: neighbouring labels never overlap
        cliponaxis=False,
        customdata=list(labels),
        hovertemplate=t("plot.step.hover", lang),
        marker_color=RAW_COLOR,
    )
    fig.add_scatter(
        name=t("plot.step.cumulative", lang), x=steps, y=running, mode="lines+markers", line_color=KEPT_COLOR
    )
    _style_cumulative(fig, len(steps), lang)
    return fig


def thinned_labels(labels: Sequence[str], most: int = MAX_TOKEN_LABELS) -> list[str]:
    """Every label when there are at most `most`, else every k-th (the others blank)."""
    every = max(1, -(-len(labels) // most))  # ceil(len / most)
    return [label if i % every == 0 else "" for i, label in enumerate(labels)]


def _style_cumulative(fig: go.Figure, n_steps: int, lang: str) -> None:
    fig.update_layout(
        template="none",
        height=340,
        margin={"l": 70, "r": 15, "t": 30, "b": 95},  # the legend sits under the step axis
        xaxis={
            "title": {"text": t("plot.step.step", lang)},
            "dtick": 1 if n_steps <= 20 else None,
            "automargin": True,
        },
        yaxis={"title": {"text": t("plot.step.nats", lang), "standoff": 8}, "automargin": True},
        legend={"orientation": "h", "x": 0, "y": -0.28, "yanchor": "top"},
    )

"""Figures of the lesson "Logit lens" (playground/hood/lens.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.plots.hood.style import CACHED, COLORSCALE, DECODE, PREFILL, RECOMPUTED, style
from playground.ui.i18n import DEFAULT, t


def lens_track_figure(
    tracks: Sequence[tuple[str, Sequence[float], Sequence[int]]], settles_at: int, lang: str = DEFAULT
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
            hovertemplate=label + t("hood.lens.plot.p_hover", lang) + "<extra></extra>",
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
            hovertemplate=label + t("hood.lens.plot.rank_hover", lang) + "<extra></extra>",
            row=2,
            col=1,
        )
    fig.add_vline(x=settles_at, line_dash="dash", line_color="rgba(128,128,128,0.9)")
    fig.add_annotation(
        x=settles_at,
        y=1,
        yref="y domain",
        text=t("hood.lens.plot.settles", lang, layer=settles_at),
        showarrow=False,
        xanchor="right",
        bgcolor="rgba(128,128,128,0.2)",
        row=1,
        col=1,
    )
    fig.update_yaxes(title_text=t("hood.lens.plot.probability", lang), range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(
        title_text=t("hood.lens.plot.rank", lang), type="log", autorange="reversed", row=2, col=1
    )
    dtick = 1 if len(tracks[0][1]) <= 32 else None
    fig.update_xaxes(title_text=t("hood.lens.plot.after", lang), dtick=dtick, row=2, col=1)
    return style(fig, 460)


def lens_top_figure(top: Sequence[Sequence[tuple[int, str, float]]], lang: str = DEFAULT) -> go.Figure:
    """The classic logit-lens picture: each layer's most likely next tokens (id, piece, p),
    coloured by probability, the last layer on top; click a token to track it."""
    layers = len(top)
    fig = go.Figure(
        go.Heatmap(
            z=[[p for _, _, p in row] for row in top],
            x=[f"#{i}" for i in range(1, len(top[0]) + 1)],
            y=[t("hood.lens.plot.layer", lang, layer=n) for n in range(1, layers + 1)],
            text=[[piece for _, piece, _ in row] for row in top],
            texttemplate="%{text}",
            customdata=[[[token_id, piece] for token_id, piece, _ in row] for row in top],
            colorscale=COLORSCALE,
            zmin=0,
            zmax=1,
            colorbar={"title": {"text": "p"}},
            hovertemplate=t("hood.lens.plot.top_hover", lang),
        )
    )
    fig.update_yaxes(type="category", showgrid=False)
    fig.update_xaxes(side="top", showgrid=False)
    return style(fig, max(300, 20 * layers + 80), margin={"l": 70, "r": 10, "t": 40, "b": 10})

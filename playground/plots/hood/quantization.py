"""Figures of the lesson "Quantization, token by token" (playground/hood/quantization.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.plots.hood.style import CACHED, GRID, RECOMPUTED, REJECTED, style
from playground.ui.i18n import DEFAULT, t

KL_FLOOR = 1e-4  # nats: the strip's colour scale starts here (below: as faithful as it gets)
KL_CEILING = 20.0
TICKS = 40  # token labels under the strip at most (every k-th beyond)


@dataclass(frozen=True)
class StripRow:
    """One format's row of the strip."""

    label: str
    kl: Sequence[float]  # one per position
    top1: Sequence[bool]
    flip: int | None  # first position whose most likely token differs


def _colour_value(kl: float) -> float:
    return math.log10(min(max(kl, KL_FLOOR), KL_CEILING))


def kl_strip_figure(
    rows: Sequence[StripRow],
    ticks: Sequence[str],
    names: Sequence[str],
    text_positions: int,
    lang: str = DEFAULT,
) -> go.Figure:
    """KL(reference ‖ format) at every position, one row per format (log colour scale, nats).
    ticks/names: the token each position predicts (short label / hover); text_positions: how many
    of the positions are the text's (the rest is the continuation, read one token per forward)."""
    positions = list(range(1, len(ticks) + 1))
    labels = [row.label for row in rows]
    z = [[_colour_value(v) for v in row.kl] for row in rows]
    same, different = t("hood.quant.plot.same", lang), t("hood.quant.plot.different", lang)
    custom = [
        [[names[i], f"{row.kl[i]:.4f}", same if row.top1[i] else different] for i in range(len(row.kl))]
        for row in rows
    ]
    exponents = list(range(round(math.log10(KL_FLOOR)), 2, 2 if len(rows) < 4 else 1))  # room: a short bar
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=positions,
            y=labels,
            customdata=custom,
            colorscale="Inferno",
            zmin=math.log10(KL_FLOOR),
            zmax=math.log10(KL_CEILING),
            xgap=0,
            ygap=2,
            colorbar={
                "title": {"text": t("hood.quant.plot.kl_nats", lang)},
                "tickvals": exponents,
                "ticktext": [f"{10.0**e:g}" for e in exponents],
                "thickness": 12,
            },
            hovertemplate=t("hood.quant.plot.strip_hover", lang),
        )
    )
    flips = [(row.flip + 1, row.label) for row in rows if row.flip is not None]
    if flips:
        fig.add_scatter(
            x=[f[0] for f in flips],
            y=[f[1] for f in flips],
            mode="markers",
            name=t("hood.quant.plot.flip", lang),
            marker={"symbol": "x-thin", "size": 11, "line": {"width": 3, "color": "#00d5ff"}},
            hovertemplate=t("hood.quant.plot.flip_hover", lang) + "<extra></extra>",
        )
    _boundary(fig, text_positions, len(positions), lang)
    step = max(1, -(-len(ticks) // TICKS))
    shown = positions[::step]
    fig.update_xaxes(
        tickvals=shown,
        ticktext=[ticks[p - 1] for p in shown],
        tickangle=-60,
        tickfont={"size": 10},
        range=[0.5, len(positions) + 0.5],
        showgrid=False,
        zeroline=False,
    )
    fig.update_yaxes(autorange="reversed", showgrid=False, zeroline=False, tickfont={"size": 12})
    height = 150 + 26 * len(rows)
    return style(
        fig, height, margin={"l": 10, "r": 10, "t": 40, "b": 70}, legend={"orientation": "h", "y": 1.08}
    )


def _boundary(fig: go.Figure, text_positions: int, total: int, lang: str) -> None:
    """The line between the text (one forward) and the continuation (one token per forward)."""
    if not 0 < text_positions < total:
        return
    x = text_positions + 0.5
    fig.add_vline(x=x, line={"color": "#00d5ff", "width": 2, "dash": "dot"})
    fig.add_annotation(
        x=x,
        y=1.0,
        yref="paper",
        yanchor="bottom",
        xanchor="right",
        showarrow=False,
        font={"size": 11},
        text=t("hood.quant.plot.text_side", lang),
    )
    fig.add_annotation(
        x=x,
        y=1.0,
        yref="paper",
        yanchor="bottom",
        xanchor="left",
        showarrow=False,
        font={"size": 11},
        text=t("hood.quant.plot.continuation_side", lang),
    )


@dataclass(frozen=True)
class Point:
    """One format on the bytes-vs-quality plot."""

    label: str
    kv: bool  # a KV-cache format (drawn on the right)
    size_bytes: int  # weights bytes, or the cache's bytes
    mean_kl: float
    top1: float


def bytes_quality_figure(
    points: Sequence[Point], weights_reference: int, kv_reference: int, lang: str = DEFAULT
) -> go.Figure:
    """Bytes against quality: mean KL (log) for each format, weights on the left (MB), the KV cache on
    the right (KiB); the float reference's bytes as a dashed line (its KL is 0)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=(t("hood.quant.plot.weights_side", lang), t("hood.quant.plot.kv_side", lang)),
    )
    for col, kv, scale, unit, reference in (
        (1, False, 1e6, "MB", weights_reference),
        (2, True, 1024, "KiB", kv_reference),
    ):
        chosen = [p for p in points if p.kv == kv]
        fig.add_scatter(
            x=[p.size_bytes / scale for p in chosen],
            y=[max(p.mean_kl, 1e-6) for p in chosen],
            text=[p.label for p in chosen],
            mode="markers+text",
            textposition="top center",
            marker={"size": 10, "color": RECOMPUTED if kv else CACHED},
            showlegend=False,
            customdata=[[p.mean_kl, p.top1] for p in chosen],
            row=1,
            col=col,
            hovertemplate=t("hood.quant.plot.point_hover", lang, unit=unit) + "<extra></extra>",
        )
        if reference:
            fig.add_vline(x=reference / scale, line={"color": REJECTED, "dash": "dash"}, row=1, col=col)
            axis = "" if col == 1 else "2"
            fig.add_annotation(
                x=reference / scale,
                y=1,
                xref=f"x{axis}",
                yref=f"y{axis} domain",
                showarrow=False,
                text=t("hood.quant.plot.reference", lang),
                xanchor="right",
                font={"size": 11},
            )
        fig.update_xaxes(title_text=unit, rangemode="tozero", row=1, col=col, gridcolor=GRID)
        title = t("hood.quant.plot.mean_kl", lang) if col == 1 else ""
        fig.update_yaxes(type="log", dtick=1, title_text=title, row=1, col=col)
    return style(fig, 340, showlegend=False, margin={"l": 60, "r": 20, "t": 50, "b": 50})

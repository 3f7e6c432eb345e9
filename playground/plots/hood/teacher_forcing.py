"""Figures of the lesson "Training reads in parallel, generation writes in series"
(playground/hood/teacher_forcing.py)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.plots.hood.style import ACCEPTED, CACHED, GRID, RECOMPUTED, REJECTED, style
from playground.ui.i18n import DEFAULT, t

TOP_CHOICE = ACCEPTED  # the reference token is the model's own top choice there
OTHER_CHOICE = CACHED  # it is not


def forcing_figure(
    reference: Sequence[str],
    losses: Sequence[float],
    ranks: Sequence[int],
    free: Sequence[str],
    follows: Sequence[bool],
    leaves_at: int | None,
    parallel_seconds: float,
    serial_seconds: Sequence[float],
    lang: str = DEFAULT,
) -> go.Figure:
    """Left: one forward over the reference vs one forward per generated token (ms, one band per
    forward). Right: each reference token's loss when teacher forced (bars, labelled below), with
    the model's own free-running tokens above (green while they follow the reference, red once they
    left it) and a line where free running leaves the reference."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.18, 0.82], horizontal_spacing=0.07)
    n = len(reference)
    _time_bars(fig, n, parallel_seconds, serial_seconds, lang)
    x = list(range(len(losses)))
    hover = t("hood.tf.plot.loss_hover", lang) + "<extra></extra>"
    for top, name, colour in (
        (True, t("hood.tf.plot.top", lang), TOP_CHOICE),
        (False, t("hood.tf.plot.not_top", lang), OTHER_CHOICE),
    ):
        keep = [i for i in x if (ranks[i] == 1) == top]
        fig.add_bar(
            x=keep,
            y=[losses[i] for i in keep],
            name=name,
            marker_color=colour,
            row=1,
            col=2,
            customdata=[[reference[i], ranks[i], free[i] if i < len(free) else "…"] for i in keep],
            hovertemplate=hover,
        )
    fig.update_layout(barmode="stack")  # bars never share an x on the right: stacking is per forward
    fig.update_xaxes(
        tickvals=list(range(n)),
        ticktext=[html.escape(t) for t in reference],
        range=[-0.5, n - 0.5],
        row=1,
        col=2,
    )
    _free_axis(fig, free, follows, n)
    if leaves_at is not None:
        fig.add_vline(x=leaves_at - 0.5, line={"color": REJECTED, "dash": "dash", "width": 2}, row=1, col=2)
        fig.add_annotation(
            x=leaves_at - 0.5,
            y=1,
            yref="y2 domain",
            xref="x2",
            text=t("hood.tf.plot.leaves", lang),
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font={"color": REJECTED},
        )
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=t("hood.tf.plot.loss", lang), rangemode="tozero", row=1, col=2)
    legend = {
        "orientation": "h",
        "x": 1,
        "xanchor": "right",
        "y": -0.22,
        "yanchor": "top",
        "traceorder": "normal",
    }
    return style(fig, 340, margin={"l": 60, "r": 20, "t": 50, "b": 40}, legend=legend)


def _time_bars(fig: go.Figure, n: int, parallel: float, serial: Sequence[float], lang: str) -> None:
    """Training's one forward vs generation's forwards so far, stacked one band per forward."""
    training, generation = t("hood.tf.plot.training", lang), t("hood.tf.plot.generation", lang)
    fig.add_bar(
        x=[training],
        y=[parallel * 1000],
        marker_color=CACHED,
        showlegend=False,
        row=1,
        col=1,
        hovertemplate=t("hood.tf.plot.training_hover", lang, n=n) + "<extra></extra>",
    )
    fig.add_bar(
        x=[generation] * len(serial),
        y=[s * 1000 for s in serial],
        marker_color=RECOMPUTED,
        marker_line={"color": "rgba(255,255,255,0.7)", "width": 0.6},
        showlegend=False,
        row=1,
        col=1,
        customdata=list(range(1, len(serial) + 1)),
        hovertemplate=t("hood.tf.plot.generation_hover", lang, n=n) + "<extra></extra>",
    )
    fig.update_xaxes(tickangle=0, row=1, col=1, title_text=t("hood.tf.plot.forwards", lang, n=n))


def _free_axis(fig: go.Figure, free: Sequence[str], follows: Sequence[bool], n: int) -> None:
    """The free-running tokens as a second row of tick labels along the top of the loss chart
    (follows[i]: token i is the reference's token there)."""
    labels = [
        f"<span style='color:{TOP_CHOICE if same else REJECTED}'>{html.escape(token)}</span>"
        for token, same in zip(free, follows, strict=True)
    ]
    fig.update_layout(
        xaxis3={
            "overlaying": "x2",
            "side": "top",
            "range": [-0.5, n - 0.5],
            "tickvals": list(range(len(free))),
            "ticktext": labels,
            "showgrid": False,
            "zeroline": False,
            "gridcolor": GRID,
        }
    )
    fig.add_scatter(x=[], y=[], xaxis="x3", yaxis="y2", showlegend=False, hoverinfo="skip")


def kl_figure(
    at: int,
    kl: Sequence[float],
    original: Sequence[str],
    perturbed: Sequence[str],
    differs: Sequence[bool],
    lang: str = DEFAULT,
) -> go.Figure:
    """KL(original || perturbed) of the next-token distributions at answer positions at, at + 1, ...
    (kl[i] at at + i; the token lists aligned with it): red where the two runs wrote different
    tokens, grey where the same."""
    fig = go.Figure()
    fig.add_bar(
        x=[at + i for i in range(len(kl))],
        y=list(kl),
        marker_color=[RECOMPUTED if d else "rgba(128,128,128,0.6)" for d in differs[: len(kl)]],
        customdata=[[html.escape(o), html.escape(p)] for o, p in zip(original, perturbed, strict=False)],
        hovertemplate=t("hood.tf.plot.kl_hover", lang) + "<extra></extra>",
        showlegend=False,
    )
    if original and perturbed and original[0] != perturbed[0]:
        fig.add_vline(x=at, line={"color": REJECTED, "dash": "dash", "width": 2})
        fig.add_annotation(
            x=at,
            y=1,
            yref="paper",
            text=f" {html.escape(original[0])} → {html.escape(perturbed[0])}",
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font={"color": REJECTED},
        )
    fig.update_xaxes(title_text=t("hood.tf.plot.position", lang), tickformat="d")
    fig.update_yaxes(title_text=t("hood.tf.plot.kl_axis", lang), rangemode="tozero")
    return style(fig, 280)

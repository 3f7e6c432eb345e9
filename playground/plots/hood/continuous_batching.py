"""Figures of the lesson "Continuous batching" (playground/hood/continuous_batching.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.plots.hood.style import (
    CACHED,
    DECODE,
    MASKED_SOLID,
    PREFILL,
    RECOMPUTED,
    Series,
    bar_figure,
    style,
)
from playground.ui.i18n import DEFAULT, t

KINDS = {  # what a request does in an iteration: its legend's key, its colour
    "prefill": ("hood.cb.plot.prefill", PREFILL),
    "decode": ("hood.cb.plot.decode", DECODE),
    "wait": ("hood.cb.plot.wait", MASKED_SOLID),
}


@dataclass(frozen=True)
class Cell:
    """One request in one iteration: what it did there."""

    row: str  # the request's name
    iteration: int
    kind: str  # "prefill", "decode" or "wait"
    tokens: int = 0


def gantt_figure(
    cells: Sequence[Cell], rows: Sequence[str], done: dict[str, int], lang: str = DEFAULT
) -> go.Figure:
    """Requests (rows) by iterations (columns): prompt chunks with their token counts, decodes,
    waits, and a ✓ where each request was done."""
    fig = go.Figure()
    for kind, (key, color) in KINDS.items():
        mine = [c for c in cells if c.kind == kind]
        if not mine:
            continue
        label = t(key, lang)
        fig.add_bar(
            x=[1] * len(mine),
            base=[c.iteration for c in mine],
            y=[c.row for c in mine],
            orientation="h",
            name=label,
            marker_color=color,
            text=[str(c.tokens) if c.kind == "prefill" else "" for c in mine],
            textposition="inside",
            insidetextanchor="middle",
            customdata=[[c.iteration, c.tokens] for c in mine],
            hovertemplate=t("hood.cb.plot.cell_hover", lang, what=label) + "<extra></extra>",
        )
    if done:
        fig.add_scatter(
            x=[i + 1.15 for i in done.values()],
            y=list(done),
            mode="text",
            text=["✓"] * len(done),
            name=t("hood.cb.plot.done", lang),
            textfont={"size": 16, "color": CACHED},
            hovertemplate=t("hood.cb.plot.done_hover", lang) + "<extra></extra>",
        )
    fig.update_layout(barmode="overlay", bargap=0.25)
    request = t("hood.cb.plot.request", lang)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)), title_text=request)
    iteration = t("hood.cb.plot.iteration", lang)
    fig.update_xaxes(title_text=iteration, dtick=1 if _span(cells) <= 40 else None)
    return style(fig, max(220, 34 * len(rows) + 110))


def _span(cells: Sequence[Cell]) -> int:
    return max((c.iteration for c in cells), default=0) + 1


def latency_figure(
    names: Sequence[str], continuous: Sequence[int], static: Sequence[int], lang: str = DEFAULT
) -> go.Figure:
    """Forwards from each request's arrival until it was done: the running batch vs a static batch."""
    hover = t("hood.cb.plot.forwards_hover", lang)
    return bar_figure(
        [
            Series(t("hood.cb.plot.static", lang), names, static, RECOMPUTED, hover),
            Series(t("hood.cb.plot.continuous", lang), names, continuous, CACHED, hover),
        ],
        t("hood.cb.plot.request", lang),
        t("hood.cb.plot.until_done", lang),
    )


@dataclass(frozen=True)
class Served:
    """One request of a crowd: when it arrived and how fast it was served (None: not yet known)."""

    name: str
    kind: str  # chat, step, long prompt
    arrival: float  # seconds after the crowd began
    ttft: float | None  # seconds to its first token
    tpot: float | None  # seconds per token after the first


def serving_figure(
    served: Sequence[Served], ttft_slo: float, tpot_slo: float, lang: str = DEFAULT
) -> go.Figure:
    """TTFT (top) and TPOT (bottom) of every request by its arrival, with the SLO lines: what a user
    waits for the first token, and then for each next one."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12)
    panels = ((1, "TTFT", "ttft", ttft_slo, 1.0, "s"), (2, "TPOT", "tpot", tpot_slo, 1000.0, "ms"))
    for row, label, attribute, slo, scale, unit in panels:
        points = [s for s in served if getattr(s, attribute) is not None]
        within = [getattr(s, attribute) <= slo for s in points]
        fig.add_scatter(
            x=[s.arrival for s in points],
            y=[getattr(s, attribute) * scale for s in points],
            mode="markers",
            name=label,
            marker={"color": [CACHED if ok else RECOMPUTED for ok in within], "size": 9},
            text=[f"{s.name} ({s.kind})" for s in points],
            hovertemplate=f"%{{text}}: {label} %{{y:.0f}} {unit}<extra></extra>"
            if unit == "ms"
            else f"%{{text}}: {label} %{{y:.2f}} {unit}<extra></extra>",
            row=row,
            col=1,
            showlegend=False,
        )
        fig.add_hline(y=slo * scale, line_dash="dot", line_color=RECOMPUTED, row=row, col=1)
        fig.update_yaxes(title_text=f"{label} ({unit})", rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text=t("hood.crowd.arrival", lang), row=2, col=1)
    return style(fig, 420)

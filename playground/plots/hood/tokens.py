"""Figures of the lesson "Tokens are not words" (playground/hood/tokens.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, CACHED, RECOMPUTED, Series, bar_figure, style
from playground.ui.i18n import DEFAULT, t

SHOWN = 80  # bars drawn at most (a long text: its first tokens and words)
TICKS = 30  # at most this many labels under the bars (every k-th beyond)


def chars_per_token_figure(
    labels: Sequence[str],
    names: Sequence[str],
    chars: Sequence[float],
    byte_piece: Sequence[bool],
    lang: str = DEFAULT,
) -> go.Figure:
    """How many characters each token carries (a byte piece: its share of one character).
    labels: short tick labels; names: what the hover says of each token."""
    n = min(len(labels), SHOWN)
    whole = [i for i in range(n) if not byte_piece[i]]
    split = [i for i in range(n) if byte_piece[i]]
    series = [
        (t("hood.tok.plot.whole", lang), whole, CACHED),
        (t("hood.tok.plot.byte_parts", lang), split, RECOMPUTED),
    ]
    fig = _bars(series, names, chars, t("hood.tok.plot.chars_hover", lang))
    _ticks(fig, labels[:n])
    title = (
        t("hood.tok.plot.token_first", lang, shown=SHOWN, count=len(labels))
        if len(labels) > SHOWN
        else t("hood.tok.plot.token", lang)
    )
    fig.update_xaxes(title_text=title)
    fig.update_yaxes(title_text=t("hood.tok.plot.characters", lang), rangemode="tozero")
    return fig


def tokens_per_word_figure(words: Sequence[str], tokens: Sequence[int], lang: str = DEFAULT) -> go.Figure:
    """How many tokens cover each word (the text between spaces)."""
    n = min(len(words), SHOWN)
    series = [
        (t("hood.tok.plot.one_token", lang), [i for i in range(n) if tokens[i] <= 1], ACCEPTED),
        (t("hood.tok.plot.several", lang), [i for i in range(n) if tokens[i] > 1], RECOMPUTED),
    ]
    fig = _bars(series, words, tokens, t("hood.tok.plot.tokens_hover", lang))
    _ticks(fig, [_short(w, 10) for w in words[:n]])
    title = (
        t("hood.tok.plot.word_first", lang, shown=SHOWN, count=len(words))
        if len(words) > SHOWN
        else t("hood.tok.plot.word", lang)
    )
    fig.update_xaxes(title_text=title)
    fig.update_yaxes(
        title_text=t("hood.tok.plot.tokens", lang),
        rangemode="tozero",
        dtick=1 if max(tokens, default=1) <= 8 else None,
    )
    return fig


def languages_figure(
    languages: Sequence[str], tokens: Sequence[int], kv_bytes: Sequence[int | None], lang: str = DEFAULT
) -> go.Figure:
    """The same sentence in two languages: its tokens, labelled with what their KV cache costs."""
    labels = [
        t("hood.tok.plot.bar", lang, tokens=n)
        if b is None
        else t("hood.tok.plot.bar_kv", lang, tokens=n, kib=b / 1024)
        for n, b in zip(tokens, kv_bytes, strict=True)
    ]
    fig = go.Figure()
    fig.add_bar(
        x=list(languages),
        y=list(tokens),
        marker_color=[CACHED, RECOMPUTED][: len(languages)],
        text=labels,
        textposition="auto",
        hovertemplate=t("hood.tok.plot.languages_hover", lang) + "<extra></extra>",
    )
    fig.update_yaxes(title_text=t("hood.tok.plot.tokens", lang), rangemode="tozero")
    return style(fig, 300, showlegend=False)


def _bars(
    series: Sequence[tuple[str, list[int], str]], names: Sequence[str], values: Sequence[float], hover: str
) -> go.Figure:
    """Bars at positions 1..n, split into coloured series by index, each bar's name in its hover."""
    drawn = [
        Series(name, [i + 1 for i in index], [values[i] for i in index], colour, hover)
        for name, index, colour in series
        if index
    ]
    fig = bar_figure(drawn, "", "", 340, barmode="overlay")
    for trace, (_, index, _) in zip(fig.data, [s for s in series if s[1]], strict=True):
        trace.customdata = [names[i] for i in index]
    return fig


def _ticks(fig: go.Figure, labels: Sequence[str]) -> None:
    """One label per bar (every k-th when there are many), slanted."""
    step = max(1, -(-len(labels) // TICKS))
    positions = list(range(1, len(labels) + 1, step))
    fig.update_xaxes(
        tickvals=positions,
        ticktext=[labels[p - 1] for p in positions],
        tickangle=-45,
        range=[0.5, len(labels) + 0.5],
    )


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

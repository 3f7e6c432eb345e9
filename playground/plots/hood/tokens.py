"""Figures of the lesson "Tokens are not words" (playground/hood/tokens.py)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.plots.hood.style import ACCEPTED, CACHED, RECOMPUTED, Series, bar_figure, style

SHOWN = 80  # bars drawn at most (a long text: its first tokens and words)


def chars_per_token_figure(
    pieces: Sequence[str], chars: Sequence[float], byte_piece: Sequence[bool]
) -> go.Figure:
    """How many characters each token carries (a byte piece: its share of one character)."""
    whole = [
        (f"{i + 1} {p}", c)
        for i, (p, c, b) in enumerate(zip(pieces, chars, byte_piece, strict=True))
        if not b
    ]
    split = [
        (f"{i + 1} {p}", c) for i, (p, c, b) in enumerate(zip(pieces, chars, byte_piece, strict=True)) if b
    ]
    order = [f"{i + 1} {p}" for i, p in enumerate(pieces)][:SHOWN]
    hover = "token %{x}: %{y:.2f} characters"
    series = [
        Series("whole characters", [x for x, _ in whole], [c for _, c in whole], CACHED, hover),
        Series("bytes of a character", [x for x, _ in split], [c for _, c in split], RECOMPUTED, hover),
    ]
    title = f"token (first {SHOWN} of {len(pieces)})" if len(pieces) > SHOWN else "token"
    fig = bar_figure([s for s in series if s.x], title, "characters in the token", 300, barmode="overlay")
    fig.update_xaxes(categoryorder="array", categoryarray=order, range=[-0.5, len(order) - 0.5])
    return fig


def tokens_per_word_figure(words: Sequence[str], tokens: Sequence[int]) -> go.Figure:
    """How many tokens cover each word (the text between spaces)."""
    names = [f"{i + 1} {w}" for i, w in enumerate(words)]
    one = [(n, t) for n, t in zip(names, tokens, strict=True) if t <= 1]
    more = [(n, t) for n, t in zip(names, tokens, strict=True) if t > 1]
    hover = "word %{x}: %{y} tokens"
    series = [
        Series("one token", [n for n, _ in one], [t for _, t in one], ACCEPTED, hover),
        Series("split into several", [n for n, _ in more], [t for _, t in more], RECOMPUTED, hover),
    ]
    title = f"word (first {SHOWN} of {len(words)})" if len(words) > SHOWN else "word (text between spaces)"
    fig = bar_figure([s for s in series if s.x], title, "tokens", 300, barmode="overlay")
    fig.update_xaxes(
        categoryorder="array", categoryarray=names[:SHOWN], range=[-0.5, min(len(names), SHOWN) - 0.5]
    )
    fig.update_yaxes(rangemode="tozero", dtick=1 if max(tokens, default=1) <= 10 else None)
    return fig


def languages_figure(languages: Sequence[str], tokens: Sequence[int], kv_bytes: Sequence[int]) -> go.Figure:
    """The same sentence in two languages: its tokens, labelled with what their KV cache costs."""
    fig = go.Figure()
    fig.add_bar(
        x=list(languages), y=list(tokens), marker_color=[CACHED, RECOMPUTED][: len(languages)],
        text=[f"{t} tokens · {b / 1024:,.0f} KiB of KV" for t, b in zip(tokens, kv_bytes, strict=True)],
        textposition="auto", hovertemplate="%{x}: %{y} tokens<extra></extra>",
    )  # fmt: skip
    fig.update_yaxes(title_text="tokens", rangemode="tozero")
    return style(fig, 300, showlegend=False)

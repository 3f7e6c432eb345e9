"""HTML for token streams: each token coloured by probability, with a hover/click card."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from playground.chat import TokenInfo
from playground.tokens import TokenPiece


def probability_color(prob: float) -> str:
    """Red (unlikely) through yellow to green (likely), translucent so text stays readable."""
    hue = max(0.0, min(1.0, prob)) * 120
    return f"hsla({hue:.0f}, 75%, 50%, 0.35)"


def _card(rows: Iterable[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<span class='tok-card'><table>{cells}</table></span>"


def token_span(
    text: str, prob: float | None, card_rows: Sequence[tuple[str, str]], special: bool = False
) -> str:
    """One token: background by probability; focusable so a click (or tab) pins its card."""
    style = f" style='background:{probability_color(prob)}'" if prob is not None else ""
    classes = "tok tok-special" if special else "tok"
    body = html.escape(text).replace("\n", "<br>")
    return f"<span class='{classes}' tabindex='0'{style}>{body}{_card(card_rows)}</span>"


def answer_tokens_html(tokens: Sequence[TokenInfo], show_special: bool = False) -> str:
    """The answer as coloured tokens; the card shows probability, log-prob and top-5."""
    spans = []
    for token in tokens:
        if token.special and not show_special:
            continue
        rows = [
            ("token", f"{token.visible!s} (id {token.id})"),
            ("probability", f"{token.prob:.2%}"),
            ("log-prob", f"{token.logprob:.3f}"),
            ("after sampling", f"{token.sampled_prob:.2%}"),
        ]
        rows += [(f"#{rank}", f"{alt.visible}  {alt.prob:.2%}") for rank, alt in enumerate(token.top, 1)]
        spans.append(
            token_span(token.visible if token.special else token.text, token.prob, rows, token.special)
        )
    return f"<div class='token-stream'>{''.join(spans)}</div>"


def templated_stream_html(pieces: Sequence[TokenPiece], answer_start: int) -> str:
    """Every token the model saw and wrote, special tokens included, whitespace visible."""
    spans = []
    for index, piece in enumerate(pieces):
        role = "prompt" if index < answer_start else "answer"
        rows = [("token", piece.visible), ("id", str(piece.id)), ("position", str(index)), ("part", role)]
        text = piece.visible + ("\n" if "\n" in piece.text else "")
        spans.append(
            token_span(text, None, rows, piece.special).replace("class='tok", f"class='tok tok-{role}", 1)
        )
    return f"<div class='token-stream templated'>{''.join(spans)}</div>"


def legend_html() -> str:
    stops = "".join(
        f"<span class='tok' style='background:{probability_color(p)}'>{p:.0%}</span>"
        for p in (0.05, 0.25, 0.5, 0.75, 1)
    )
    return f"<div class='tok-legend'>Token probability: {stops} · hover or click a token for details</div>"

"""HTML for token streams: each token coloured by probability, with a hover/click card.

In a chat answer the card's alternatives are buttons: choosing one forks the answer there
(static/app.js sends the choice to the server), and "Step by step from here" opens the
answer up to that token in the Step by step tab.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from playground.engine.records import TokenRecord
from playground.engine.tokens import TokenPiece


def probability_style(prob: float) -> str:
    """The probability as the CSS variable --p: static/stage.css turns it into a background from red
    (unlikely) to green (likely), with a text colour that keeps WCAG AA contrast, light and dark."""
    return f"--p:{max(0.0, min(1.0, prob)):.3f}"


def percent(prob: float | None) -> str:
    """A probability for a card: '12.34%', or 'unknown' when the engine did not say."""
    return "unknown" if prob is None or math.isnan(prob) else f"{prob:.2%}"


def _card(rows: Iterable[tuple[str, str]], extra: str = "") -> str:
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<span class='tok-card'><table>{cells}</table>{extra}</span>"


def token_span(
    text: str,
    prob: float | None,
    card_rows: Sequence[tuple[str, str]],
    special: bool = False,
    *,
    extra_classes: str = "",
    card_extra: str = "",
) -> str:
    """One token: background by probability; focusable so a click (or tab) pins its card."""
    known = prob is not None and not math.isnan(prob)
    style = f" style='{probability_style(prob)}'" if known else ""
    classes = " ".join(c for c in ("tok", "tok-special" if special else "", extra_classes) if c)
    body = html.escape(text).replace("\n", "<br>")
    return f"<span class='{classes}' tabindex='0'{style}>{body}{_card(card_rows, card_extra)}</span>"


def record_rows(token: TokenRecord) -> list[tuple[str, str]]:
    """The card rows every token record gets: id, probability, log-prob, rank, how it was chosen."""
    rows = [
        ("token", f"{token.visible} (id {token.id})"),
        ("probability", percent(token.prob)),
        ("log-prob", "unknown" if math.isnan(token.logprob) else f"{token.logprob:.3f}"),
    ]
    if token.rank is not None:
        rows.append(("rank", str(token.rank)))
    if token.sampled_prob is not None:
        rows.append(("after sampling", percent(token.sampled_prob)))
    rows.append(("chosen by", token.source))
    return rows


def _fork_buttons(position: int, token: TokenRecord) -> str:
    """The card's alternatives as buttons that fork the answer, then 'Step by step from here'."""
    buttons = "".join(
        f"<button class='tok-alt' data-pos='{position}' data-token='{alt.id}' title='Fork the answer here "
        f"with this token'>#{rank} {html.escape(alt.visible)} <b>{alt.prob:.1%}</b></button>"
        for rank, alt in enumerate(token.top, 1)
    )
    step = (
        f"<button class='tok-open' data-pos='{position}' title='Open the answer up to this token in the Step "
        "by step tab'>Step by step from here</button>"
    )
    return f"<span class='tok-alts'>{buttons}</span>{step}"


def answer_tokens_html(
    tokens: Sequence[TokenRecord], show_special: bool = False, forkable: bool = True
) -> str:
    """The answer as coloured tokens; the card shows probability, log-prob and the top alternatives,
    which fork the answer when clicked (forkable)."""
    spans = []
    for position, token in enumerate(tokens):
        if token.special and not show_special:
            continue
        extra = _fork_buttons(position, token) if forkable else ""
        rows = record_rows(token) if forkable else record_rows(token) + _top_rows(token)
        text = token.visible if token.special else token.text
        given = "tok-given" if token.given else ""
        spans.append(token_span(text, token.prob, rows, token.special, extra_classes=given, card_extra=extra))
    return f"<div class='token-stream answer-tokens'>{''.join(spans)}</div>"


def _top_rows(token: TokenRecord) -> list[tuple[str, str]]:
    return [(f"#{rank}", f"{alt.visible}  {alt.prob:.2%}") for rank, alt in enumerate(token.top, 1)]


def templated_stream_html(pieces: Sequence[TokenPiece], answer_start: int) -> str:
    """Every token the model saw and wrote, special tokens included, whitespace visible."""
    spans = []
    for index, piece in enumerate(pieces):
        role = "prompt" if index < answer_start else "answer"
        rows = [("token", piece.visible), ("id", str(piece.id)), ("position", str(index)), ("part", role)]
        text = piece.visible + ("\n" if "\n" in piece.text else "")
        spans.append(token_span(text, None, rows, piece.special, extra_classes=f"tok-{role}"))
    return f"<div class='token-stream templated'>{''.join(spans)}</div>"


def legend_html(hint: str = "hover or click a token for details") -> str:
    stops = "".join(
        f"<span class='tok' style='{probability_style(p)}'>{p:.0%}</span>" for p in (0.05, 0.25, 0.5, 0.75, 1)
    )
    return f"<div class='tok-legend'>Token probability: {stops} · {hint}</div>"

"""HTML for token streams: each token coloured by probability, with a hover/click card.

In a chat answer the card's alternatives are buttons: choosing one forks the answer there
(TOKEN_CARD_CLICKS sends the choice to the server), and "Step by step from here" opens the
answer up to that token in the Step by step tab.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence

from playground.engine.records import Alternative, TokenRecord
from playground.engine.tokens import (
    PieceLike,
    TokenPiece,
    TokenText,
    byte_groups,
    group_text,
    read_next,
    read_pieces,
    visible_text,
)

# A token card's buttons are plain HTML: the token view turns their clicks into Gradio events
# with the position (and token) as event data: "select" forks, "click" opens Step by step.
TOKEN_CARD_CLICKS = """
element.addEventListener('click', (event) => {
  const fork = event.target.closest('.tok-alt');
  const open = event.target.closest('.tok-open');
  if (!fork && !open) return;
  event.preventDefault();
  document.activeElement?.blur?.();
  if (fork) trigger('select', {position: Number(fork.dataset.pos), token: Number(fork.dataset.token)});
  else trigger('click', {position: Number(open.dataset.pos)});
});
"""


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


def record_rows(token: TokenRecord, read: TokenText | None = None) -> list[tuple[str, str]]:
    """The card rows every token record gets: id, probability, log-prob, rank, how it was chosen;
    read: the token as it reads in its text (a byte piece says which byte of which character)."""
    rows = [
        ("token", f"{token.visible} (id {token.id})"),
        *(byte_rows(read) if read is not None else []),
        ("probability", percent(token.prob)),
        ("log-prob", "unknown" if math.isnan(token.logprob) else f"{token.logprob:.3f}"),
    ]
    if token.rank is not None:
        rows.append(("rank", str(token.rank)))
    if token.sampled_prob is not None:
        rows.append(("after sampling", percent(token.sampled_prob)))
    rows.append(("chosen by", token.source))
    return rows


def alternative_text(context: Sequence[PieceLike], alt: Alternative) -> str:
    """An alternative as it reads after context: a byte piece says which byte of what it is."""
    if not alt.visible.startswith("<0x"):
        return alt.visible
    return read_next(context, TokenPiece(alt.id, alt.visible, alt.visible, False)).candidate


def _fork_buttons(position: int, token: TokenRecord, context: Sequence[PieceLike]) -> str:
    """The card's alternatives as buttons that fork the answer, then 'Step by step from here'."""
    buttons = "".join(
        f"<button class='tok-alt' data-pos='{position}' data-token='{alt.id}' title='Fork the answer here "
        f"with this token'>#{rank} {html.escape(alternative_text(context, alt))} "
        f"<b>{alt.prob:.1%}</b></button>"
        for rank, alt in enumerate(token.top, 1)
    )
    step = (
        f"<button class='tok-open' data-pos='{position}' title='Open the answer up to this token in the Step "
        "by step tab'>Step by step from here</button>"
    )
    return f"<span class='tok-alts'>{buttons}</span>{step}"


def answer_tokens_html(
    tokens: Sequence[TokenRecord],
    show_special: bool = False,
    forkable: bool = True,
    marked: int | None = None,
) -> str:
    """The answer as coloured tokens; the card shows probability, log-prob and the top alternatives,
    which fork the answer when clicked (forkable). A character's byte tokens stand under it.
    marked: the index of a token to mark (Compare: where two answers part)."""
    texts = read_pieces(tokens)

    def span(position: int) -> str:
        token, read = tokens[position], texts[position]
        if token.special and not show_special:
            return ""
        context = tokens[max(0, position - 4) : position]
        extra = _fork_buttons(position, token, context) if forkable else ""
        rows = record_rows(token, read) + ([] if forkable else _top_rows(token, context))
        text = token.visible if token.special else cell_text(read) if read.split else token.text
        marks = (("tok-given", token.given), ("tok-parting", position == marked))
        classes = " ".join(name for name, on in marks if on)
        return token_span(text, token.prob, rows, token.special, extra_classes=classes, card_extra=extra)

    body = grouped_html(texts, span, lambda group: group_text([texts[i] for i in group]))
    return f"<div class='token-stream answer-tokens'>{body}</div>"


def _top_rows(token: TokenRecord, context: Sequence[PieceLike]) -> list[tuple[str, str]]:
    return [
        (f"#{rank}", f"{alternative_text(context, alt)}  {alt.prob:.2%}")
        for rank, alt in enumerate(token.top, 1)
    ]


def templated_stream_html(pieces: Sequence[TokenPiece], answer_start: int) -> str:
    """Every token the model saw and wrote, special tokens included, whitespace visible."""
    texts = read_pieces(pieces)

    def span(index: int) -> str:
        piece, read = pieces[index], texts[index]
        role = "prompt" if index < answer_start else "answer"
        rows = [("token", piece.visible), *byte_rows(read), ("id", str(piece.id)), ("position", str(index))]
        rows.append(("part", role))
        text = cell_text(read) if read.split else piece.visible + ("\n" if "\n" in piece.text else "")
        return token_span(text, None, rows, piece.special, extra_classes=f"tok-{role}")

    body = grouped_html(texts, span, lambda group: visible_text(group_text([texts[i] for i in group])))
    return f"<div class='token-stream templated'>{body}</div>"


# --- characters split over byte tokens ----------------------------------------------------------


def byte_rows(read: TokenText) -> list[tuple[str, str]]:
    """The card row of a byte piece ('byte 1 of 3 of 美'); none for whole characters."""
    return [("character", read.describe())] if read.split else []


def cell_text(read: TokenText) -> str:
    """A byte token's own text under its character: its bytes in hex ('E7'), whole characters as text."""
    return " ".join(
        visible_text(part) if isinstance(part, str) else part.data.hex(" ").upper() for part in read.parts
    )


def grouped_html(
    texts: Sequence[TokenText], span: Callable[[int], str], glyph: Callable[[range], str]
) -> str:
    """Token spans in order; the byte tokens of a character stand in a group under its glyph
    (static/bytes.css), each keeping its own colour and card."""
    out = []
    for group in byte_groups(texts):
        spans = "".join(span(i) for i in group)
        if not spans or not any(texts[i].split for i in group):
            out.append(spans)
            continue
        text, n = glyph(group), len(group)
        title = f"{text} = {n} byte token{'s' * (n != 1)}: hover or click one for its numbers"
        out.append(
            f"<span class='tok-group'><span class='tok-glyph' title='{html.escape(title)}'>"
            f"{html.escape(text)}</span><span class='tok-bytes'>{spans}</span></span>"
        )
    return "".join(out)


def legend_html(hint: str = "hover or click a token for details") -> str:
    stops = "".join(
        f"<span class='tok' style='{probability_style(p)}'>{p:.0%}</span>" for p in (0.05, 0.25, 0.5, 0.75, 1)
    )
    return f"<div class='tok-legend'>Token probability: {stops} · {hint}</div>"


def step_text_spans(tokens: Sequence[TokenRecord], pieces: Sequence[str]) -> str:
    """A step path's tokens: pieces[i] is what token i adds to the decoded text (`stream_pieces`);
    a character's byte tokens stand under it, each with its numbers and entropy in its card."""
    texts = read_pieces(tokens)

    def span(i: int) -> str:
        token, read = tokens[i], texts[i]
        text = cell_text(read) if read.split else pieces[i]
        entropy = f"{token.entropy:.2f} nats" if token.entropy is not None else "unknown"
        rows = [*record_rows(token, read), ("entropy", entropy)]
        return token_span(text, token.prob, rows, token.special, extra_classes="" if text else "tok-partial")

    return grouped_html(texts, span, lambda group: group_text([texts[i] for i in group]))


def chain_text(tokens: dict[int, tuple[int, str]], chain: Sequence[int]) -> str:
    """The text of a chain of tree nodes (tokens: node -> (parent, visible token)), a split
    character once: its first bytes may lie in the ancestors, its last in the chain."""
    before: list[int] = []
    node = chain[0]
    while len(before) < 4 and node in tokens:
        node = tokens[node][0]
        if node in tokens:
            before.insert(0, node)
    pieces = [TokenPiece(n, tokens[n][1], tokens[n][1], False) for n in [*before, *chain]]
    return visible_text(group_text(read_pieces(pieces)[len(before) :]))

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
from playground.ui.i18n import DEFAULT, localize, t

# A token card's buttons are plain HTML: the token view turns their clicks into Gradio events
# with the position (and token) as event data: "select" forks, "click" opens Step by step.
# How each way of choosing a token reads on its card (engine/records.py SOURCES)
SOURCE_KEYS = {
    "greedy": "token.source.greedy",
    "sample": "token.source.sample",
    "pick": "token.source.pick",
    "force": "token.source.force",
    "given": "token.source.given",
    "beam": "token.source.beam",
}
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


def percent(prob: float | None, lang: str = DEFAULT) -> str:
    """A probability for a card: '12.34%', or 'unknown' (in lang) when the engine did not say."""
    return t("token.card.unknown", lang) if prob is None or math.isnan(prob) else f"{prob:.2%}"


def source_name(source: str, lang: str = DEFAULT) -> str:
    """How a token was chosen (a SOURCES code), in lang."""
    return t(SOURCE_KEYS[source], lang) if source in SOURCE_KEYS else source


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


def record_rows(
    token: TokenRecord, read: TokenText | None = None, lang: str = DEFAULT
) -> list[tuple[str, str]]:
    """The card rows every token record gets: id, probability, log-prob, rank, how it was chosen;
    read: the token as it reads in its text (a byte piece says which byte of which character)."""
    unknown = t("token.card.unknown", lang)
    rows = [
        (t("token.card.token", lang), t("token.card.id_of", lang, visible=token.visible, id=token.id)),
        *(byte_rows(read, lang) if read is not None else []),
        (t("token.card.probability", lang), percent(token.prob, lang)),
        (t("token.card.logprob", lang), unknown if math.isnan(token.logprob) else f"{token.logprob:.3f}"),
    ]
    if token.rank is not None:
        rows.append((t("token.card.rank", lang), str(token.rank)))
    if token.sampled_prob is not None:
        rows.append((t("token.card.after_sampling", lang), percent(token.sampled_prob, lang)))
    rows.append((t("token.card.chosen_by", lang), source_name(token.source, lang)))
    return rows


def alternative_text(context: Sequence[PieceLike], alt: Alternative, lang: str = DEFAULT) -> str:
    """An alternative as it reads after context: a byte piece says which byte of what it is."""
    if not alt.visible.startswith("<0x"):
        return alt.visible
    return localize(read_next(context, TokenPiece(alt.id, alt.visible, alt.visible, False)).candidate, lang)


def _fork_buttons(position: int, token: TokenRecord, context: Sequence[PieceLike], lang: str) -> str:
    """The card's alternatives as buttons that fork the answer, then 'Step by step from here'."""
    fork = html.escape(t("token.fork.title", lang), quote=True)
    buttons = "".join(
        f"<button class='tok-alt' data-pos='{position}' data-token='{alt.id}' title='{fork}'>#{rank} "
        f"{html.escape(alternative_text(context, alt, lang))} <b>{alt.prob:.1%}</b></button>"
        for rank, alt in enumerate(token.top, 1)
    )
    title = html.escape(t("token.open.title", lang), quote=True)
    words = html.escape(t("token.open", lang))
    step = f"<button class='tok-open' data-pos='{position}' title='{title}'>{words}</button>"
    return f"<span class='tok-alts'>{buttons}</span>{step}"


def answer_tokens_html(
    tokens: Sequence[TokenRecord],
    show_special: bool = False,
    forkable: bool = True,
    marked: int | None = None,
    lang: str = DEFAULT,
) -> str:
    """The answer as coloured tokens, in lang; the card shows probability, log-prob and the top
    alternatives, which fork the answer when clicked (forkable). A character's byte tokens stand under
    it. marked: the index of a token to mark (Compare: where two answers part)."""
    texts = read_pieces(tokens)

    def span(position: int) -> str:
        token, read = tokens[position], texts[position]
        if token.special and not show_special:
            return ""
        context = tokens[max(0, position - 4) : position]
        extra = _fork_buttons(position, token, context, lang) if forkable else ""
        rows = record_rows(token, read, lang) + ([] if forkable else _top_rows(token, context, lang))
        text = token.visible if token.special else cell_text(read) if read.split else token.text
        marks = (("tok-given", token.given), ("tok-parting", position == marked))
        classes = " ".join(name for name, on in marks if on)
        return token_span(text, token.prob, rows, token.special, extra_classes=classes, card_extra=extra)

    body = grouped_html(texts, span, lambda group: group_text([texts[i] for i in group]), lang)
    return f"<div class='token-stream answer-tokens'>{body}</div>"


def _top_rows(token: TokenRecord, context: Sequence[PieceLike], lang: str) -> list[tuple[str, str]]:
    return [
        (f"#{rank}", f"{alternative_text(context, alt, lang)}  {alt.prob:.2%}")
        for rank, alt in enumerate(token.top, 1)
    ]


def templated_stream_html(pieces: Sequence[TokenPiece], answer_start: int, lang: str = DEFAULT) -> str:
    """Every token the model saw and wrote, special tokens included, whitespace visible."""
    texts = read_pieces(pieces)

    def span(index: int) -> str:
        piece, read = pieces[index], texts[index]
        role, part = (
            ("prompt", "token.part.prompt") if index < answer_start else ("answer", "token.part.answer")
        )
        rows = [(t("token.card.token", lang), piece.visible), *byte_rows(read, lang)]
        rows += [(t("token.card.id", lang), str(piece.id)), (t("token.card.position", lang), str(index))]
        rows.append((t("token.card.part", lang), t(part, lang)))
        text = cell_text(read) if read.split else piece.visible + ("\n" if "\n" in piece.text else "")
        return token_span(text, None, rows, piece.special, extra_classes=f"tok-{role}")

    body = grouped_html(texts, span, lambda group: visible_text(group_text([texts[i] for i in group])), lang)
    return f"<div class='token-stream templated'>{body}</div>"


# --- characters split over byte tokens ----------------------------------------------------------


def byte_rows(read: TokenText, lang: str = DEFAULT) -> list[tuple[str, str]]:
    """The card row of a byte piece ('byte 1 of 3 of 美', in lang); none for whole characters."""
    return [(t("token.card.character", lang), localize(read.describe(), lang))] if read.split else []


def cell_text(read: TokenText) -> str:
    """A byte token's own text under its character: its bytes in hex ('E7'), whole characters as text."""
    return " ".join(
        visible_text(part) if isinstance(part, str) else part.data.hex(" ").upper() for part in read.parts
    )


def grouped_html(
    texts: Sequence[TokenText], span: Callable[[int], str], glyph: Callable[[range], str], lang: str = DEFAULT
) -> str:
    """Token spans in order; the byte tokens of a character stand in a group under its glyph
    (static/bytes.css), each keeping its own colour and card; the glyph's tooltip in lang."""
    out = []
    for group in byte_groups(texts):
        spans = "".join(span(i) for i in group)
        if not spans or not any(texts[i].split for i in group):
            out.append(spans)
            continue
        text, n = glyph(group), len(group)
        title = t("token.group.one" if n == 1 else "token.group.many", lang, text=text, n=n)
        out.append(
            f"<span class='tok-group'><span class='tok-glyph' title='{html.escape(title)}'>"
            f"{html.escape(text)}</span><span class='tok-bytes'>{spans}</span></span>"
        )
    return "".join(out)


def legend_html(hint: str = "", lang: str = DEFAULT) -> str:
    """The probability colours' legend, and a hint (default: hover or click a token), in lang."""
    stops = "".join(
        f"<span class='tok' style='{probability_style(p)}'>{p:.0%}</span>" for p in (0.05, 0.25, 0.5, 0.75, 1)
    )
    said = t("token.legend", lang, stops=stops, hint=html.escape(hint or t("token.legend.hint", lang)))
    return f"<div class='tok-legend'>{said}</div>"


def step_text_spans(tokens: Sequence[TokenRecord], pieces: Sequence[str], lang: str = DEFAULT) -> str:
    """A step path's tokens: pieces[i] is what token i adds to the decoded text (`stream_pieces`);
    a character's byte tokens stand under it, each with its numbers and entropy in its card."""
    texts = read_pieces(tokens)

    def span(i: int) -> str:
        token, read = tokens[i], texts[i]
        text = cell_text(read) if read.split else pieces[i]
        entropy = (
            t("token.card.nats", lang, value=token.entropy)
            if token.entropy is not None
            else t("token.card.unknown", lang)
        )
        rows = [*record_rows(token, read, lang), (t("token.card.entropy", lang), entropy)]
        return token_span(text, token.prob, rows, token.special, extra_classes="" if text else "tok-partial")

    return grouped_html(texts, span, lambda group: group_text([texts[i] for i in group]), lang)


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

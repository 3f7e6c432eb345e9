"""Compare > Tokens: one text under both tokenizers, each drawn as the Tokens lesson draws it (Under the
hood > Tokens: the text coloured by token, the ids, the characters cut into byte tokens), with each
model's count and the ratio of the two."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.errors import PlaygroundError
from playground.hood import tokens as tokens_lesson
from playground.hood.tokens import TokensResult, split_chars, words_of
from playground.ui.compare.sides import SIDES, SideEngines, side_columns, titled_view
from playground.ui.hood.tokens import token_view
from playground.ui.i18n import i18n, localize, t

TEXT = "今天天气很好 · unbelievable 😀"
OUTPUTS = ["tokens_ratio", *(f"tokens_{x}{part}" for x in SIDES for part in ("_title", "_view", "_summary"))]


def layout(w: dict[str, Any]) -> None:
    with gr.Row(equal_height=True):
        w["tokens_text"] = gr.Textbox(
            TEXT,
            label=i18n("compare.tokens.text"),
            info=i18n("compare.tokens.text.info"),
            lines=2,
            scale=4,
            elem_id="compare-tokens-text",
        )
        w["tokens_run"] = gr.Button(
            i18n("compare.tokens.run"), variant="primary", scale=1, elem_id="compare-tokens-run"
        )
    w["tokens_ratio"] = gr.Markdown("", elem_id="compare-tokens-ratio")
    side_columns(w, lambda x: titled_view("tokens", x))


def run(engines: SideEngines, text: str) -> Iterator[dict[str, Any]]:
    """Load both sides, then the text under each tokenizer (no model forward)."""
    text = tokens_lesson.check_text(text)
    yield from engines.load()
    counts: list[int | None] = []
    views: dict[str, Any] = {}
    for index, choice in enumerate(engines.choices):
        letter, lang, engine = choice.letter, engines.lang, engines.engines[index]
        views[f"tokens_{letter}_title"] = f"**{choice.describe(lang)}**"
        if engine is None:
            views[f"tokens_{letter}_view"], views[f"tokens_{letter}_summary"] = "", engines.errors[index]
            counts.append(None)
            continue
        try:
            tokens = tokens_lesson.tokenize(engine, text)
        except PlaygroundError as exc:  # this side alone fails (a server gone): the other still shows
            views[f"tokens_{letter}_view"], views[f"tokens_{letter}_summary"] = (
                "",
                localize(exc.message, lang),
            )
            counts.append(None)
            continue
        result = TokensResult(text, tokens, words_of(text, tokens), split_chars(engine, tokens))
        views[f"tokens_{letter}_view"] = token_view(result)
        views[f"tokens_{letter}_summary"] = summary(result, lang)
        counts.append(len(tokens))
    views["tokens_ratio"] = ratio_line(counts, [c.key for c in engines.choices], engines.lang)
    yield views


def summary(result: TokensResult, lang: str) -> str:
    """'7 tokens for 6 characters: 0.86 characters per token; 6 hold only some bytes of a character.'"""
    n = len(result.tokens)
    return t(
        "compare.tokens.summary",
        lang,
        tokens=n,
        chars=len(result.text),
        per=len(result.text) / max(n, 1),
        bytes=sum(token.byte_piece for token in result.tokens),
    )


def ratio_line(counts: list[int | None], names: list[str], lang: str) -> str:
    """How many tokens B needs for A's one."""
    a, b = counts
    if not a or b is None:
        return ""
    return t("compare.tokens.ratio", lang, a=names[0], b=names[1], ratio=b / a, a_tokens=a, b_tokens=b)


def link_values(text: str) -> dict[str, Any]:
    return {"tokens_text": text}

"""Compare > Cross-scoring: each side's text scored by the other model, token by token (log-prob, rank,
surprise), and both models' log-probs on the same characters where their tokenizers cut the text
differently (playground/scoring.py: score_text, align_scores). A Compare chat fills in its question
and both answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.engine.base import Engine
from playground.engine.tokens import group_text, token_texts
from playground.errors import PlaygroundError
from playground.scoring import ScoredText, align_scores, score_text
from playground.ui.compare.sides import SIDES, SideEngines, side_columns, titled_view
from playground.ui.i18n import i18n, localize, t
from playground.ui.token_html import byte_rows, cell_text, grouped_html, percent, token_span

TABLE_HEADERS = [
    "compare.score.col.text",
    "compare.score.col.a_tokens",
    "compare.score.col.a_logprob",
    "compare.score.col.b_tokens",
    "compare.score.col.b_logprob",
    "compare.score.col.difference",
]
TEXT_LABELS = {"a": "compare.score.text_a", "b": "compare.score.text_b"}
OUTPUTS = [f"score_{x}{part}" for x in SIDES for part in ("_title", "_view", "_summary", "_table")]


def headers(lang: str) -> list[str]:
    return [t(key, lang) for key in TABLE_HEADERS]


def layout(w: dict[str, Any]) -> None:
    """The context, the two texts, the button, then one column per text."""
    with gr.Row():
        w["score_context"] = gr.Textbox(
            "", label=i18n("compare.score.context"), info=i18n("compare.score.context.info"), scale=4
        )
        w["score_chat"] = gr.Checkbox(
            True, label=i18n("compare.score.chat"), info=i18n("compare.score.chat.info"), scale=1
        )
    with gr.Row():
        for x in SIDES:
            w[f"score_{x}"] = gr.Textbox(
                "", label=i18n(TEXT_LABELS[x]), lines=2, elem_id=f"compare-score-{x}-text"
            )
    w["score_run"] = gr.Button(i18n("compare.score.run"), variant="primary", elem_id="compare-score-run")
    side_columns(w, _column)


def _column(x: str) -> dict[str, Any]:
    return {
        **titled_view("score", x),
        f"score_{x}_table": gr.Dataframe(
            headers=headers("en"),
            label=i18n("compare.score.table"),
            interactive=False,
            elem_id=f"compare-score-{x}-table",
        ),
    }


def context_of(context: str, chat: bool, system: str) -> str | list[dict[str, str]]:
    """What the texts are scored after: the plain text, or (chat) a user message read through each
    model's chat template, after the system prompt when there is one."""
    if not chat:
        return context
    messages = [{"role": "system", "content": system}] if system.strip() else []
    return [*messages, {"role": "user", "content": context}]


def run(engines: SideEngines, context: Any, texts: list[str]) -> Iterator[dict[str, Any]]:
    """Load both sides, then score each text under both models (one forward each)."""
    yield from engines.load()
    for index, letter in enumerate(SIDES):
        yield _text_views(engines, index, letter, context, texts[index])


def _text_views(engines: SideEngines, own: int, letter: str, context: Any, text: str) -> dict[str, Any]:
    """One text's column: its tokens under the other model, both models' totals, the aligned spans."""
    lang, other = engines.lang, 1 - own
    names = [c.key for c in engines.choices]
    views = {
        f"score_{letter}_title": t(
            "compare.score.title", lang, side=letter.upper(), other=SIDES[other].upper(), model=names[other]
        ),
        f"score_{letter}_view": "",
        f"score_{letter}_table": [],
    }
    if not text.strip():
        return {**views, f"score_{letter}_summary": t("compare.score.no_text", lang)}
    scores: list[ScoredText | str] = [_score(engines, i, context, text) for i in range(2)]
    lines = [_total(names[i], scores[i], i == own, lang) for i in (other, own)]
    if isinstance(scores[other], ScoredText):
        views[f"score_{letter}_view"] = scored_html(engines.engines[other], scores[other], lang)  # type: ignore[arg-type]
    if all(isinstance(s, ScoredText) for s in scores):
        try:
            views[f"score_{letter}_table"] = aligned_rows(*scores)  # type: ignore[arg-type]
        except PlaygroundError as exc:  # two tokenizers that can't be aligned: the scores stay
            lines.append(t("compare.score.unaligned", lang, why=localize(exc.message, lang)))
    return {**views, f"score_{letter}_summary": "\n\n".join(lines)}


def _score(engines: SideEngines, index: int, context: Any, text: str) -> ScoredText | str:
    """The text scored by side `index`'s model, or why not (in the session's language)."""
    engine = engines.engines[index]
    if engine is None:
        return engines.errors[index]
    try:
        return score_text(engine, context, text)
    except PlaygroundError as exc:
        return localize(exc.message, engines.lang)


def _total(model: str, scored: ScoredText | str, own: bool, lang: str) -> str:
    """'Under gemma-3-270m (its own model): log p = -8.21 over 12 tokens, 0.68 nats per token.'"""
    if isinstance(scored, str):
        return t("compare.score.failed", lang, model=model, why=scored)
    return t(
        "compare.score.total_own" if own else "compare.score.total",
        lang,
        model=model,
        logprob=scored.logprob,
        tokens=len(scored.tokens),
        surprise=scored.mean_surprise,
    )


def aligned_rows(a: ScoredText, b: ScoredText) -> list[list[Any]]:
    """One row per span of characters both tokenizations end on: its text, each model's tokens and
    log-prob there, and how much likelier model A finds it (nats)."""
    return [
        [
            span.text,
            len(span.a_tokens),
            round(span.a_logprob, 3),
            len(span.b_tokens),
            round(span.b_logprob, 3),
            round(span.difference, 3),
        ]
        for span in align_scores(a, b)
    ]


def scored_html(engine: Engine, scored: ScoredText, lang: str) -> str:
    """The text as that model's tokens, coloured by its probability; each card: log-prob, rank and
    surprise (a character's byte tokens stand under it, as in the Chat tab)."""
    texts, data = token_texts(engine.tokenizer, scored.ids), scored.text.encode()

    def span(index: int) -> str:
        token, read = scored.tokens[index], texts[index]
        start, end = token.byte_span
        text = cell_text(read) if read.split else data[start:end].decode(errors="replace")
        rows = [
            (t("compare.card.token", lang), f"{read.visible} (id {token.id})"),
            *byte_rows(read),
            (t("compare.card.probability", lang), percent(token.prob)),
            (t("compare.card.logprob", lang), f"{token.logprob:.3f}"),
            (t("compare.card.rank", lang), f"{token.rank:,}"),
            (t("compare.card.surprise", lang), t("compare.card.nats", lang, nats=token.surprise)),
        ]
        return token_span(text, token.prob, rows)

    body = grouped_html(texts, span, lambda group: group_text([texts[i] for i in group]))
    return f"<div class='token-stream compare-scored'>{body}</div>"


def link_values(context: str, chat: bool, texts: list[str]) -> dict[str, Any]:
    return {"score_context": context, "score_chat": chat, "score_a": texts[0], "score_b": texts[1]}


def check_texts(texts: list[str]) -> list[str]:
    """The two texts (at least one)."""
    texts = [str(text or "") for text in texts]
    if not any(text.strip() for text in texts):
        raise PlaygroundError(
            "Give at least one text to score: A's, B's or both.", key="compare.error.no_texts"
        )
    return texts

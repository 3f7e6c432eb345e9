"""The view of the lesson "Tokens are not words" (playground/hood/tokens.py)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any, ClassVar

import gradio as gr

from playground.engine.tokens import visible_text
from playground.hood import tokens as tokens_lesson
from playground.hood.tokens import (
    CHINESE,
    ENGLISH,
    LESSON,
    BpeMerges,
    SentenceCost,
    Token,
    TokensResult,
)
from playground.plots.hood import tokens as plots
from playground.ui.common import Widgets, connect
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, status, verdict
from playground.ui.i18n import DEFAULT, i18n, localize, t

TEXT = "It was unbelievable: 我爱你 😀 at https://example.com/a?b=1, 1234567 times."
PRESETS: dict[str, tuple[str, str]] = {  # name -> (text, the word whose merges are replayed)
    "unbelievable": ("unbelievable", "unbelievable"),
    "今天天气很好": ("今天天气很好", "天气"),
    "a URL": ("https://huggingface.co/docs/transformers/main_classes/tokenizer", "huggingface"),
    "1234567": ("1234567", "1234567"),
    "code": ("def square(x):\n    return x ** 2\n", "square"),
    "an emoji": ("I love it 😀👍🏽", "😀"),
}
PRESET_LABELS = {
    "a URL": "hood.tok.preset.url",
    "code": "hood.tok.preset.code",
    "an emoji": "hood.tok.preset.emoji",
}
COLOURS = (
    "rgba(42,125,225,0.30)",
    "rgba(44,160,44,0.30)",
    "rgba(228,87,46,0.30)",
    "rgba(148,103,189,0.32)",
    "rgba(227,169,0,0.35)",
    "rgba(23,190,207,0.30)",
)
MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace"
CELL = "style='padding:2px 6px'"  # table cells (the theme pads them for prose)


class TokensView(LessonView):
    key = "tok"
    lesson = LESSON
    label = "hood.tok.label"
    group = "tokens"
    run_label = "hood.tok.run"
    action = "hood.tok.action"
    explain = "hood.tok.explain"
    outputs = ("tok_view", "tok_chars", "tok_words", "tok_merges", "tok_languages")
    main = "tok_view"
    quick: ClassVar[dict[str, Any]] = {"tok_text": "unbelievable 我爱你 😀", "tok_word": "unbelievable"}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        w["tok_preset"] = gr.Radio(
            [(i18n(PRESET_LABELS[name]) if name in PRESET_LABELS else name, name) for name in PRESETS],
            value=None,
            label=i18n("hood.tok.presets"),
            info=i18n("hood.tok.presets.info"),
            elem_id="hood-tok-preset",
        )
        with gr.Row():
            w["tok_text"] = gr.Textbox(
                TEXT,
                label=i18n("hood.tok.text"),
                lines=2,
                scale=3,
                info=i18n("hood.tok.text.info"),  # says MAX_CHARS
                elem_id="hood-tok-text",
            )
            w["tok_word"] = gr.Textbox(
                "unbelievable",
                label=i18n("hood.tok.word"),
                scale=1,
                elem_id="hood-tok-word",
                info=i18n("hood.tok.word.info"),  # says MAX_WORD_CHARS
            )
        with gr.Row():
            info = i18n("hood.tok.sentence.info")
            w["tok_english"] = gr.Textbox(
                ENGLISH, label=i18n("hood.tok.english"), info=info, elem_id="hood-tok-english"
            )
            w["tok_chinese"] = gr.Textbox(
                CHINESE, label=i18n("hood.tok.chinese"), info=info, elem_id="hood-tok-chinese"
            )
        run_row(w, self)
        w["tok_view"] = gr.HTML(elem_id="hood-tok-view")
        with gr.Row():
            w["tok_chars"] = gr.Plot(label=i18n("hood.tok.plot.chars"), elem_id="hood-tok-chars")
            w["tok_words"] = gr.Plot(label=i18n("hood.tok.plot.words"), elem_id="hood-tok-words")
        with gr.Row():
            w["tok_merges"] = gr.HTML(elem_id="hood-tok-merges", scale=3)
            w["tok_languages"] = gr.Plot(
                scale=2, label=i18n("hood.tok.plot.languages"), elem_id="hood-tok-languages"
            )

    def run(
        self, ctx: RunContext, tok_text: str, tok_word: str, tok_english: str, tok_chinese: str
    ) -> Iterator[dict[str, Any]]:
        """Tokenize the text; replay one word's BPE merges; tokens and KV bytes of one sentence in
        English and in Chinese."""
        result = None
        for result in tokens_lesson.iter_run(
            ctx.engine, tok_text, tok_word, tok_english, tok_chinese, ctx.control
        ):
            yield self.views(result, final=False, lang=ctx.lang)
        if result is not None:
            yield self.views(result, final=True, lang=ctx.lang)

    def views(self, result: TokensResult, final: bool, lang: str = DEFAULT) -> dict[str, Any]:
        tokens = result.tokens
        views: dict[str, Any] = {
            **status(self, result.phase, final, lang),
            "tok_view": token_view(result, lang),
            "tok_chars": plots.chars_per_token_figure(
                [tick(token) for token in tokens],
                [f"{i + 1} {token.piece}" for i, token in enumerate(tokens)],
                [token.chars for token in tokens],
                [token.byte_piece for token in tokens],
                lang,
            ),
            "tok_words": plots.tokens_per_word_figure(
                [w.word for w in result.words], [w.tokens for w in result.words], lang
            ),
        }
        if result.word:
            views["tok_merges"] = merges_view(result.word, result.merges, result.merges_note, lang)
        if result.sentences:
            views["tok_languages"] = plots.languages_figure(
                [localize(s.language, lang) for s in result.sentences],
                [len(s.ids) for s in result.sentences],
                [s.formula_bytes for s in result.sentences],
                lang,
            )
        if final:
            views["tok_summary"] = summary(result, lang)
        return views

    def wire(self, w: Widgets, tab: TabServices) -> None:
        def hood_tokens_preset(tok_preset: str | None) -> dict[str, Any]:
            """A preset fills the text and the word (nothing runs until Run)."""
            if tok_preset not in PRESETS:
                return {}
            text, word = PRESETS[tok_preset]
            return {"tok_text": text, "tok_word": word}

        connect(
            w["tok_preset"].input, hood_tokens_preset, w, ["tok_text", "tok_word"], api_name=None, model=False
        )


def tick(token: Token) -> str:
    """A token's label under its bar: its piece, or its character and byte for a byte piece."""
    if token.byte_piece and token.char is not None:
        return f"{visible_text(token.char)}{token.byte_index}/{token.byte_count}"
    return token.piece if len(token.piece) <= 7 else token.piece[:6] + "…"


# --- the main view: the text coloured by token, its ids, the characters split over bytes -----------


def token_view(result: TokensResult, lang: str = DEFAULT) -> str:
    """The text coloured by token (whitespace visible; a character's byte tokens as one box with
    the character and their count), the ids in the same colours, and the split characters."""
    groups = {g.tokens[0]: g for g in result.split}
    spans, ids, i, colour = [], [], 0, 0
    while i < len(result.tokens):
        group = groups.get(i)
        members = list(group.tokens) if group else [i]
        fill = COLOURS[colour % len(COLOURS)]
        spans.append(_box(result, members, group.text if group else None, fill, lang))
        chip = f"background:{fill};border-radius:3px;padding:0 2px"
        ids += [f"<span style='{chip}'>{result.tokens[m].id}</span>" for m in members]
        i, colour = members[-1] + 1, colour + 1
    cards = "".join(_card(result, g.text, list(g.tokens), lang) for g in result.split)
    split_title = t("hood.tok.view.split", lang)
    split = f"<p style='margin:6px 0 0'><b>{split_title}</b> {cards}</p>" if cards else ""
    count = t("hood.tok.view.ids", lang, count=len(result.tokens))
    return (
        "<div style='max-height:330px;overflow:auto'>"
        f"<div style='{MONO};font-size:1.15em;line-height:2;white-space:pre-wrap'>{''.join(spans)}</div>"
        f"<p style='{MONO};margin:6px 0 0;line-height:1.7'><b>{count}</b> "
        f"{' '.join(ids)}</p>{split}</div>"
    )


def _box(result: TokensResult, members: list[int], chars: str | None, fill: str, lang: str) -> str:
    tokens = [result.tokens[m] for m in members]
    if chars is None:
        token = tokens[0]
        (c0, c1), (b0, b1) = token.char_span, token.byte_span
        title = t("hood.tok.view.title", lang, id=token.id, c0=c0, c1=c1, b0=b0, b1=b1)
        shown, extra = token.piece, ""
    else:
        title = "; ".join(f"id {t.id}: {t.piece}" for t in tokens)
        shown, extra = visible_text(chars), f"<sub style='font-size:0.65em'>×{len(tokens)}</sub>"
    border = "1px dashed rgba(128,128,128,0.8)" if chars is not None else "none"
    box = f"background:{fill};border:{border};border-radius:3px;padding:0 2px;margin:0 1px"
    newline = "<br>" if any("\n" in t.alone for t in tokens) else ""
    return f"<span title='{html.escape(title)}' style='{box}'>{html.escape(shown)}{extra}</span>{newline}"


def _card(result: TokensResult, chars: str, members: list[int], lang: str) -> str:
    tokens = [result.tokens[m] for m in members]
    data = result.text.encode()
    pieces = " + ".join(
        f"<code>{_bytes(data[token.byte_span[0] : token.byte_span[1]])}</code> ({token.id})"
        for token in tokens
    )
    card = t("hood.tok.view.card", lang, count=len(tokens), pieces=pieces)
    return (
        f"<span style='display:inline-block;margin:2px 8px 2px 0'><b>{html.escape(visible_text(chars))}</b> "
        f"{card}</span>"
    )


def _bytes(data: bytes) -> str:
    """A token's bytes: printable ASCII as itself (a space as ␣), every other byte in hex."""
    return " ".join(visible_text(chr(b)) if 0x20 <= b < 0x7F else f"{b:02X}" for b in data)


# --- the merges, step by step ---------------------------------------------------------------------


def merges_view(word: str, merges: BpeMerges | None, note: str, lang: str = DEFAULT) -> str:
    """One word's BPE merges as a table: step, the pair merged (its rank), the pieces after it."""
    head = f"<p><b>{t('hood.tok.merges.title', lang, word=html.escape(repr(word)))}</b></p>"
    if merges is None:
        return f"{head}<p>{html.escape(localize(note, lang))}</p>"
    rows = [_row("0", t("hood.tok.merges.start", lang), "", merges.start)]
    rows += [_row(str(s.step), " + ".join(s.pair), f"{s.rank:,}", s.pieces) for s in merges.steps]
    lines = []
    if len(merges.pretokens) > 1:
        cut = " | ".join(html.escape(p) for p in merges.pretokens)
        lines.append(t("hood.tok.merges.pretokens", lang, cut=cut))
    if not merges.steps:
        lines.append(t("hood.tok.merges.none", lang))
    same = t("hood.tok.merges.same" if merges.final == merges.tokens else "hood.tok.merges.differs", lang)
    pieces = " | ".join(_pieces(merges))
    lines.append(t("hood.tok.merges.end", lang, merges=len(merges.steps), pieces=pieces, same=same))
    heads = "".join(f"<th {CELL}>{t(key, lang)}</th>" for key in MERGE_HEADERS)
    table = (
        "<div style='max-height:300px;overflow:auto'><table style='font-size:0.9em;margin:0'>"
        f"<tr>{heads}</tr>"
        f"{''.join(rows)}</table></div>"
    )
    return head + table + "".join(f"<p>{line}</p>" for line in lines)


MERGE_HEADERS = (
    "hood.tok.merges.step",
    "hood.tok.merges.pair",
    "hood.tok.merges.rank",
    "hood.tok.merges.pieces",
)


def _row(step: str, pair: str, rank: str, pieces: Any) -> str:
    shown = "|".join(html.escape(p) for p in pieces)
    mono = f"style='{MONO};padding:2px 6px'"
    return (
        f"<tr><td {CELL}>{step}</td><td {mono}>{html.escape(pair)}</td><td {CELL}>{rank}</td>"
        f"<td {mono}>{shown}</td></tr>"
    )


def _pieces(merges: BpeMerges) -> list[str]:
    return [html.escape(p) for p in (merges.steps[-1].pieces if merges.steps else merges.start)]


# --- the summary ----------------------------------------------------------------------------------


def summary(result: TokensResult, lang: str = DEFAULT) -> str:
    tokens, words = result.tokens, result.words
    noun = "hood.tok.sum.word" if len(words) == 1 else "hood.tok.sum.words"
    lines = [
        t(
            "hood.tok.sum.tokens",
            lang,
            tokens=len(tokens),
            chars=len(result.text),
            per_token=result.chars_per_token,
            words=t(noun, lang, words=len(words)),
            per_word=len(tokens) / max(len(words), 1),
        )
    ]
    pieces = [token for token in tokens if token.byte_piece]
    if pieces:
        alone = sum("\ufffd" in token.alone for token in pieces)
        lines.append(t("hood.tok.sum.bytes", lang, pieces=len(pieces), alone=alone))
    if result.merges is not None:
        merges = result.merges
        word, split = html.escape(result.word, quote=False), " | ".join(_pieces(merges))
        lines.append(t("hood.tok.sum.merges", lang, word=word, pieces=split, merges=len(merges.steps)))
    elif result.merges_note:
        lines.append(t("hood.tok.sum.no_merges", lang, note=localize(result.merges_note, lang)))
    lines += [_cost(s, result.dtype, lang) for s in result.sentences]
    if len(result.sentences) == 2 and result.sentences[0].ids:
        english, chinese = result.sentences
        ratio = len(chinese.ids) / len(english.ids)
        kv = "" if chinese.formula_bytes is None else t("hood.tok.sum.ratio_kv", lang, ratio=ratio)
        lines.append(t("hood.tok.sum.ratio", lang, ratio=ratio, kv=kv))
    if result.kv_note:
        lines.append(t("hood.tok.sum.kv_note", lang, note=localize(result.kv_note, lang)))
    return "\n\n".join(lines)


def _cost(sentence: SentenceCost, dtype: str, lang: str) -> str:
    language, tokens = localize(sentence.language, lang), len(sentence.ids)
    if sentence.formula_bytes is None:
        return t("hood.tok.sum.sentence", lang, language=language, tokens=tokens)
    check = ""
    if sentence.measured_bytes is not None:
        same = sentence.measured_bytes == sentence.formula_bytes
        said = verdict(same, "hood.tok.sum.equal", "hood.tok.sum.different", lang)
        differs = "" if same else t("hood.tok.sum.measured", lang, measured=sentence.measured_bytes)
        check = t("hood.tok.sum.check", lang, verdict=said, differs=differs)
    formula = sentence.formula_bytes
    return t(
        "hood.tok.sum.cost",
        lang,
        language=language,
        tokens=tokens,
        bytes=formula,
        dtype=dtype,
        mib=formula / 2**20,
        check=check,
    )


VIEW = TokensView()

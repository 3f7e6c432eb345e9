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
    MAX_CHARS,
    MAX_WORD_CHARS,
    BpeMerges,
    SentenceCost,
    Token,
    TokensResult,
)
from playground.plots.hood import tokens as plots
from playground.ui.common import Widgets, connect
from playground.ui.hood.base import HoodEnv, LessonView, RunContext, TabServices, run_row, status, verdict

TEXT = "It was unbelievable: 我爱你 😀 at https://example.com/a?b=1, 1234567 times."
PRESETS: dict[str, tuple[str, str]] = {  # label -> (text, the word whose merges are replayed)
    "unbelievable": ("unbelievable", "unbelievable"),
    "今天天气很好": ("今天天气很好", "天气"),
    "a URL": ("https://huggingface.co/docs/transformers/main_classes/tokenizer", "huggingface"),
    "1234567": ("1234567", "1234567"),
    "code": ("def square(x):\n    return x ** 2\n", "square"),
    "an emoji": ("I love it 😀👍🏽", "😀"),
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
    label = "Tokens"
    group = "tokens"
    run_label = "Run: tokenize"
    explain = (
        "The model never sees letters or words, only **token ids**: pieces cut by its tokenizer, often "
        "inside a word, and for Chinese or emoji often single bytes of one character. BPE built those "
        "pieces by merging the most frequent pairs of bytes, in the order of its merges table."
    )
    outputs = ("tok_view", "tok_chars", "tok_words", "tok_merges", "tok_languages")
    main = "tok_view"
    quick: ClassVar[dict[str, Any]] = {"tok_text": "unbelievable 我爱你 😀", "tok_word": "unbelievable"}

    def layout(self, w: dict[str, Any], env: HoodEnv) -> None:
        w["tok_preset"] = gr.Radio(
            list(PRESETS),
            value=None,
            label="presets",
            info="Fill the text and the word",
            elem_id="hood-tok-preset",
        )
        with gr.Row():
            w["tok_text"] = gr.Textbox(
                TEXT,
                label="text",
                lines=2,
                scale=3,
                info=f"At most {MAX_CHARS:,} characters",
                elem_id="hood-tok-text",
            )
            w["tok_word"] = gr.Textbox(
                "unbelievable",
                label="word whose BPE merges to replay",
                scale=1,
                elem_id="hood-tok-word",
                info=f"Blank: the text's first word; at most {MAX_WORD_CHARS} characters",
            )
        with gr.Row():
            info = "The model reads it: its KV cache is measured"
            w["tok_english"] = gr.Textbox(
                ENGLISH, label="a sentence in English", info=info, elem_id="hood-tok-english"
            )
            w["tok_chinese"] = gr.Textbox(
                CHINESE, label="the same in Chinese", info=info, elem_id="hood-tok-chinese"
            )
        run_row(w, self)
        w["tok_view"] = gr.HTML(elem_id="hood-tok-view")
        with gr.Row():
            w["tok_chars"] = gr.Plot(label="characters per token", elem_id="hood-tok-chars")
            w["tok_words"] = gr.Plot(label="tokens per word", elem_id="hood-tok-words")
        with gr.Row():
            w["tok_merges"] = gr.HTML(elem_id="hood-tok-merges", scale=3)
            w["tok_languages"] = gr.Plot(
                scale=2, label="the same sentence: tokens and KV cache", elem_id="hood-tok-languages"
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
            yield self.views(result, final=False)
        if result is not None:
            yield self.views(result, final=True)

    def views(self, result: TokensResult, final: bool) -> dict[str, Any]:
        tokens = result.tokens
        views: dict[str, Any] = {
            **status(self, result.phase, final),
            "tok_view": token_view(result),
            "tok_chars": plots.chars_per_token_figure(
                [tick(t) for t in tokens],
                [f"{i + 1} {t.piece}" for i, t in enumerate(tokens)],
                [t.chars for t in tokens],
                [t.byte_piece for t in tokens],
            ),
            "tok_words": plots.tokens_per_word_figure(
                [w.word for w in result.words], [w.tokens for w in result.words]
            ),
        }
        if result.word:
            views["tok_merges"] = merges_view(result.word, result.merges, result.merges_note)
        if result.sentences:
            views["tok_languages"] = plots.languages_figure(
                [s.language for s in result.sentences],
                [len(s.ids) for s in result.sentences],
                [s.formula_bytes for s in result.sentences],
            )
        if final:
            views["tok_summary"] = summary(result)
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


def token_view(result: TokensResult) -> str:
    """The text coloured by token (whitespace visible; a character's byte tokens as one box with
    the character and their count), the ids in the same colours, and the split characters."""
    groups = {g.tokens[0]: g for g in result.split}
    spans, ids, i, colour = [], [], 0, 0
    while i < len(result.tokens):
        group = groups.get(i)
        members = list(group.tokens) if group else [i]
        fill = COLOURS[colour % len(COLOURS)]
        spans.append(_box(result, members, group.text if group else None, fill))
        chip = f"background:{fill};border-radius:3px;padding:0 2px"
        ids += [f"<span style='{chip}'>{result.tokens[m].id}</span>" for m in members]
        i, colour = members[-1] + 1, colour + 1
    cards = "".join(_card(result, g.text, list(g.tokens)) for g in result.split)
    split = f"<p style='margin:6px 0 0'><b>Characters cut into byte tokens:</b> {cards}</p>" if cards else ""
    return (
        "<div style='max-height:330px;overflow:auto'>"
        f"<div style='{MONO};font-size:1.15em;line-height:2;white-space:pre-wrap'>{''.join(spans)}</div>"
        f"<p style='{MONO};margin:6px 0 0;line-height:1.7'><b>{len(result.tokens)} ids:</b> "
        f"{' '.join(ids)}</p>{split}</div>"
    )


def _box(result: TokensResult, members: list[int], chars: str | None, fill: str) -> str:
    tokens = [result.tokens[m] for m in members]
    if chars is None:
        token = tokens[0]
        (c0, c1), (b0, b1) = token.char_span, token.byte_span
        title = f"id {token.id} · characters {c0}–{c1} · bytes {b0}–{b1}"
        shown, extra = token.piece, ""
    else:
        title = "; ".join(f"id {t.id}: {t.piece}" for t in tokens)
        shown, extra = visible_text(chars), f"<sub style='font-size:0.65em'>×{len(tokens)}</sub>"
    border = "1px dashed rgba(128,128,128,0.8)" if chars is not None else "none"
    box = f"background:{fill};border:{border};border-radius:3px;padding:0 2px;margin:0 1px"
    newline = "<br>" if any("\n" in t.alone for t in tokens) else ""
    return f"<span title='{html.escape(title)}' style='{box}'>{html.escape(shown)}{extra}</span>{newline}"


def _card(result: TokensResult, chars: str, members: list[int]) -> str:
    tokens = [result.tokens[m] for m in members]
    data = result.text.encode()
    pieces = " + ".join(
        f"<code>{_bytes(data[t.byte_span[0] : t.byte_span[1]])}</code> ({t.id})" for t in tokens
    )
    return (
        f"<span style='display:inline-block;margin:2px 8px 2px 0'><b>{html.escape(visible_text(chars))}</b> "
        f"= {len(tokens)} byte tokens: {pieces}</span>"
    )


def _bytes(data: bytes) -> str:
    """A token's bytes: printable ASCII as itself (a space as ␣), every other byte in hex."""
    return " ".join(visible_text(chr(b)) if 0x20 <= b < 0x7F else f"{b:02X}" for b in data)


# --- the merges, step by step ---------------------------------------------------------------------


def merges_view(word: str, merges: BpeMerges | None, note: str) -> str:
    """One word's BPE merges as a table: step, the pair merged (its rank), the pieces after it."""
    head = f"<p><b>BPE merges of {html.escape(repr(word))}</b></p>"
    if merges is None:
        return f"{head}<p>{html.escape(note)}</p>"
    rows = [_row("0", "the word's bytes", "", merges.start)]
    rows += [_row(str(s.step), " + ".join(s.pair), f"{s.rank:,}", s.pieces) for s in merges.steps]
    lines = []
    if len(merges.pretokens) > 1:
        cut = " | ".join(html.escape(p) for p in merges.pretokens)
        lines.append(f"The pre-tokenizer cut it first into {cut}: merges never cross those cuts.")
    if not merges.steps:
        lines.append("No pair of its pieces is in the merges table: each stays a token.")
    same = "the tokenizer's own split ✓" if merges.final == merges.tokens else "NOT the tokenizer's split ✗"
    lines.append(f"{len(merges.steps)} merges, ending at {' | '.join(_pieces(merges))}: <b>{same}</b>.")
    heads = "".join(f"<th {CELL}>{h}</th>" for h in ("step", "pair merged", "rank", "pieces after it"))
    table = (
        "<div style='max-height:300px;overflow:auto'><table style='font-size:0.9em;margin:0'>"
        f"<tr>{heads}</tr>"
        f"{''.join(rows)}</table></div>"
    )
    return head + table + "".join(f"<p>{line}</p>" for line in lines)


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


def summary(result: TokensResult) -> str:
    tokens, words = result.tokens, result.words
    noun = "word" if len(words) == 1 else "words"
    lines = [
        f"**{len(tokens):,} tokens** for {len(result.text):,} characters: **{result.chars_per_token:.2f} "
        f"characters per token**; {len(words):,} {noun} (text between spaces), "
        f"{len(tokens) / max(len(words), 1):.2f} tokens per word."
    ]
    pieces = [t for t in tokens if t.byte_piece]
    if pieces:
        alone = sum("\ufffd" in t.alone for t in pieces)
        lines.append(
            f"{len(pieces)} tokens hold only some bytes of a character; {alone} of them decode alone to “�”."
        )
    if result.merges is not None:
        merges = result.merges
        lines.append(
            f"“{html.escape(result.word, quote=False)}” → {' | '.join(_pieces(merges))} after "
            f"{len(merges.steps)} BPE merges, the tokenizer's own split."
        )
    elif result.merges_note:
        lines.append(f"Merges: {result.merges_note}")
    lines += [_cost(s, result.dtype) for s in result.sentences]
    if len(result.sentences) == 2 and result.sentences[0].ids:
        english, chinese = result.sentences
        ratio = len(chinese.ids) / len(english.ids)
        kv = "" if chinese.formula_bytes is None else f", so {ratio:.2f}× the KV bytes"
        lines.append(f"The same sentence in Chinese takes **{ratio:.2f}×** the tokens{kv}.")
    if result.kv_note:
        lines.append(f"KV cache not measured: {result.kv_note}")
    return "\n\n".join(lines)


def _cost(sentence: SentenceCost, dtype: str) -> str:
    if sentence.formula_bytes is None:
        return f"{sentence.language}: **{len(sentence.ids)} tokens**."
    line = (
        f"{sentence.language}: **{len(sentence.ids)} tokens** → {sentence.formula_bytes:,} bytes of KV cache "
        f"in {dtype} ({sentence.formula_bytes / 2**20:.2f} MiB) by the KV tab's formula"
    )
    if sentence.measured_bytes is not None:
        line += ", " + verdict(
            sentence.measured_bytes == sentence.formula_bytes, "measured: equal", "measured: different"
        )
        if sentence.measured_bytes != sentence.formula_bytes:
            line += f" ({sentence.measured_bytes:,} bytes)"
    return line + "."


VIEW = TokensView()

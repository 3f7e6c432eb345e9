"""Tokens are not words: how the loaded model's own tokenizer cuts a text, and why.

    tokenize(engine, "unbelievable")          # un | belie | vable: 3 tokens, with ids and spans
    tokenize(engine, "我爱你")                  # 7 byte-level tokens: each alone decodes to "�"
    bpe_merges(engine, "unbelievable").steps  # the BPE merges that built that split, one at a time

`tokenize` is the tokenizer itself (its ids and its offsets), read token by token: the characters
and bytes of the text each token covers, and whether it holds only some bytes of a character.
`bpe_merges` replays the tokenizer's own merges table on one word: it starts from the word's bytes
and applies the lowest-ranked merge until none applies, and it ends exactly where the tokenizer
does (else it says so rather than show a wrong replay). The lesson run adds what each of two
sentences of the same meaning costs in KV-cache bytes, by the KV tab's formula and measured.
"""

from __future__ import annotations

import json
import re
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from playground.engine.base import Engine
from playground.engine.control import Control, run_to_end
from playground.engine.tokens import TokenText, byte_groups, group_text, token_bytes, token_piece, token_texts
from playground.errors import PlaygroundError
from playground.hood.common import Lesson
from playground.kv import kv_cache_bytes
from playground.messages import Message

__all__ = [
    "LESSON",
    "BpeMerges",
    "MergeStep",
    "Token",
    "TokensResult",
    "bpe_merges",
    "iter_run",
    "text_tokens",
    "tokenize",
]

MAX_CHARS = 2000  # a text longer than this is refused: the view colours every token of it
MAX_WORD_CHARS = 48  # the merges replay one word (its table grows one row per merge)
ENGLISH = "The weather is very nice today."
CHINESE = "今天天气很好。"  # the same sentence in Chinese
TEXT = Message("hood.tokens.name.text", "text")  # what check_text names
LANGUAGES = (
    (Message("hood.tokens.name.english", "English sentence"), Message("hood.tokens.english", "English")),
    (Message("hood.tokens.name.chinese", "Chinese sentence"), Message("hood.tokens.chinese", "Chinese")),
)


@dataclass(frozen=True)
class Token:
    """One token of a text, as the tokenizer cut it."""

    id: int
    piece: str  # how it reads: '␣the', '美 (byte 1/3)' for a byte piece
    raw: str  # the vocabulary's own string ('Ġthe', 'ç')
    char_span: tuple[int, int]  # [start, end) in the text's characters (the tokenizer's offsets)
    byte_span: tuple[int, int]  # [start, end) in the text's UTF-8 bytes
    byte_piece: bool  # it holds only some bytes of a character
    char: str | None  # that character (byte pieces only)
    byte_index: int | None  # its first byte is byte i of the character...
    byte_count: int | None  # ...of n bytes
    alone: str  # what it decodes to on its own ('�' for a byte piece)
    chars: float  # characters it carries: 1/3 for one byte of a 3-byte character


@dataclass(frozen=True)
class WordTokens:
    """One word of the text (the text between spaces) and how many tokens cover it."""

    word: str
    char_span: tuple[int, int]
    tokens: int


@dataclass(frozen=True)
class SplitChars:
    """Byte tokens that together spell one or more characters ('美 = 3 byte tokens')."""

    text: str  # the characters
    tokens: tuple[int, ...]  # indices into the text's tokens


@dataclass(frozen=True)
class MergeStep:
    """One BPE merge: the pair joined (its rank in the merges table) and the pieces after it."""

    step: int  # 1, 2, ...
    pair: tuple[str, str]  # the two pieces joined, as they read
    rank: int  # its line in the merges table (0 = learnt first, applied first)
    pieces: tuple[str, ...]  # every piece of the word after this merge, as they read
    raw: tuple[str, ...]  # the same in the vocabulary's own strings


@dataclass
class BpeMerges:
    """A word's BPE merges replayed from the tokenizer's own table."""

    word: str
    pretokens: list[str]  # how the pre-tokenizer cut the word first (merges never cross these)
    start: list[str]  # the symbols before any merge: the word's bytes, as they read
    steps: list[MergeStep]
    tokens: list[str]  # the tokenizer's own split (tokenizer.tokenize), its raw strings
    ids: list[int]
    start_raw: list[str] = field(default_factory=list)  # `start` in the vocabulary's own strings

    @property
    def final(self) -> list[str]:
        """The raw pieces after the last merge (== tokens)."""
        return list(self.steps[-1].raw) if self.steps else list(self.start_raw)


@dataclass(frozen=True)
class SentenceCost:
    """One sentence's tokens and what their keys and values cost."""

    language: str  # a Message ("English"): the UI says it in the page's language
    text: str
    ids: list[int]
    formula_bytes: int | None  # the KV tab's formula at len(ids) tokens (None: no config or dtype here)
    measured_bytes: int | None  # the model's own cache after reading it (None: not measurable here)


@dataclass
class TokensResult:
    """What the lesson shows for one text (filled in phases)."""

    text: str
    tokens: list[Token] = field(default_factory=list)
    words: list[WordTokens] = field(default_factory=list)
    split: list[SplitChars] = field(default_factory=list)
    word: str = ""  # the word whose merges are replayed
    merges: BpeMerges | None = None
    merges_note: str = ""  # why there are no merges to show ('' when there are; a Message)
    sentences: list[SentenceCost] = field(default_factory=list)
    dtype: str = ""  # the KV cache's dtype
    kv_note: str = ""  # why the cache was not measured ('' when it was)
    phase: str = ""  # what was just done (a Message: the status line says it in the page's language)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def chars_per_token(self) -> float:
        return len(self.text) / max(len(self.tokens), 1)


# --- tokenize --------------------------------------------------------------------------------


def check_text(text: Any, what: str = TEXT) -> str:
    """The text itself, or a clear message for a missing, empty or too long one (what: a Message)."""
    if not isinstance(text, str) or not text:
        raise PlaygroundError(
            "The {what} is empty: type something to tokenize.", key="hood.tokens.error.empty", what=what
        )
    if len(text) > MAX_CHARS:
        raise PlaygroundError(
            "The {what} has {chars:,} characters; this lesson reads at most {most:,}: shorten it.",
            key="hood.tokens.error.too_long",
            what=what,
            chars=len(text),
            most=MAX_CHARS,
        )
    return text


def tokenize(lm: Engine, text: str) -> list[Token]:
    """The tokens of text (no special tokens added), with the tokenizer's own ids and offsets."""
    return text_tokens(lm.tokenizer, check_text(text))


def text_tokens(tokenizer: Any, text: str) -> list[Token]:
    """tokenize for any length of text (playground.scoring reads whole answers with it)."""
    if not getattr(tokenizer, "is_fast", False):
        raise PlaygroundError(
            "Token offsets need a fast (Rust) tokenizer, and this one is not.", key="hood.tokens.error.slow"
        )
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [int(i) for i in encoded.input_ids]
    offsets = [(int(s), int(e)) for s, e in encoded.offset_mapping]
    texts = token_texts(tokenizer, ids)
    raws = tokenizer.convert_ids_to_tokens(ids)
    spans = byte_spans(tokenizer, text, ids, offsets)
    return [
        Token(
            id=i,
            piece=t.visible,
            raw=str(raw),
            char_span=chars,
            byte_span=span,
            byte_piece=t.split,
            char=t.char,
            byte_index=t.byte_index,
            byte_count=t.byte_count,
            alone=token_piece(tokenizer, i).text,
            chars=carried(t),
        )
        for i, t, raw, chars, span in zip(ids, texts, raws, offsets, spans, strict=True)
    ]


def byte_spans(
    tokenizer: Any, text: str, ids: Sequence[int], offsets: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Each token's [start, end) in text.encode(): the tokens' own bytes laid end to end when they
    spell the text exactly (byte-level BPE); else the bytes of each token's characters."""
    data = [token_bytes(tokenizer, i) for i in ids]
    if all(d is not None for d in data) and b"".join(d or b"" for d in data) == text.encode():
        spans, at = [], 0
        for d in data:
            spans.append((at, at + len(d or b"")))
            at += len(d or b"")
        return spans
    return [(len(text[:s].encode()), len(text[:e].encode())) for s, e in offsets]


def carried(text: TokenText) -> float:
    """Characters a token carries: its whole ones, plus the share of bytes of a split one."""
    return sum(
        len(p) if isinstance(p, str) else (len(p.data) / p.size if p.size else 0.0) for p in text.parts
    )


def words_of(text: str, tokens: Sequence[Token]) -> list[WordTokens]:
    """Each word (text between spaces) with the number of tokens that cover part of it."""
    starts = [t.char_span[0] for t in tokens]  # both in text order
    ends = [t.char_span[1] for t in tokens]
    out = []
    for match in re.finditer(r"\S+", text):
        start, end = match.span()
        count = bisect_left(starts, end) - bisect_right(
            ends, start
        )  # begins before its end, ends after its start
        out.append(WordTokens(match.group(), (start, end), max(count, 0)))
    return out


def split_chars(lm: Engine, tokens: Sequence[Token]) -> list[SplitChars]:
    """The runs of byte tokens that spell characters together, each with its characters."""
    texts = token_texts(lm.tokenizer, [t.id for t in tokens])
    return [
        SplitChars(group_text([texts[i] for i in run]), tuple(run))
        for run in byte_groups(texts)
        if any(texts[i].split for i in run)
    ]


# --- BPE merges ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """A BPE tokenizer's model, read from its tokenizer.json."""

    kind: str  # the model type ("BPE", "WordPiece", "Unigram", ...)
    ranks: dict[tuple[str, str], int]
    vocab: dict[str, int]
    ignore_merges: bool
    byte_fallback: bool
    unk: str | None
    affixes: bool  # a continuing-subword prefix or end-of-word suffix (not replayed)


_tables: dict[int, tuple[Any, _Table]] = {}  # id(tokenizer) -> (tokenizer, its table)
_tables_lock = threading.Lock()


def _table(tokenizer: Any) -> _Table:
    """The tokenizer's model (kept per tokenizer: its JSON is megabytes)."""
    with _tables_lock:
        kept = _tables.get(id(tokenizer))
        if kept is not None and kept[0] is tokenizer:
            return kept[1]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise PlaygroundError(
            "This tokenizer is not a fast (Rust) one: its merges table cannot be read.",
            key="hood.tokens.error.no_table",
        )
    model = json.loads(backend.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model.get("merges", [])]
    table = _Table(
        kind=str(model.get("type", "unknown")),
        ranks={(a, b): rank for rank, (a, b) in enumerate(merges)},
        vocab=dict(model.get("vocab") or {}) if isinstance(model.get("vocab"), dict) else {},
        ignore_merges=bool(model.get("ignore_merges")),
        byte_fallback=bool(model.get("byte_fallback")),
        unk=model.get("unk_token"),
        affixes=bool(model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")),
    )
    with _tables_lock:
        if len(_tables) >= 4:
            _tables.clear()
        _tables[id(tokenizer)] = (tokenizer, table)
    return table


def check_word(tokenizer: Any, word: Any) -> str:
    """The word itself, or a clear message for an empty, long or special one."""
    if not isinstance(word, str) or not word:
        raise PlaygroundError(
            "The word is empty: type one word to replay its BPE merges.", key="hood.tokens.error.no_word"
        )
    if len(word) > MAX_WORD_CHARS:
        raise PlaygroundError(
            "The merges replay one word of at most {most} characters; this one has {chars}.",
            key="hood.tokens.error.long_word",
            most=MAX_WORD_CHARS,
            chars=len(word),
        )
    for added in getattr(tokenizer, "added_tokens_decoder", {}).values():
        content = getattr(added, "content", "")
        if content and content in word:
            raise PlaygroundError(
                "{word!r} holds the added token {content!r}, which the tokenizer matches whole before "
                "any BPE merge: type a plain word.",
                key="hood.tokens.error.added",
                word=word,
                content=content,
            )
    return word


def bpe_merges(lm: Engine, word: str) -> BpeMerges:
    """Replay the BPE merges that turn one word's bytes into the tokenizer's tokens (see BpeMerges).

    Merges apply inside each pre-token (the pre-tokenizer's cut: a space starts a new one, digits
    and punctuation are cut apart): the lowest-ranked pair present is joined, one step per merge,
    until no pair of the table is left. A tokenizer that is not BPE gets a clear message."""
    tokenizer = lm.tokenizer
    word = check_word(tokenizer, word)
    table = _table(tokenizer)
    if table.kind != "BPE":
        raise PlaygroundError(
            "This tokenizer is {kind}, not BPE: it has no merges to replay (its tokens are shown).",
            key="hood.tokens.error.not_bpe",
            kind=table.kind,
        )
    if table.affixes:
        raise PlaygroundError(
            "This BPE tokenizer marks word pieces with a prefix or suffix: not replayed.",
            key="hood.tokens.error.affixes",
        )
    pretokens = _pretokens(tokenizer.backend_tokenizer, word)
    words = [_symbols(table, p) for p in pretokens]
    start = [s for w in words for s in w]
    steps = list(_replay(tokenizer, table, words))
    tokens = [str(t) for t in tokenizer.tokenize(word)]
    result = BpeMerges(
        word,
        pretokens=[_read(tokenizer, table, p) for p in pretokens],
        start=[_read(tokenizer, table, s) for s in start],
        steps=steps,
        tokens=tokens,
        ids=[int(i) for i in tokenizer.convert_tokens_to_ids(tokens)],
        start_raw=start,
    )
    if result.final != tokens:
        raise PlaygroundError(
            "The merges replayed for {word!r} end at {final} but the tokenizer gives {tokens}: "
            "it does more than plain BPE here, so no replay is shown.",
            key="hood.tokens.error.replay",
            word=word,
            final=str(result.final),
            tokens=str(tokens),
        )
    return result


def _pretokens(backend: Any, word: str) -> list[str]:
    """The word normalized and cut by the tokenizer's own pre-tokenizer (BPE runs inside each)."""
    normalized = backend.normalizer.normalize_str(word) if backend.normalizer else word
    if backend.pre_tokenizer is None:
        return [normalized]
    return [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]


def _symbols(table: _Table, pretoken: str) -> list[str]:
    """A pre-token's symbols before any merge: its characters (in a byte-level tokenizer each
    stands for one byte), a character missing from the vocabulary as its bytes or as unknown."""
    if table.ignore_merges and pretoken in table.vocab:
        return [pretoken]  # the tokenizer takes a whole word of its vocabulary as is
    out: list[str] = []
    for char in pretoken:
        if char in table.vocab:
            out.append(char)
        elif table.byte_fallback:
            out.extend(f"<0x{b:02X}>" for b in char.encode())
        elif table.unk:
            out.append(table.unk)
    return out


def _replay(tokenizer: Any, table: _Table, words: list[list[str]]) -> Iterator[MergeStep]:
    """Join the lowest-ranked pair (the leftmost on a tie) of each pre-token until none is left."""
    step = 0
    for symbols in words:
        while True:
            pairs = [(table.ranks[p], i) for i, p in enumerate(pairwise(symbols)) if p in table.ranks]
            if not pairs:
                break
            rank, i = min(pairs)
            pair = (symbols[i], symbols[i + 1])
            symbols[i : i + 2] = [pair[0] + pair[1]]
            step += 1
            raw = tuple(s for word in words for s in word)
            pieces = tuple(_read(tokenizer, table, s) for s in raw)
            shown = (_read(tokenizer, table, pair[0]), _read(tokenizer, table, pair[1]))
            yield MergeStep(step, shown, rank, pieces, raw)


def _read(tokenizer: Any, table: _Table, symbol: str) -> str:
    """How a symbol of the table reads: its token's visible text (bytes as <0xNN>)."""
    token_id = table.vocab.get(symbol)
    return symbol if token_id is None else token_piece(tokenizer, token_id).visible


# --- the lesson run --------------------------------------------------------------------------


def first_word(text: str) -> str:
    """The text's first word (text between spaces), '' when it has none."""
    match = re.search(r"\S+", text or "")
    return match.group() if match else ""


def run(
    lm: Engine,
    text: str,
    word: str = "",
    english: str = ENGLISH,
    chinese: str = CHINESE,
    control: Control | None = None,
) -> TokensResult:
    """The whole lesson at once (see iter_run)."""
    return run_to_end(iter_run(lm, text, word, english, chinese, control))


def iter_run(
    lm: Engine,
    text: str,
    word: str = "",
    english: str = ENGLISH,
    chinese: str = CHINESE,
    control: Control | None = None,
) -> Iterator[TokensResult]:
    """The lesson: the text's tokens, one word's BPE merges (word '': the text's first word), and
    the tokens and KV bytes of the same sentence in English and in Chinese; yields after each."""
    result = TokensResult(check_text(text))
    sentences = [
        check_text(sentence, name) for sentence, (name, _) in zip((english, chinese), LANGUAGES, strict=True)
    ]
    result.tokens = tokenize(lm, text)
    result.words, result.split = words_of(text, result.tokens), split_chars(lm, result.tokens)
    count = len(result.tokens)
    result.phase = Message("hood.tokens.phase.tokens", "{tokens:,} tokens", tokens=count)
    yield result
    result.word = (word or "").strip() or first_word(text)
    try:
        result.merges = bpe_merges(lm, result.word)
    except PlaygroundError as exc:  # the tokens stand; the merges panel says why there are none
        result.merges_note = exc.message
    result.phase = Message(
        "hood.tokens.phase.merges", "{tokens:,} tokens · merges of {word!r}", tokens=count, word=result.word
    )
    yield result
    result.dtype = "" if lm.dtype is None else str(lm.dtype).removeprefix("torch.")
    for sentence, (_, language) in zip(sentences, LANGUAGES, strict=True):
        result.sentences.append(_cost(lm, result, language, sentence, control))
        result.phase = Message(
            "hood.tokens.phase.sentence",
            "{tokens:,} tokens · {language} sentence read",
            tokens=count,
            language=language,
        )
        yield result
    result.phase = _last_phase(result)
    yield result
    return result


def _last_phase(result: TokensResult) -> Message:
    """The whole run in one line: tokens, merges, the two sentences' tokens."""
    english, chinese = (len(s.ids) for s in result.sentences)
    merged = (
        Message(
            "hood.tokens.phase.merged",
            "{merges} merges of {word!r}",
            merges=len(result.merges.steps),
            word=result.word,
        )
        if result.merges
        else Message("hood.tokens.phase.no_merges", "no merges")
    )
    return Message(
        "hood.tokens.phase.done",
        "{tokens:,} tokens · {merged} · English {english} vs Chinese {chinese} tokens",
        tokens=len(result.tokens),
        merged=merged,
        english=english,
        chinese=chinese,
    )


def _cost(
    lm: Engine, result: TokensResult, language: str, text: str, control: Control | None
) -> SentenceCost:
    """A sentence's tokens, the formula's KV bytes for them, and the bytes its real cache holds."""
    ids = [t.id for t in tokenize(lm, text)]
    if lm.config is None or not result.dtype:
        result.kv_note = Message(
            "hood.tokens.no_config",
            "this engine does not say its model's config and dtype, which the KV formula needs.",
        )
        return SentenceCost(language, text, ids, None, None)
    formula = kv_cache_bytes(lm.config, len(ids), 1, result.dtype, mode="transformers")
    capabilities = lm.capabilities
    if not (capabilities.probes and capabilities.cache_bytes and lm.probes is not None):
        result.kv_note = capabilities.why_not("cache_bytes" if capabilities.probes else "probes")
        return SentenceCost(language, text, ids, formula, None)
    sequence = lm.probes.sequence(control=control)
    sequence.advance(ids)  # one forward: the model reads the sentence into its own cache
    return SentenceCost(language, text, ids, formula, sequence.cache_bytes)


LESSON = Lesson("tokens", Message("hood.tokens.title", "Tokens are not words"), (), iter_run)

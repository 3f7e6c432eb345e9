"""The lesson "Tokens are not words" on the real embedded model: tokenize is the tokenizer's own ids
and offsets, the BPE merges replayed from its merges table end at its own split, bad input gets a
clear message, and the view runs through the tab's handlers."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hood_tab_helpers import Hood
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from playground import hood
from playground.engine.tokens import token_bytes, token_piece
from playground.errors import PlaygroundError
from playground.hood import tokens as tokens_lesson
from playground.hood.tokens import CHINESE, ENGLISH, MAX_CHARS, MAX_WORD_CHARS, words_of
from playground.kv import kv_cache_bytes
from tests.conftest import make_tiny_llama

TEXTS = [
    "unbelievable",
    "我爱你",
    "今天天气很好",
    "I love it 😀👍🏽 👨\u200d👩\u200d👧",
    "def square(x):\n    return x ** 2\n",
    "https://huggingface.co/docs/transformers/main_classes/tokenizer?x=1&y=2",
    "1234567",
    "  café naïve  Ærø\ttabs\n\nnew lines",
]
WORDS = [
    "unbelievable",
    " unbelievable",
    "tokenization",
    "antidisestablishmentarianism",
    "aaaaaaa",
    "1234567",
    "美",
    "😀",
    "naïve",
    "hello world",
    "don't",
    "https://example.com",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_is_the_tokenizers_own_ids_and_offsets(embedded_lm, text):
    tokenizer = embedded_lm.tokenizer
    tokens = hood.tokens.tokenize(embedded_lm, text)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert [t.id for t in tokens] == encoded.input_ids
    assert [t.char_span for t in tokens] == [tuple(o) for o in encoded.offset_mapping]
    assert [t.raw for t in tokens] == tokenizer.convert_ids_to_tokens(encoded.input_ids)
    data = text.encode()
    assert tokens[0].byte_span[0] == 0 and tokens[-1].byte_span[1] == len(data)
    for before, token in itertools.pairwise(tokens):
        assert before.byte_span[1] == token.byte_span[0]  # the bytes lie end to end
    for token in tokens:
        b0, b1 = token.byte_span
        assert data[b0:b1] == token_bytes(tokenizer, token.id)  # the token's own bytes, where they are
        c0, c1 = token.char_span
        assert data[b0:b1] in text[c0:c1].encode()  # inside the characters the tokenizer says
        if not token.byte_piece:
            assert token.alone == text[c0:c1]
        else:
            assert token.char in text[c0:c1] and "\ufffd" in token.alone
            first = len(text[: text.index(token.char, c0)].encode())  # the character's first byte
            assert b0 <= first + token.byte_index - 1 < b1  # byte i of n lies in this token
            assert token.byte_count == len(token.char.encode())
    assert sum(t.chars for t in tokens) == pytest.approx(len(text))
    words = re.finditer(r"\S+", text)  # tokens per word: those that cover part of it
    assert [w.tokens for w in words_of(text, tokens)] == [
        sum(t.char_span[0] < w.end() and t.char_span[1] > w.start() for t in tokens) for w in words
    ]


def test_the_measured_facts_the_lesson_shows(embedded_lm):
    assert [t.piece for t in hood.tokens.tokenize(embedded_lm, "unbelievable")] == ["un", "belie", "vable"]
    love = hood.tokens.tokenize(embedded_lm, "我爱你")
    assert len(love) == 7 and all(t.byte_piece and t.alone == "\ufffd" for t in love)
    assert [t.char for t in love] == list("我我爱爱爱你你")
    assert [t.byte_index for t in love] == [1, 3, 1, 2, 3, 1, 3]


@pytest.mark.parametrize("word", WORDS)
def test_bpe_merges_end_at_the_tokenizers_split(embedded_lm, word):
    tokenizer = embedded_lm.tokenizer
    merges = hood.tokens.bpe_merges(embedded_lm, word)
    assert merges.final == tokenizer.tokenize(word) == merges.tokens
    assert merges.ids == tokenizer(word, add_special_tokens=False).input_ids
    table = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    ranks = {
        tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)): r for r, m in enumerate(table["merges"])
    }
    assert len(merges.start_raw) == len(word.encode())  # byte-level: one symbol per byte
    assert len(merges.steps) == len(merges.start_raw) - len(merges.final)  # each merge joins two pieces
    before = merges.start_raw
    for step in merges.steps:  # each step joins the lowest-ranked pair present, leftmost first
        pairs = [(ranks[p], i) for i, p in enumerate(itertools.pairwise(before)) if p in ranks]
        rank, i = min(pairs) if len(merges.pretokens) == 1 else (step.rank, _at(before, step, ranks))
        assert step.rank == rank and step.pair == tuple(merges_read(embedded_lm, before[i : i + 2]))
        assert list(step.raw) == [*before[:i], before[i] + before[i + 1], *before[i + 2 :]]
        assert before[i] + before[i + 1] in table["vocab"]
        before = list(step.raw)
    if len(merges.pretokens) == 1:  # inside one pre-token the ranks only grow
        assert [s.rank for s in merges.steps] == sorted(s.rank for s in merges.steps)


def _at(before: list[str], step, ranks: dict) -> int:
    return next(i for i in range(len(before) - 1) if ranks.get((before[i], before[i + 1])) == step.rank)


def merges_read(lm, symbols: list[str]) -> list[str]:
    """How the table's symbols read: their tokens' visible text."""
    vocab = lm.tokenizer.get_vocab()
    return [token_piece(lm.tokenizer, vocab[s]).visible for s in symbols]


def test_unbelievable_is_built_by_nine_merges(embedded_lm):
    merges = hood.tokens.bpe_merges(embedded_lm, "unbelievable")
    assert merges.start == list("unbelievable")
    assert merges.steps[-1].pieces == ("un", "belie", "vable") and len(merges.steps) == 9
    assert "believe" not in {p for s in merges.steps for p in s.pieces}


def test_bad_input_gets_a_clear_message(embedded_lm):
    with pytest.raises(PlaygroundError, match="The text is empty"):
        hood.tokens.tokenize(embedded_lm, "")
    with pytest.raises(PlaygroundError, match=f"at most {MAX_CHARS:,}"):
        hood.tokens.tokenize(embedded_lm, "a" * (MAX_CHARS + 1))
    with pytest.raises(PlaygroundError, match="The word is empty"):
        hood.tokens.bpe_merges(embedded_lm, "")
    with pytest.raises(PlaygroundError, match=f"at most {MAX_WORD_CHARS} characters"):
        hood.tokens.bpe_merges(embedded_lm, "x" * (MAX_WORD_CHARS + 1))
    with pytest.raises(PlaygroundError, match="added token '<\\|im_start\\|>'"):
        hood.tokens.bpe_merges(embedded_lm, "<|im_start|>")
    with pytest.raises(PlaygroundError, match="Chinese sentence is empty"):
        list(tokens_lesson.iter_run(embedded_lm, "hi", "hi", ENGLISH, ""))


def wordpiece_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2, "un": 3, "##believ": 4, "##able": 5, "words": 6, "!": 7}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


def test_a_tokenizer_that_is_not_bpe_says_so_and_still_shows_its_tokens():
    lm = make_tiny_llama(wordpiece_tokenizer())
    with pytest.raises(PlaygroundError, match="WordPiece, not BPE"):
        hood.tokens.bpe_merges(lm, "unbelievable")
    assert [t.raw for t in hood.tokens.tokenize(lm, "unbelievable words!")] == [
        "un",
        "##believ",
        "##able",
        "words",
        "!",
    ]
    shown = Hood(lm).last("tok", "unbelievable words!", "unbelievable", "words", "words!")
    assert shown["tok_status"].startswith("Done")
    assert "##believ" in shown["tok_view"] or "believ" in shown["tok_view"]
    assert "WordPiece, not BPE" in shown["tok_merges"] and "WordPiece, not BPE" in shown["tok_summary"]


def test_the_view_runs_through_the_tab(embedded_lm):
    lessons = Hood(embedded_lm)
    updates = list(lessons.run("tok", "unbelievable 我爱你", "unbelievable", ENGLISH, CHINESE))
    assert [u["tok_status"].split(":")[0] for u in updates] == ["Running"] * (len(updates) - 1) + ["Done"]
    shown = updates[-1]
    tokens = hood.tokens.tokenize(embedded_lm, "unbelievable 我爱你")
    for token in tokens:
        assert f">{token.id}</span>" in shown["tok_view"]
    assert "爱<sub style='font-size:0.65em'>×3</sub>" in shown["tok_view"]  # its 3 byte tokens as one box
    assert "<b>爱</b> = 3 byte tokens" in shown["tok_view"]
    assert "un | belie | vable" in shown["tok_merges"]
    counts = [len(embedded_lm.tokenizer(s, add_special_tokens=False).input_ids) for s in (ENGLISH, CHINESE)]
    assert list(shown["tok_languages"].data[0].y) == counts
    assert shown["tok_summary"].count("measured: equal ✓") == 2
    chars = shown["tok_chars"].to_dict()["data"]
    assert sum(len(trace["y"]) for trace in chars) == len(tokens)


def test_each_sentence_costs_the_kv_formula_and_its_cache_holds_exactly_that(embedded_lm):
    *_, result = tokens_lesson.iter_run(embedded_lm, "hi", "hi", ENGLISH, CHINESE)
    for sentence, text in zip(result.sentences, (ENGLISH, CHINESE), strict=True):
        ids = embedded_lm.tokenizer(text, add_special_tokens=False).input_ids
        assert sentence.ids == ids
        formula = kv_cache_bytes(embedded_lm.config, len(ids), 1, "float32", mode="transformers")
        assert sentence.formula_bytes == sentence.measured_bytes == formula


def test_an_engine_without_direct_forwards_still_tokenizes_and_says_why_the_cache_is_not_measured(
    embedded_lm,
):
    capabilities = replace(embedded_lm.capabilities, probes=False, reasons={"probes": "a remote server"})
    lm = embedded_lm
    remote = SimpleNamespace(
        tokenizer=lm.tokenizer, config=lm.config, dtype=lm.dtype, capabilities=capabilities, probes=None
    )
    *_, result = tokens_lesson.iter_run(remote, "我爱你", "", ENGLISH, CHINESE)
    assert len(result.tokens) == 7 and result.word == "我爱你" and result.merges is not None
    assert [s.measured_bytes for s in result.sentences] == [
        None,
        None,
    ] and result.kv_note == "a remote server"
    assert result.sentences[0].formula_bytes == kv_cache_bytes(
        embedded_lm.config, len(result.sentences[0].ids), 1, "float32", mode="transformers"
    )
    unknown = SimpleNamespace(**{**vars(remote), "config": None, "dtype": None})
    *_, result = tokens_lesson.iter_run(unknown, "hi", "hi", ENGLISH, CHINESE)
    assert [s.formula_bytes for s in result.sentences] == [None, None] and "KV formula" in result.kv_note


def test_a_bad_text_in_the_view_is_a_failed_status_with_the_message(embedded_lm):
    lessons = Hood(embedded_lm)
    run = lessons.run("tok", "", "unbelievable", ENGLISH, CHINESE)
    assert next(run)["tok_status"] == "Running: tokenize…"
    assert next(run)["tok_status"] == "Failed: The text is empty: type something to tokenize."
    with pytest.raises(PlaygroundError):
        next(run)

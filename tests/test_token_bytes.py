"""Characters split over byte tokens: the grouping (pure, on hand-made byte pieces and the real
tokenizer) and every token view that uses it (on the real embedded model)."""

from __future__ import annotations

import html
import random
import re

import pytest
import torch

from playground.engine.tokens import (
    ByteSlice,
    TokenPiece,
    byte_groups,
    group_text,
    read_pieces,
    token_bytes,
    token_texts,
)

# Chinese, Japanese, a 4-byte emoji, a ZWJ sequence (👨 ZWJ 👩 ZWJ 👧), accented Latin, a flag
TEXTS = ["我爱你", "美丽的花", "こんにちは、世界", "😀👍", "👨\u200d👩\u200d👧", "café naïve Ærø", "🇫🇷 ok"]


def byte_piece(data: bytes) -> TokenPiece:
    """A piece as token_piece shows bytes that are not whole characters: <0xNN> each."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return TokenPiece(0, "\ufffd", "".join(f"<0x{b:02X}>" for b in data), False)
    return TokenPiece(0, text, text, False)


def read(*chunks: bytes):
    return read_pieces([byte_piece(c) for c in chunks])


# --- the grouping, on hand-made byte pieces -------------------------------------------------------


def test_a_character_over_three_tokens_names_each_byte():
    texts = read(b"\xe7", b"\xbe", b"\x8e")  # 美
    assert [t.char for t in texts] == ["美"] * 3
    assert [(t.byte_index, t.byte_count) for t in texts] == [(1, 3), (2, 3), (3, 3)]
    assert [t.describe() for t in texts] == [f"byte {i} of 3 of 美" for i in (1, 2, 3)]
    assert [t.visible for t in texts] == [f"美 (byte {i}/3)" for i in (1, 2, 3)]
    assert byte_groups(texts) == [range(0, 3)] and group_text(texts) == "美"


def test_a_token_can_end_one_character_and_start_the_next():
    texts = read(b"\xe7\xbe", b"\x8e\xe4\xb8", b"\xbd")  # 美 丽 as E7BE | 8E E4B8 | BD
    middle = texts[1]
    assert middle.parts == (ByteSlice(b"\x8e", 3, 3, "美"), ByteSlice(b"\xe4\xb8", 1, 3, "丽"))
    assert middle.describe() == "byte 3 of 3 of 美; bytes 1–2 of 3 of 丽"
    assert middle.visible == "美 (byte 3/3) + 丽 (bytes 1–2/3)"
    assert byte_groups(texts) == [range(0, 3)] and group_text(texts) == "美丽"


def test_a_token_can_hold_a_whole_character_and_the_start_of_the_next():
    texts = read(b"\xe7\x9a\x84\xe8", b"\x8a\xb1", b"!")  # 的 + first byte of 花 | the rest | !
    assert texts[0].parts == ("的", ByteSlice(b"\xe8", 1, 3, "花"))
    assert texts[1].describe() == "bytes 2–3 of 3 of 花" and texts[1].char == "花"
    assert texts[2].parts == ("!",) and not texts[2].split
    assert byte_groups(texts) == [range(0, 2), range(2, 3)]
    assert group_text(texts[:2]) == "的花"


def test_four_byte_emoji_and_accented_latin_split_anywhere():
    emoji = read(b"\xf0", b"\x9f\x98", b"\x80")  # 😀 as 1 + 2 + 1 bytes
    assert [(t.byte_index, t.byte_count, t.char) for t in emoji] == [(1, 4, "😀"), (2, 4, "😀"), (4, 4, "😀")]
    assert emoji[1].describe() == "bytes 2–3 of 4 of 😀"
    accent = read(b"caf\xc3", b"\xa9")  # é = C3 A9
    assert accent[0].parts == ("caf", ByteSlice(b"\xc3", 1, 2, "é")) and group_text(accent) == "café"


def test_a_joiner_between_emoji_is_named_by_its_code_point():
    data = "👨\u200d👩".encode()
    texts = read(data[:2], data[2:5], data[5:8], data[8:])  # F09F | 91A8 E2 | 808D F0 | 9F91A9
    assert texts[1].parts[1] == ByteSlice(b"\xe2", 1, 3, "\u200d")
    assert texts[1].describe() == "bytes 3–4 of 4 of 👨; byte 1 of 3 of U+200D"
    assert group_text(texts) == "👨U+200D👩"  # the invisible joiner made visible


def test_a_character_not_finished_yet_says_what_is_known():
    texts = read(b"a", b"\xe7")
    assert texts[1].char is None and texts[1].describe() == "first byte of a 3-byte character"
    assert texts[1].visible == "<0xE7> (byte 1/3)" and texts[1].continues
    assert group_text(texts[1:]) == "…"
    two = read(b"\xe7", b"\xbe")
    assert two[1].describe() == "byte 2 of a 3-byte character" and group_text(two) == "…"


def test_bytes_that_are_not_utf8_there_say_so():
    texts = read(b"a", b"\xbe", b"b")  # a continuation byte with no start
    assert texts[1].slices == [ByteSlice(b"\xbe", 0, 0, None)]
    assert texts[1].describe() == "<0xBE>: not valid UTF-8 here" and group_text(texts) == "a\ufffdb"
    cut = read(b"\xe7", b"x")  # a start cut short by an ASCII byte
    assert cut[0].describe() == "<0xE7>: not valid UTF-8 here" and cut[1].parts == ("x",)


def test_a_special_token_breaks_the_byte_stream():
    special = TokenPiece(2, "<|im_end|>", "<|im_end|>", True)
    texts = read_pieces([byte_piece(b"\xe7\xbe"), special, byte_piece(b"\x8e")])
    assert texts[0].describe() == "bytes 1–2 of a 3-byte character" and texts[1].parts == ("<|im_end|>",)
    assert texts[2].describe() == "<0x8E>: not valid UTF-8 here"
    assert byte_groups(texts) == [range(0, 1), range(1, 2), range(2, 3)]


def unview(text: str) -> str:
    """Invisible characters back from their code points (char_view shows U+200D for a joiner)."""
    return re.sub(r"U\+([0-9A-F]{4,6})", lambda m: chr(int(m[1], 16)), text)


def shown_text(texts) -> str:
    return unview("".join(group_text([texts[i] for i in g]) for g in byte_groups(texts)))


def char_at(text: str, offset: int) -> tuple[str, int]:
    """The character of text whose UTF-8 bytes hold byte `offset`, and that byte's 1-based index."""
    start = 0
    for char in text:
        size = len(char.encode())
        if offset < start + size:
            return char, offset - start + 1
        start += size
    raise IndexError(offset)


@pytest.mark.parametrize("text", TEXTS)
def test_any_split_of_the_bytes_reads_back_the_text(text):
    """Cut the UTF-8 bytes anywhere: every slice names its own character and byte index, and
    the groups read back the text."""
    data, rng = text.encode(), random.Random(text)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, len(data) - 1)))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        texts = read(*chunks)
        assert shown_text(texts) == text, chunks
        offset = 0
        for chunk, t in zip(chunks, texts, strict=True):
            at = offset
            for part in t.parts:
                if isinstance(part, str):
                    at += len(part.encode())
                    continue
                char, index = char_at(text, at)
                assert (part.char, part.first, part.size) == (char, index, len(char.encode())), chunks
                at += len(part.data)
            assert at == offset + len(chunk)
            offset += len(chunk)


# --- the real tokenizer ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(embedded_lm):
    return embedded_lm.tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_are_the_tokenizers_own_bytes(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert b"".join(token_bytes(tokenizer, i) for i in ids) == text.encode()
    texts = token_texts(tokenizer, ids)
    assert shown_text(texts) == tokenizer.decode(ids) == text


def test_i_love_you_is_seven_byte_tokens_under_three_characters(tokenizer):
    ids = tokenizer("我爱你", add_special_tokens=False).input_ids
    assert len(ids) == 7 and all(tokenizer.decode([i]) == "\ufffd" for i in ids)
    texts = token_texts(tokenizer, ids)
    assert [t.char for t in texts] == list("我我爱爱爱你你")
    assert [len(g) for g in byte_groups(texts)] == [2, 3, 2]
    assert [t.byte_count for t in texts] == [3] * 7
    assert "".join(t.glyphs for t in texts) == "我爱你"


def test_a_candidate_knows_its_character_only_from_its_context(tokenizer):
    ids = tokenizer("美", add_special_tokens=False).input_ids
    assert len(ids) == 3
    first, second, last = (token_texts(tokenizer, [ids[k]], context=ids[:k])[0] for k in range(3))
    assert first.candidate == "<0xE7> · first byte of a 3-byte character"
    assert second.candidate == "<0xBE> · byte 2 of a 3-byte character"
    assert last.candidate == "<0x8E> · byte 3 of 3 of 美"
    assert token_texts(tokenizer, ids[2:])[0].describe() == "<0x8E>: not valid UTF-8 here"  # no context


def test_byte_fallback_pieces_of_a_sentencepiece_tokenizer_read_the_same():
    """A tokenizer whose byte pieces are "<0xE7>" tokens (SentencePiece's byte fallback)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "a": 1, **{f"<0x{b:02X}>": 2 + b for b in range(256)}}
    model = models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True)
    backend = Tokenizer(model)
    backend.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    sp = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    ids = sp("a美", add_special_tokens=False).input_ids
    assert ids == [1, 2 + 0xE7, 2 + 0xBE, 2 + 0x8E] and sp.decode(ids) == "a美"
    texts = token_texts(sp, ids)
    assert [t.describe() for t in texts] == ["", *(f"byte {i} of 3 of 美" for i in (1, 2, 3))]


# --- every token view, on the real model ----------------------------------------------------------


def strip_cards(page: str) -> str:
    """The text a token view shows, cards left out."""
    return html.unescape(re.sub(r"<span class='tok-card'>.*?</table>.*?</span>|<[^>]+>", "", page))


def glyphs(page: str) -> list[str]:
    return [html.unescape(g) for g in re.findall(r"<span class='tok-glyph'[^>]*>(.*?)</span>", page)]


def cards(page: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r"<span class='tok-card'>(.*?)</table>", page)]


@pytest.fixture(scope="module")
def cjk_chat(embedded_lm):
    from playground.chat import ChatRequest, run_chat
    from playground.engine.sampling import SamplingSettings

    request = ChatRequest(
        [{"role": "user", "content": "用中文说：美丽的花"}], "", SamplingSettings(temperature=0), 9
    )
    return run_chat(embedded_lm, request)


def test_a_cjk_chat_shows_its_characters_in_the_token_view(cjk_chat):
    from playground.ui.token_html import answer_tokens_html

    assert cjk_chat.text.startswith("美丽的花")
    page = answer_tokens_html(cjk_chat.tokens)
    assert glyphs(page)[:3] == ["美", "丽", "花"]  # 的 is one token: it stands alone
    shown = cards(page)
    assert len(shown) == len(cjk_chat.tokens)
    expected = [f"byte {i} of 3 of 美" for i in (1, 2, 3)] + ["bytes 1–2 of 3 of 丽", "byte 3 of 3 of 丽"]
    assert [re.search(r"character</td><td>(.*?)</td>", c).group(1) for c in shown[:5]] == expected
    for card, token in zip(shown, cjk_chat.tokens, strict=True):  # each byte keeps its own numbers
        assert f"{token.prob:.2%}" in card and f"<td>rank</td><td>{token.rank}</td>" in card
    assert len({t.logprob for t in cjk_chat.tokens[:3]}) == 3


def test_chat_alternatives_and_the_templated_stream_name_byte_pieces(cjk_chat, embedded_lm):
    from playground.engine.tokens import token_piece
    from playground.ui.token_html import answer_tokens_html, templated_stream_html

    page = answer_tokens_html(cjk_chat.tokens)
    first_alts = re.findall(r"class='tok-alt'[^>]*>(.*?)</button>", page.split("tok-card", 2)[1])
    assert "\ufffd" not in strip_cards(page) and len(first_alts) == 5
    assert any("of a 3-byte character" in a or "<0x" not in a for a in first_alts)
    assert not any(re.fullmatch(r"#\d (<0x..>)+ <b>.*", a) for a in first_alts)  # no bare bytes
    ids = cjk_chat.prompt_ids + cjk_chat.answer_ids
    templated = templated_stream_html(
        [token_piece(embedded_lm.tokenizer, i) for i in ids], len(cjk_chat.prompt_ids)
    )
    assert (
        glyphs(templated) == [*"说美丽花", *"美丽花"] and "byte 2 of 3 of 美" in templated
    )  # the prompt's too


def test_the_recorded_chat_trace_reads_the_same(cjk_chat):
    from playground.chat import ChatUpdate
    from playground.ui.chat_tab import render_chat_trace

    data = {"update": ChatUpdate.from_dict(cjk_chat.to_dict()).to_dict(), "messages": []}
    view = render_chat_trace(data)["token_view"]
    assert glyphs(view)[:3] == ["美", "丽", "花"] and "byte 1 of 3 of 美" in view


@pytest.fixture(scope="module")
def cjk_step(embedded_lm):
    from playground.step import StepSession

    session = StepSession(embedded_lm, "Say it in Chinese:", chat=False)
    session.force(" 美丽的")
    session.pick(embedded_lm.tokenizer("花", add_special_tokens=False).input_ids[0])  # 花's first byte
    return session


def test_a_cjk_step_session_shows_its_characters_in_every_view(cjk_step):
    from playground.step.snapshot import take_snapshot
    from playground.ui.step_render import ledger_rows, render

    view = render(cjk_step)
    records = cjk_step.records
    assert glyphs(view["text"]) == [" 美", "丽", "…"]  # ' ' + E7 is one token; 花 has its first byte only
    assert "first byte of a 3-byte character" in view["text"]
    ledger = ledger_rows(take_snapshot(cjk_step))
    assert [row[1] for row in ledger[:6]] == [
        "␣ + 美 (byte 1/3)",
        "美 (byte 2/3)",
        "美 (byte 3/3)",
        "丽 (bytes 1–2/3)",
        "丽 (byte 3/3)",
        "的",
    ]
    assert ledger[-1][1] == "<0xE8> (byte 1/3)"
    assert [row[3] for row in ledger] == [round(r.prob, 6) for r in records]  # each byte its own numbers
    assert [row[5] for row in ledger] == [r.rank for r in records]
    curve = view["curve"].to_dict()["data"][0]
    assert list(curve["customdata"]) == [row[1] for row in ledger]  # the chart names tokens as the ledger
    assert "\ufffd" not in str(view["ledger"]) + str(curve) + view["tree"]
    assert "美丽的…" in strip_cards(view["tree"])


def test_step_candidates_after_a_first_byte_say_which_byte_they_are(cjk_step):
    from playground.step.snapshot import take_snapshot
    from playground.ui.step_render import render_snapshot

    snap = take_snapshot(cjk_step)
    byte_candidates = [c for c in snap.candidates if c.visible.startswith(("<0x", "花"))]
    assert byte_candidates, [c.visible for c in snap.candidates]  # after E8 the model goes on in bytes
    for c in byte_candidates:
        assert re.fullmatch(r"(<0x..>)+ · (byte 2 of a 3-byte character|bytes 2–3 of 3 of .)", c.detail), c
    view = render_snapshot(snap)
    buttons = [view[f"cand_{i}"]["value"] for i in range(1, 11) if view[f"cand_{i}"].get("visible")]
    for c, button in zip(snap.candidates, buttons, strict=False):
        if c.becomes:  # the character it goes on to, each with its probability given the byte
            key = f"[{c.rank}] " if c.rank <= 9 else ""  # keys 1-9 pick the first nine
            assert button.startswith(f"{key}{c.visible}   {c.prob:.1%} · ") and " · becomes " in button
            assert all(f"{char} " in button.split("becomes", 1)[1] for char, _ in c.becomes), button
        else:
            assert c.detail in button, button  # which byte of what it is
    assert snap.candidates[0].becomes  # the likeliest byte says what it becomes
    labels = view["chart"].to_dict()["data"][0]["y"]
    assert [label.split(". ", 1)[1] for label in labels] == [c.visible for c in snap.candidates[:10]]
    assert all("\ufffd" not in b for b in buttons) and all("\ufffd" not in label for label in labels)


def test_a_byte_candidate_becomes_characters_with_the_models_own_probabilities(cjk_step, embedded_lm):
    """花's middle byte after its first: the characters it goes on to end, each with P(its last byte |
    path, the middle byte), equal to the model's own probability of that last byte (issue 33, item 6)."""
    from playground.step.lookahead import characters_started

    first, middle, last = embedded_lm.tokenizer("花", add_special_tokens=False).input_ids
    assert cjk_step.ids[-1] == first
    guesses = characters_started(cjk_step, middle)
    rows = embedded_lm.score([*cjk_step.ids, middle, last], len(cjk_step.ids) + 1)  # before the last byte
    expected = torch.log_softmax(rows[0].float(), dim=-1)[last].exp().item()
    hua = next(g for g in guesses if g.char == "花")
    assert hua.prob == pytest.approx(expected, rel=1e-4)
    assert [g.prob for g in guesses] == sorted((g.prob for g in guesses), reverse=True)
    assert 0 < sum(g.prob for g in guesses) <= 1 + 1e-6 and len({g.char for g in guesses}) == len(guesses)
    assert characters_started(cjk_step, embedded_lm.tokenizer(" the").input_ids[0]) == ()  # no byte


def test_the_recorded_step_trace_reads_the_same(cjk_step):
    from playground.step.snapshot import StepSnapshot, take_snapshot
    from playground.ui.step_render import render_snapshot

    snap = take_snapshot(cjk_step)
    again = render_snapshot(StepSnapshot.from_dict(snap.to_dict()))
    live = render_snapshot(snap)
    assert again["text"] == live["text"] and again["ledger"] == live["ledger"]
    assert again["cand_1"] == live["cand_1"] and again["tree"] == live["tree"]


def test_beam_labels_name_the_characters(embedded_lm):
    from playground.beam import beam_search
    from playground.plots.beam import beam_tree_figure
    from playground.plots.beam_layout import lay_out

    tree = beam_search(embedded_lm, "用中文说：美丽的花", 2, 4, chat=True, include_greedy=True)
    split = [n for n in tree.nodes[1:] if n.token.visible.startswith("<0x")]
    assert split, [n.token.visible for n in tree.nodes[1:]]  # the answer starts with 美's bytes
    labels = {n.id: tree.tree.label(n.id) for n in tree.nodes}
    for node in split:  # '美 (byte 1/3)': named by its path, or by its best continuation
        path = tree.prefix_ids(node.id)[len(tree.prompt_ids) :]
        alone = token_texts(embedded_lm.tokenizer, path)[-1]  # what its ancestors settle
        if alone.char is not None:
            assert labels[node.id] == alone.visible
        assert labels[node.id].endswith(alone.visible.rsplit(" (", 1)[1]), (labels[node.id], alone)
        if node.children:  # a first byte is named by the character its best child completes
            assert not labels[node.id].startswith("<0x"), labels[node.id]
    drawing = lay_out(tree, pruned_per_parent=2)
    assert {p.label for p in drawing.points.values() if p.id > 0} <= set(labels.values())
    figure = str(beam_tree_figure(tree, 2).to_dict())
    assert "美 (byte 3/3)" in figure and "\ufffd" not in figure


def test_a_beam_cut_inside_a_character_reads_with_an_ellipsis_not_a_replacement_mark(embedded_lm):
    from playground.beam import beam_search
    from playground.ui.beam_tab import hypothesis_rows, node_prefix, status_markdown

    tree = beam_search(embedded_lm, "用中文说：美丽的花", 2, 1, chat=True, include_greedy=True)
    best = tree.hypotheses[0]
    assert best.text.endswith("\ufffd")  # one step: only 美's first byte
    shown = status_markdown(tree) + str(hypothesis_rows(tree))
    shown += node_prefix(tree, best.node_id, embedded_lm.tokenizer)
    assert "\ufffd" not in shown and "…" in shown


def test_probability_of_a_byte_token_says_which_byte_it_is(cjk_step, embedded_lm):
    from playground.ui.step_render import probability_markdown

    second = embedded_lm.tokenizer("花", add_special_tokens=False).input_ids[1]  # 花 = E8 | 8A | B1
    answer = probability_markdown(cjk_step.probability_of(second), cjk_step.records)
    assert answer.startswith("`<0x8A> · byte 2 of a 3-byte character`: P = ")  # a code span, as typed
    alone = probability_markdown(cjk_step.probability_of(second))  # without the path: not valid there
    assert "not valid UTF-8 here" in alone and "\ufffd" not in answer + alone


def test_the_replayed_candidates_say_which_byte_they_are(cjk_step):
    from playground.step.snapshot import take_snapshot
    from playground.ui.replay import candidates_markdown

    snap = take_snapshot(cjk_step)
    listed = candidates_markdown({"snapshot": snap.to_dict()})
    assert snap.candidates[0].detail and f"`{snap.candidates[0].detail}`" in listed

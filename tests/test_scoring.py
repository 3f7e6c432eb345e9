"""score_text on both real models equals teacher forcing (the lesson's forward), covers the text with
character spans, and two models' scores align on characters where their tokenizers differ."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from playground.errors import PlaygroundError
from playground.hood import teacher_forcing
from playground.scoring import align_scores, score_text
from playground.ui.i18n import localize

CASES = [
    ("The capital of France is", " Paris. It is a big city."),
    ("今天天气", "很好，我们去公园吧。美"),
]


@pytest.mark.parametrize("model", ["embedded_lm", "gemma_lm"])
@pytest.mark.parametrize(("context", "text"), CASES)
def test_score_text_equals_teacher_forcing(model, context, text, request):
    lm = request.getfixturevalue(model)
    scored = score_text(lm, context, text)
    tf = teacher_forcing.run(lm, scored.context_ids + scored.ids, len(scored.context_ids))
    assert [t.logprob for t in scored.tokens] == pytest.approx(tf.logprobs, abs=1e-5)
    assert [t.rank for t in scored.tokens] == tf.ranks
    assert scored.ids == lm.tokenizer(text, add_special_tokens=False).input_ids
    assert scored.context_ids == lm.tokenizer(context).input_ids


def test_scores_are_log_probs_of_a_plain_forward(embedded_lm):
    scored = score_text(embedded_lm, "The capital of France is", " Paris.")
    ids = torch.tensor([scored.context_ids + scored.ids])
    with embedded_lm.lock, torch.inference_mode():
        logits = embedded_lm.model(ids).logits[0].float()
    start = len(scored.context_ids)
    reference = torch.log_softmax(logits[start - 1 : -1], dim=-1)
    expected = reference.gather(1, torch.tensor(scored.ids)[:, None])[:, 0]
    assert [t.logprob for t in scored.tokens] == pytest.approx(expected.tolist(), abs=1e-4)
    paris = scored.tokens[0]
    assert paris.piece == "␣Paris" and paris.rank == 1 and paris.surprise == -paris.logprob
    assert scored.logprob == pytest.approx(sum(t.logprob for t in scored.tokens))
    assert math.isclose(paris.prob, math.exp(paris.logprob))


def test_character_spans_cover_the_text_byte_tokens_included(embedded_lm):
    scored = score_text(embedded_lm, "今天天气", "很好美")
    assert [t.char_span for t in scored.tokens] == [(0, 1), (0, 1), (1, 2), (1, 2), (2, 3), (2, 3), (2, 3)]
    assert [t.byte_span for t in scored.tokens][-3:] == [(6, 7), (7, 8), (8, 9)]  # 美: 3 byte tokens


def test_a_conversation_context_reads_through_the_chat_template(embedded_lm):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    scored = score_text(embedded_lm, messages, "The capital of France is Paris.")
    assert embedded_lm.tokenizer.decode(scored.context_ids).endswith("<|im_start|>assistant\n")
    assert scored.tokens[0].rank == 1  # the model's own first answer token


def test_two_models_align_on_characters(embedded_lm, gemma_lm):
    context, text = CASES[1]
    smol, gemma = score_text(embedded_lm, context, text), score_text(gemma_lm, context, text)
    spans = align_scores(smol, gemma)
    assert "".join(s.text for s in spans) == text
    first = spans[0]
    assert first.text == "很好" and first.a_tokens == (0, 1, 2, 3) and first.b_tokens == (0,)
    assert first.a_logprob == pytest.approx(sum(t.logprob for t in smol.tokens[:4]))
    assert first.b_logprob == gemma.tokens[0].logprob
    assert sum(len(s.a_tokens) for s in spans) == len(smol.tokens)
    assert sum(len(s.b_tokens) for s in spans) == len(gemma.tokens)
    assert sum(s.a_logprob for s in spans) == pytest.approx(smol.logprob)  # the chain rule holds per span
    assert spans[-1].text == "美" and spans[-1].a_tokens == (18, 19, 20)


def test_bad_input_gets_a_clear_message(embedded_lm, gemma_lm):
    with pytest.raises(PlaygroundError, match="text to score is empty"):
        score_text(embedded_lm, "Hello", "")
    with pytest.raises(PlaygroundError, match="context must be text or a list of messages"):
        score_text(embedded_lm, 42, "x")
    with pytest.raises(PlaygroundError, match="more than its context"):
        score_text(embedded_lm, "word " * 9000, "x")
    a = score_text(embedded_lm, "Hi", " there")
    with pytest.raises(
        PlaygroundError, match=r"Cannot align the scores: .* scored ' there' and .* scored ' here'"
    ):
        align_scores(a, score_text(gemma_lm, "Hi", " here"))
    gap = replace(a, tokens=[replace(a.tokens[0], byte_span=(1, 6))])  # as a normalizing tokenizer would
    with pytest.raises(PlaygroundError, match="do not cover the text end to end") as raised:
        align_scores(gap, a)
    assert localize(raised.value.message, "zh").startswith("无法对齐打分：")  # told in the page's language

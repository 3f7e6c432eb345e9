"""The chat engine: per-token probabilities equal the model's, seeds, limits, bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.chat import ChatRequest, normalize_history, run_chat, stream_chat
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError

QUESTION = [{"role": "user", "content": "Name three colours."}]


def full_forward_log_probs(lm, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
    """log p(answer token i | everything before it) from ONE forward over prompt + answer."""
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        logits = lm.model(ids).logits[0].float()  # (seq, vocab)
    positions = torch.arange(len(prompt_ids) - 1, len(prompt_ids) + len(answer_ids) - 1)
    return torch.log_softmax(logits[positions], dim=-1)  # (answer, vocab)


@pytest.mark.parametrize(
    "settings",
    [
        SamplingSettings(temperature=0),
        SamplingSettings(temperature=0.9, top_k=40, top_p=0.9, repetition_penalty=1.2),
    ],
    ids=["greedy", "sampled"],
)
def test_token_probabilities_equal_one_full_forward_pass(embedded_lm, settings):
    result = run_chat(embedded_lm, ChatRequest(QUESTION, settings=settings, max_new_tokens=24, seed=7))
    answer_ids = [token.id for token in result.tokens]
    log_probs = full_forward_log_probs(embedded_lm, result.prompt_ids, answer_ids)
    for position, token in enumerate(result.tokens):
        expected = log_probs[position]
        assert token.logprob == pytest.approx(expected[token.id].item(), abs=1e-4)
        assert token.prob == pytest.approx(expected[token.id].exp().item(), abs=1e-4)
        top = torch.topk(expected, 5)
        assert [alt.id for alt in token.top] == top.indices.tolist()
        assert [alt.prob for alt in token.top] == pytest.approx(top.values.exp().tolist(), abs=1e-4)


def test_sampling_with_a_seed_matches_generate_and_repeats(embedded_lm):
    settings = SamplingSettings(temperature=0.8, top_k=30, top_p=0.95, min_p=0.02)
    first = run_chat(embedded_lm, ChatRequest(QUESTION, settings=settings, max_new_tokens=20, seed=123))
    again = run_chat(embedded_lm, ChatRequest(QUESTION, settings=settings, max_new_tokens=20, seed=123))
    assert [t.id for t in first.tokens] == [t.id for t in again.tokens]

    torch.manual_seed(123)
    reference = embedded_lm.model.generate(
        torch.tensor([first.prompt_ids]),
        do_sample=True,
        temperature=0.8,
        top_k=30,
        top_p=0.95,
        min_p=0.02,
        max_new_tokens=20,
        pad_token_id=2,
    )
    assert reference[0, len(first.prompt_ids) :].tolist() == [t.id for t in first.tokens]


def test_greedy_matches_generate(embedded_lm):
    result = run_chat(
        embedded_lm, ChatRequest(QUESTION, settings=SamplingSettings(temperature=0), max_new_tokens=16)
    )
    reference = embedded_lm.model.generate(
        torch.tensor([result.prompt_ids]), do_sample=False, max_new_tokens=16
    )
    assert reference[0, len(result.prompt_ids) :].tolist() == [t.id for t in result.tokens]


def test_streaming_yields_every_token_with_timings(embedded_lm):
    updates = [
        (len(u.tokens), u.text, u.finished)
        for u in stream_chat(
            embedded_lm, ChatRequest(QUESTION, settings=SamplingSettings(temperature=0), max_new_tokens=5)
        )
    ]
    assert [count for count, _, _ in updates] == [1, 2, 3, 4, 5]
    assert [finished for *_, finished in updates] == [False] * 4 + [True]
    final = run_chat(
        embedded_lm, ChatRequest(QUESTION, settings=SamplingSettings(temperature=0), max_new_tokens=5)
    )
    assert final.stop_reason == "max_new_tokens"
    assert final.timings.prompt_tokens == len(final.prompt_ids)
    assert final.timings.generated_tokens == 5
    assert final.timings.prefill_seconds > 0 and final.timings.decode_tokens_per_second > 0
    assert "tok/s" in final.timings.summary() and "ms" in final.timings.summary()


def test_system_prompt_is_in_the_template(embedded_lm):
    result = run_chat(
        embedded_lm, ChatRequest(QUESTION, system_prompt="Speak like a pirate.", max_new_tokens=1)
    )
    assert "Speak like a pirate." in embedded_lm.tokenizer.decode(result.prompt_ids)


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"messages": [{"role": "user", "content": "   "}]}, "Empty message"),
        ({"messages": []}, "must end with a user message"),
        ({"settings": SamplingSettings(temperature=-0.5)}, "temperature must be >= 0"),
        ({"settings": SamplingSettings(top_p=0)}, r"top-p must be in \(0, 1\], got 0"),
        ({"settings": SamplingSettings(top_p=1.5)}, "got 1.5"),
        ({"settings": SamplingSettings(top_k=-1)}, "top-k must be an integer >= 0"),
        ({"max_new_tokens": 5000}, "max new tokens must be between 1 and 1024, got 5000"),
        ({"max_new_tokens": 0}, "got 0"),
    ],
)
def test_bad_requests_are_refused_with_the_bad_value(embedded_lm, request_kwargs, message):
    request = ChatRequest(**{"messages": QUESTION, **request_kwargs})
    with pytest.raises(PlaygroundError, match=message):
        run_chat(embedded_lm, request)


def test_prompt_longer_than_the_context_is_refused_with_the_limits(embedded_lm):
    long_text = "word " * (embedded_lm.context_length + 100)
    with pytest.raises(PlaygroundError, match=f"context is {embedded_lm.context_length} tokens"):
        run_chat(embedded_lm, ChatRequest([{"role": "user", "content": long_text}], max_new_tokens=4))


def test_old_turns_are_dropped_to_fit_and_the_answer_is_cut_to_the_context(tiny_lm):
    filler = "blah " * 200  # tiny_lm has a 512-token context
    history = [
        {"role": "user", "content": filler},
        {"role": "assistant", "content": filler},
        {"role": "user", "content": "Hello there " * 20},
    ]
    result = run_chat(
        tiny_lm, ChatRequest(history, settings=SamplingSettings(temperature=0), max_new_tokens=500)
    )
    assert any("dropped" in note for note in result.notes)
    assert any("cut to" in note for note in result.notes)
    assert len(result.prompt_ids) + len(result.tokens) <= tiny_lm.context_length
    assert result.stop_reason == "context"


def test_model_without_chat_template_falls_back_to_plain_completion(tiny_lm):
    base = copy.copy(tiny_lm)
    base.tokenizer = copy.deepcopy(tiny_lm.tokenizer)
    base.tokenizer.chat_template = None
    result = run_chat(
        base, ChatRequest([{"role": "user", "content": "Once upon a time"}], max_new_tokens=3, seed=1)
    )
    assert any("no chat template" in note for note in result.notes)
    assert base.tokenizer.decode(result.prompt_ids) == "Once upon a time"


def test_history_is_normalized_from_gradio_blocks_and_plain_strings():
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}], "metadata": None},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": {"text": "More"}},
    ]
    assert normalize_history(history) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "More"},
    ]


def test_concurrent_chats_give_the_same_answers_as_alone(embedded_lm):
    from concurrent.futures import ThreadPoolExecutor

    questions = [[{"role": "user", "content": q}] for q in ("Name a fruit.", "Count to five.", "Say hello.")]

    def answer(messages):
        request = ChatRequest(messages, settings=SamplingSettings(temperature=0), max_new_tokens=8)
        return [t.id for t in run_chat(embedded_lm, request).tokens]

    alone = [answer(q) for q in questions]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(answer, questions))
    assert together == alone


def test_prefill_counts_the_prompt_forward_and_decode_excludes_the_callers_time(embedded_lm):
    import time

    long_prompt = [{"role": "user", "content": "Summarize: " + "the cat sat on the mat. " * 250}]
    request = ChatRequest(long_prompt, settings=SamplingSettings(temperature=0), max_new_tokens=4)
    updates = []
    for update in stream_chat(embedded_lm, request):
        time.sleep(1.0)  # a slow consumer (rendering, network) must not count as decode time
        updates.append(update)
    timings = updates[-1].timings
    assert timings.prompt_tokens > 1000 and timings.generated_tokens == 4
    assert timings.decode_seconds < 2.0, "the 3 s the caller spent between tokens were counted"
    per_decode_step = timings.decode_seconds / (timings.generated_tokens - 1)
    assert timings.prefill_seconds > 3 * per_decode_step, "the prompt's forward pass was not counted"


def test_answer_text_keeps_characters_split_over_several_tokens(embedded_lm):
    from playground.chat import ChatTimings, ChatUpdate, _append
    from playground.engine.records import TokenRecord

    original = "東京 😀 café naïve"
    ids = embedded_lm.tokenizer(original, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(original.split()), "the text should split characters over tokens"
    update = ChatUpdate("", [], ChatTimings(), [], 0)
    for token_id in ids:
        _append(embedded_lm, update, TokenRecord(token_id, "", "", False, 0.0, 1.0, 1, 0.0))
        assert "\ufffd" not in update.text and original.startswith(update.text)
    assert update.text == original


def test_statistics_footer_is_stripped_before_the_model_sees_the_history():
    from playground.chat import with_footer

    shown = with_footer("Paris.", "prompt 30 tokens · prefill 80 ms")
    assert shown != "Paris." and "prefill 80 ms" in shown
    history = [{"role": "user", "content": "Capital?"}, {"role": "assistant", "content": shown}]
    assert normalize_history(history)[-1] == {"role": "assistant", "content": "Paris."}
    assert "⏱" not in shown  # a glyph the page's font may lack (it showed as a box)
    saved = [*history[:1], {"role": "assistant", "content": "Paris.\n\n<sub>⏱ prefill 80 ms</sub>"}]
    assert normalize_history(saved)[-1]["content"] == "Paris."  # histories saved before still strip


@pytest.mark.parametrize(
    ("answer", "closed"),
    [
        ("```python\ndef add(a, b):\n    return a + b\n", True),  # cut by max new tokens inside the block
        ("~~~~\ncode", True),
        ("````\na\n```\nb", True),  # a shorter fence does not close a longer one
        ("```python\nx\n```", False),
        ("Use ``` to start a block.", False),
        ("Paris.", False),
    ],
)
def test_a_code_block_left_open_is_closed_before_the_footer_and_the_model_reads_the_answer(answer, closed):
    from playground.chat import with_footer
    from playground.chat_history import FENCE_MARK

    shown = with_footer(answer, "prompt 30 tokens · prefill 80 ms")
    body, _, footer = shown.partition("\n\n<sub>— ")
    assert footer == "prompt 30 tokens · prefill 80 ms</sub>"
    assert (FENCE_MARK in body) is closed and body.startswith(answer)
    history = [{"role": "user", "content": "Code?"}, {"role": "assistant", "content": shown}]
    assert normalize_history(history)[-1] == {"role": "assistant", "content": answer}

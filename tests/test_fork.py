"""Forking a chat answer: `answer_prefix` in the Python API, ChatSession branches, the moves
between Chat and Step by step, and the bad input around them."""

from __future__ import annotations

import threading

import pytest
import torch
from forward_counts import count_forwards

from playground.chat import ChatRequest, ChatSession, run_chat
from playground.engine import Control
from playground.engine.sampling import SamplingSettings
from playground.errors import Cancelled, PlaygroundError
from playground.step import StepSession
from tests.conftest import make_tiny_llama

GREEDY = SamplingSettings(temperature=0)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def full_forward_logprobs(lm, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
    """log p(answer token i | everything before it) from ONE forward over prompt + answer."""
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        logits = lm.model(ids).logits[0].float()
    positions = torch.arange(len(prompt_ids) - 1, len(prompt_ids) + len(answer_ids) - 1)
    return torch.log_softmax(logits[positions], dim=-1).gather(1, torch.tensor(answer_ids)[:, None])[:, 0]


@pytest.fixture(scope="module")
def first_answer(embedded_lm):
    return run_chat(embedded_lm, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=12))


def test_answer_prefix_is_kept_marked_given_and_continued_as_generate_would(embedded_lm, first_answer):
    kept = first_answer.answer_ids[:3]  # "The capital of"
    chosen = embedded_lm.tokenizer(" Spain", add_special_tokens=False).input_ids
    prefix = kept + chosen
    forked = run_chat(
        embedded_lm, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=10, answer_prefix=prefix)
    )
    assert forked.answer_ids[: len(prefix)] == prefix  # the prefix is kept and the chosen token comes next
    assert [t.source for t in forked.tokens[: len(prefix)]] == ["given"] * len(prefix)
    assert all(not t.given for t in forked.tokens[len(prefix) :])
    assert forked.timings.generated_tokens == len(forked.tokens) - len(prefix)
    reference = embedded_lm.model.generate(
        torch.tensor([forked.prompt_ids + prefix]), do_sample=False, max_new_tokens=10
    )
    continuation = [t.id for t in forked.tokens[len(prefix) :]]
    assert reference[0, len(forked.prompt_ids) + len(prefix) :].tolist() == continuation
    expected = full_forward_logprobs(embedded_lm, forked.prompt_ids, forked.answer_ids)
    assert [t.logprob for t in forked.tokens] == pytest.approx(expected.tolist(), abs=1e-4)
    assert [t.prob for t in forked.tokens] == pytest.approx(expected.exp().tolist(), abs=1e-4)
    assert "Spain" in forked.text


def test_a_sampled_fork_draws_what_a_seeded_generate_draws(embedded_lm, first_answer):
    settings = SamplingSettings(temperature=0.9, top_k=40)
    prefix = first_answer.answer_ids[:4]
    forked = run_chat(
        embedded_lm, ChatRequest(QUESTION, settings=settings, max_new_tokens=8, seed=21, answer_prefix=prefix)
    )
    torch.manual_seed(21)
    reference = embedded_lm.model.generate(
        torch.tensor([forked.prompt_ids + prefix]),
        do_sample=True,
        temperature=0.9,
        top_k=40,
        max_new_tokens=8,
    )
    assert reference[0, len(forked.prompt_ids) + len(prefix) :].tolist() == forked.answer_ids[len(prefix) :]


def test_chat_session_forks_keep_every_branch_and_switch_back(embedded_lm):
    session = ChatSession(embedded_lm)
    original = list(session.answer(ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=12), 1024))[-1]
    alternative = original.tokens[4].top[1].id  # the model's second choice at the fifth token
    forked = list(session.fork(4, alternative, 1024))[-1]
    assert forked.answer_ids[:4] == original.answer_ids[:4] and forked.answer_ids[4] == alternative
    kept = [(t.id, t.logprob, t.rank, t.top) for t in forked.tokens[:4]]
    assert kept == [(t.id, t.logprob, t.rank, t.top) for t in original.tokens[:4]]  # moved, not recomputed
    assert [t.source for t in forked.tokens[:5]] == ["given"] * 5
    branches = session.branches()
    assert len(branches) == 2 and [b.current for b in branches] == [False, True]
    assert session.tree.depth(branches[0].node_id) == len(original.tokens)
    back = session.switch(branches[0].node_id)
    assert back.answer_ids == original.answer_ids and session.tip == branches[0].node_id
    assert [b.current for b in session.branches()] == [True, False]


def test_fork_bad_input_is_refused_and_changes_nothing(tiny_lm):
    session = ChatSession(tiny_lm)
    with pytest.raises(PlaygroundError, match="No answer to fork yet"):
        list(session.fork(0, 5, 64))
    answer = list(session.answer(ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=6), 64))[-1]
    before = (session.tip, len(session.tree.nodes), len(session.updates))
    for position, token, message in [
        (len(answer.tokens), 5, f"Fork position {len(answer.tokens)} is outside the answer"),
        (-1, 5, "Fork position -1"),
        (1, tiny_lm.vocab_size, "outside the vocabulary"),
        (1, -3, "-3"),
    ]:
        with pytest.raises(PlaygroundError, match=message):
            list(session.fork(position, token, 64))
        assert (session.tip, len(session.tree.nodes), len(session.updates)) == before
    with pytest.raises(PlaygroundError, match="No node 999"):
        session.switch(999)


def test_a_prefix_longer_than_the_context_is_refused(embedded_lm):
    small = make_tiny_llama(embedded_lm.tokenizer, max_position_embeddings=64)
    with pytest.raises(PlaygroundError, match="plus an answer prefix of 60 tokens"):
        run_chat(small, ChatRequest(QUESTION, max_new_tokens=4, answer_prefix=[5] * 60))
    with pytest.raises(PlaygroundError, match="outside the vocabulary"):
        run_chat(small, ChatRequest(QUESTION, max_new_tokens=4, answer_prefix=[10**8]))


def test_a_fork_while_another_request_runs_waits_its_turn_and_both_finish(embedded_lm):
    """Two sessions: one streams a long answer while the other forks; neither disturbs the other."""
    busy, forking = ChatSession(embedded_lm), ChatSession(embedded_lm)
    first = list(forking.answer(ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=8), 1024))[-1]
    long_request = ChatRequest(
        [{"role": "user", "content": "Count from one to fifty."}], settings=GREEDY, max_new_tokens=40
    )
    alone = run_chat(embedded_lm, long_request).answer_ids
    results = {}
    thread = threading.Thread(target=lambda: results.update(busy=list(busy.answer(long_request, 1024))[-1]))
    thread.start()
    forked = list(forking.fork(2, first.tokens[2].top[1].id, 1024))[-1]
    thread.join(120)
    assert results["busy"].answer_ids == alone
    assert forked.answer_ids[:2] == first.answer_ids[:2]


def test_a_cancelled_fork_keeps_the_partial_answer_as_a_branch(embedded_lm):
    session = ChatSession(embedded_lm)
    first = list(session.answer(ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=10), 1024))[-1]
    control = Control()
    with pytest.raises(Cancelled):
        for update in session.fork(3, first.tokens[3].top[1].id, 1024, control):
            if update.timings.generated_tokens >= 1:
                control.cancel()  # Stop after the first generated token
    branches = session.branches()
    assert len(branches) == 2 and branches[1].current  # the stopped fork is kept, and can be forked again
    assert session.tree.depth(branches[1].node_id) == 3 + 1 + 1


def test_chat_token_and_step_path_move_both_ways_with_their_records(embedded_lm, monkeypatch):
    """Chat token -> Step by step (records and cache move, no forward); step path -> chat answer."""
    chat = ChatSession(embedded_lm)
    answer = list(chat.answer(ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=8), 1024))[-1]
    calls = count_forwards(monkeypatch, embedded_lm)
    step = StepSession.from_path(
        embedded_lm,
        QUESTION[0]["content"],
        True,
        answer.tokens[:5],
        conversation=QUESTION,
        cache_from=chat.key,
    )
    assert step.ids == answer.prompt_ids + answer.answer_ids[:5]
    assert [e.token for e in step.ledger] == answer.tokens[:5]
    step.candidates(3)
    assert sum(calls) <= 1  # the chat's cache was copied: at most the tip's row is recomputed
    step.pick(step.candidates(2)[1].token_id)
    continued = run_chat(
        embedded_lm,
        ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=6, answer_prefix=step.token_ids),
    )
    assert continued.answer_ids[: len(step.token_ids)] == step.token_ids
    assert [t.logprob for t in continued.tokens[: len(step.token_ids)]] == pytest.approx(
        [e.logprob for e in step.ledger], abs=1e-4
    )

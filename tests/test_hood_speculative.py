"""Speculative decoding: greedy output equal to generate for every draft source, consistent
rounds, the min(1, p/q) rule with residual resampling on hand-made distributions, bad input."""

from __future__ import annotations

import pytest
import torch
from hood_helpers import copy_prompt, generate_greedy, other_tokenizer

from playground.errors import PlaygroundError
from playground.hood import speculative as speculative_lesson
from playground.hood.speculative import (
    accept_probability,
    lookup_draft,
    residual,
    same_tokenizer,
    verify_sampled,
)
from tests.conftest import make_tiny_llama

# --- the accept test on hand-made distributions --------------------------------------------------

P = torch.tensor([0.5, 0.3, 0.2, 0.0])
Q = torch.tensor([0.25, 0.5, 0.15, 0.1])


def test_accept_probability_is_min_one_p_over_q():
    assert accept_probability(P, Q, 0) == 1.0  # p >= q: always kept
    assert accept_probability(P, Q, 1) == pytest.approx(0.6)
    assert accept_probability(P, Q, 2) == 1.0
    assert accept_probability(P, Q, 3) == 0.0  # the model would never say it


def test_residual_is_the_positive_part_of_p_minus_q_renormalised():
    assert torch.allclose(residual(P, Q), torch.tensor([0.25, 0.0, 0.05, 0.0]) / 0.30)
    certain = torch.nn.functional.one_hot(torch.tensor(1), 4).float()  # a prompt-lookup draft
    assert torch.allclose(residual(P, certain), torch.tensor([0.5, 0.0, 0.2, 0.0]) / 0.7)
    assert torch.equal(residual(P, P), P)  # nothing left over: never drawn from (always accepted)


def test_draft_then_verify_samples_exactly_the_target_distribution():
    """Draw x from q, verify: the first token kept is distributed as p (20,000 trials)."""
    generator = torch.Generator().manual_seed(0)
    p = torch.stack([P, torch.tensor([0.1, 0.2, 0.3, 0.4])])  # (d + 1, vocab), d = 1
    counts = torch.zeros(4)
    trials = 20_000
    for _ in range(trials):
        x = int(torch.multinomial(Q, 1, generator=generator))
        accepted, after, checks = verify_sampled(p, Q[None], [x], generator)
        first = x if accepted else after
        counts[first] += 1
        assert checks[0].threshold == accept_probability(P, Q, x) and checks[0].accepted == bool(accepted)
    assert torch.allclose(counts / trials, P, atol=0.012)


def test_all_accepted_draws_the_bonus_from_the_next_distribution():
    generator = torch.Generator().manual_seed(1)
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    accepted, bonus, checks = verify_sampled(p, torch.tensor([[0.0, 1.0, 0.0]]), [1], generator)
    assert (accepted, bonus) == (1, 2) and checks[0].accepted and checks[0].draw is not None


def test_prompt_lookup_finds_the_latest_earlier_ngram():
    assert lookup_draft([1, 2, 3, 4, 5, 1, 2], 3) == [3, 4, 5]
    assert lookup_draft([7, 8, 1, 9, 7, 8, 2, 7, 8], 2, max_ngram=2) == [2, 7]
    assert lookup_draft([1, 2, 3], 4) == []
    assert lookup_draft([5, 6, 5], 2, max_ngram=1) == [6, 5]


# --- greedy equals generate ----------------------------------------------------------------------


def assert_rounds_consistent(result, max_new: int, eos: tuple[int, ...]) -> None:
    assert sum(len(r.emitted) for r in result.rounds) == len(result.ids) <= max_new
    for r in result.rounds[:-1]:
        assert len(r.emitted) == r.accepted + 1 and r.bonus == r.emitted[-1]
    last = result.rounds[-1]
    assert len(last.emitted) == last.accepted + 1 or last.emitted[-1] in eos
    for r in result.rounds:
        assert r.accepted <= len(r.drafted)
        assert r.emitted[: r.accepted] == r.drafted[: r.accepted][: len(r.emitted)]  # cut at EOS
        assert len(r.checks) == min(len(r.drafted), r.accepted + 1)
        assert all(c.accepted for c in r.checks[: r.accepted])


@pytest.fixture(scope="module")
def tiny_draft(embedded_lm):
    """A different tiny random model with the same tokenizer (a poor but valid draft)."""
    return make_tiny_llama(embedded_lm.tokenizer, seed=7)


def test_prompt_lookup_on_a_copy_task_equals_generate_and_accepts_most(embedded_lm):
    ids = copy_prompt(embedded_lm)
    result = speculative_lesson.run(embedded_lm, ids, 32, "prompt_lookup", draft_tokens=6, compare=True)
    assert result.ids == generate_greedy(embedded_lm, ids, 32)
    assert result.identical and result.plain_ids == result.ids
    assert result.acceptance_rate > 0.5 and len(result.rounds) < len(result.ids) / 2
    assert result.speedup is not None and result.speedup > 0
    assert_rounds_consistent(result, 32, embedded_lm.eos_token_ids)


def test_early_exit_equals_generate(embedded_lm):
    ids = embedded_lm.tokenizer("The capital of France is").input_ids
    result = speculative_lesson.run(embedded_lm, ids, 12, "early_exit", draft_tokens=3, exit_layer=24)
    assert result.ids == generate_greedy(embedded_lm, ids, 12) and result.exit_layer == 24
    assert_rounds_consistent(result, 12, embedded_lm.eos_token_ids)
    assert all(0 <= c.draft_prob <= 1 for r in result.rounds for c in r.checks)


def test_draft_model_equals_generate(embedded_lm, tiny_draft):
    ids = embedded_lm.tokenizer("Once upon a time").input_ids
    result = speculative_lesson.run(embedded_lm, ids, 10, "draft", draft=tiny_draft, draft_tokens=2)
    assert result.ids == generate_greedy(embedded_lm, ids, 10)
    assert_rounds_consistent(result, 10, embedded_lm.eos_token_ids)


@pytest.mark.parametrize(
    "method, options",
    [("prompt_lookup", {"ngram": 2}), ("early_exit", {"exit_layer": 1}), ("draft", {})],
)
@pytest.mark.parametrize("k", [1, 5])
def test_tiny_model_every_method_equals_generate(tiny_lm, tiny_draft, method, options, k):
    ids = [5, 6, 7, 8, 5, 6, 7, 9, 5, 6]
    extra = {"draft": tiny_draft} if method == "draft" else {}
    result = speculative_lesson.run(tiny_lm, ids, 30, method, draft_tokens=k, **options, **extra)
    assert result.ids == generate_greedy(tiny_lm, ids, 30)
    assert_rounds_consistent(result, 30, tiny_lm.eos_token_ids)
    assert all(len(r.drafted) <= k for r in result.rounds)


def test_the_draft_model_can_be_the_target_itself_and_accepts_everything(tiny_lm):
    ids = [11, 12, 13]
    result = speculative_lesson.run(tiny_lm, ids, 13, "draft", draft=tiny_lm, draft_tokens=4)
    assert result.acceptance_rate == 1.0 and [len(r.emitted) for r in result.rounds] == [5, 5, 3]


# --- sampling ------------------------------------------------------------------------------------


def test_sampled_runs_are_seeded_and_use_the_ratio_test(tiny_lm, tiny_draft):
    ids = [5, 6, 7, 8, 5, 6, 7]
    settings = {"temperature": 0.9, "top_k": 50}
    first = speculative_lesson.run(tiny_lm, ids, 20, "draft", draft=tiny_draft, settings=settings, seed=3)
    again = speculative_lesson.run(tiny_lm, ids, 20, "draft", draft=tiny_draft, settings=settings, seed=3)
    assert first.ids == again.ids and not first.greedy and first.identical is None
    for check in (c for r in first.rounds for c in r.checks):
        assert check.draw is not None and check.accepted == (check.draw < check.threshold)
        assert check.threshold == pytest.approx(min(1.0, check.target_prob / check.draft_prob), abs=1e-6)
    lookup = speculative_lesson.run(tiny_lm, ids, 12, "prompt_lookup", settings=settings, seed=4)
    for check in (c for r in lookup.rounds for c in r.checks):
        assert check.draft_prob == 1.0 and check.threshold == pytest.approx(check.target_prob, abs=1e-6)


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 30, 31, -1, True, 2.5])
def test_exit_layer_outside_the_model_is_refused(tiny_lm, embedded_lm, k):
    with pytest.raises(
        PlaygroundError, match=r"Early exit needs k between 1 and 29 layers \(the model has 30"
    ):
        speculative_lesson.run(embedded_lm, [1, 2, 3], 4, "early_exit", exit_layer=k)


@pytest.mark.parametrize("k", [0, 17, -3, 1.5])
def test_draft_length_out_of_range_is_refused(tiny_lm, k):
    with pytest.raises(PlaygroundError, match="Draft length must be a whole number from 1 to 16"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 4, "prompt_lookup", draft_tokens=k)


def test_a_draft_model_with_another_tokenizer_is_refused(tiny_lm):
    stranger = make_tiny_llama(other_tokenizer(), vocab_size=5)
    assert not same_tokenizer(tiny_lm.tokenizer, stranger.tokenizer)
    with pytest.raises(PlaygroundError, match=r"different tokenizer .* must share one tokenizer"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 4, "draft", draft=stranger)


def test_other_bad_input(tiny_lm):
    with pytest.raises(PlaygroundError, match="No draft model is loaded: start the app with --draft-model"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 4, "draft")
    with pytest.raises(PlaygroundError, match="Unknown draft method 'magic'"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 4, "magic")
    with pytest.raises(PlaygroundError, match="New tokens must be a whole number from 1 to 1024"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 0)
    with pytest.raises(PlaygroundError, match="more than the context of 512"):
        speculative_lesson.run(tiny_lm, list(range(500)), 20)
    with pytest.raises(PlaygroundError, match="top-p"):
        speculative_lesson.run(tiny_lm, [1, 2, 3], 4, settings={"temperature": 1.0, "top_p": 0})

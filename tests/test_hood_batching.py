"""Batching: each sequence's tokens in the padded batch equal its solo greedy run; timings and
throughput; batch sizes that would not fit in memory are refused clearly."""

from __future__ import annotations

import pytest
from hood_helpers import generate_greedy

from playground.engine.prompts import encode_prompt
from playground.errors import PlaygroundError
from playground.hood import batching as batching_lesson
from playground.hood.batching import MAX_BATCH, memory_needed

QUESTIONS = [
    "What is 2+2?",
    "Name a colour.",
    "Say hello in French.",
    "What is the capital of Italy? Answer briefly.",
]


def test_embedded_batch_tokens_equal_each_solo_run(embedded_lm):
    prompts = [encode_prompt(embedded_lm.tokenizer, q, True) for q in QUESTIONS]
    assert len({len(p) for p in prompts}) > 1  # different lengths: real padding
    result = batching_lesson.run(embedded_lm, prompts, 8)
    assert result.identical and result.same == [True] * 4
    assert result.solo_ids == [generate_greedy(embedded_lm, p, 8) for p in prompts]
    assert result.solo_finished == pytest.approx(
        [sum(result.solo_seconds[: i + 1]) for i in range(4)]
    )  # one by one: each waits for those before it
    assert max(result.batch_finished) == pytest.approx(result.batch_seconds, rel=1e-3)
    assert result.batch_tokens_per_second > 0 and result.throughput_ratio > 0


def test_tiny_batch_with_uneven_prompts_and_updates(tiny_lm):
    prompts = [[5], list(range(10, 40)), [7, 8, 9], list(range(100, 112))]
    phases = [r.phase for r in batching_lesson.iter_run(tiny_lm, prompts, 6)]
    assert phases[:4] == [f"one by one: sequence {i}/4" for i in range(1, 5)]
    assert phases[-1] == "batch: step 6/6"
    result = batching_lesson.run(tiny_lm, prompts, 6)
    assert result.identical and [len(ids) for ids in result.batch_ids] == [6] * 4


def test_batch_sizes_that_would_not_fit_are_refused(tiny_lm):
    probes = tiny_lm.probes
    need = memory_needed(tiny_lm, probes, 16, 40, 32)
    with pytest.raises(
        PlaygroundError, match=r"A batch of 16 × 72 tokens needs about .* MiB .* is free on cpu"
    ):
        batching_lesson.run(tiny_lm, [list(range(1, 41))] * 16, 32, memory_bytes=need)
    assert batching_lesson.run(tiny_lm, [list(range(1, 41))] * 2, 2, memory_bytes=2 * need).identical
    assert memory_needed(tiny_lm, probes, 8, 40, 32) < need


def test_bad_batch_input(tiny_lm):
    with pytest.raises(
        PlaygroundError, match=f"number of prompts must be a whole number from 1 to {MAX_BATCH}"
    ):
        batching_lesson.run(tiny_lm, [[1, 2]] * 17, 4)
    with pytest.raises(PlaygroundError, match="number of prompts"):
        batching_lesson.run(tiny_lm, [], 4)
    with pytest.raises(PlaygroundError, match="one of them is empty"):
        batching_lesson.run(tiny_lm, [[1, 2], []], 4)
    with pytest.raises(PlaygroundError, match="New tokens must be"):
        batching_lesson.run(tiny_lm, [[1, 2]], 0)

"""Compare: two sides answer one conversation at once, each side's answer is its solo run (two models,
or one model with other settings), the first character where they part is found, and a side that
fails says why while the other one finishes."""

from __future__ import annotations

import pytest

from playground.chat import ChatRequest, run_chat
from playground.compare import Side, first_difference, run_compare, stream_compare
from playground.engine.control import Control
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError

GREEDY = SamplingSettings(temperature=0)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _solo(side: Side, n: int) -> list[int]:
    request = ChatRequest(QUESTION, side.system_prompt, side.settings, n, side.seed)
    return run_chat(side.engine, request).answer_ids


def test_each_side_of_a_two_model_compare_equals_its_solo_run(embedded_lm, gemma_lm):
    sides = [Side(embedded_lm, GREEDY), Side(gemma_lm, SamplingSettings(temperature=0.8, top_k=40), seed=5)]
    seen_both_running = False
    for update in stream_compare(sides, QUESTION, max_new_tokens=10):
        running = [s.update is not None and not s.done for s in update.sides]
        seen_both_running |= all(running)
    assert update.finished and not any(s.error for s in update.sides)
    assert seen_both_running  # they streamed side by side, not one after the other
    for side, state in zip(sides, update.sides, strict=True):
        assert state.update.answer_ids == _solo(side, 10), state.name
    assert state.name == gemma_lm.name
    assert "no chat template" in update.sides[1].update.notes[0]
    a, b = update.sides[0].text, update.sides[1].text
    assert update.parting == first_difference(a, b) and a[: update.parting] == b[: update.parting]


def test_one_model_with_two_settings(embedded_lm):
    sides = [
        Side(embedded_lm, GREEDY, label="greedy"),
        Side(embedded_lm, SamplingSettings(1.2), seed=3, label="hot"),
    ]
    result = run_compare(sides, QUESTION, max_new_tokens=8)
    assert [s.name for s in result.sides] == ["greedy", "hot"]
    for side, state in zip(sides, result.sides, strict=True):
        assert state.update.answer_ids == _solo(side, 8)


def test_a_failing_side_says_why_and_the_other_finishes(embedded_lm):
    bad = Side(embedded_lm, SamplingSettings(temperature=0, top_p=1.5), label="bad")
    result = run_compare([Side(embedded_lm, GREEDY), bad], QUESTION, max_new_tokens=6)
    good, failed = result.sides
    assert good.done and not good.error and good.update.answer_ids == _solo(Side(embedded_lm, GREEDY), 6)
    assert failed.done and failed.update is None and failed.error == "top-p must be in (0, 1], got 1.5"


def test_stop_ends_both_sides(embedded_lm, gemma_lm):
    control = Control()
    sides = [Side(embedded_lm, GREEDY), Side(gemma_lm, GREEDY)]
    story = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    for update in stream_compare(sides, story, max_new_tokens=200, control=control):
        if any(s.update is not None and s.update.tokens for s in update.sides):
            control.cancel()
    assert all(s.done and s.error.startswith("Stopped") for s in update.sides)
    assert all(s.update is None or len(s.update.tokens) < 200 for s in update.sides)


def test_first_difference():
    assert first_difference("Paris is", "Paris was") == 6
    assert first_difference("Paris", "Paris") is None
    assert first_difference("Paris", "Paris is") == 5
    assert first_difference("Paris", "Paris is", ended=False) is None  # the shorter one may go on alike


def test_a_comparison_has_two_sides(embedded_lm):
    with pytest.raises(PlaygroundError, match="two sides, got 1"):
        next(stream_compare([Side(embedded_lm)], QUESTION))

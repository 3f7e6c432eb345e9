"""Sampling order on the real model: both orders equal transformers' own warpers in that order,
the histogram's distance from the probabilities shrinks as draws grow, bad input is refused."""

from __future__ import annotations

import re

import pytest
import torch
from hood_tab_helpers import Hood
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.hood import sampling_order as sampling_order_lesson
from playground.hood.sampling_order import draw, sample_histogram, total_variation
from playground.step import StepSession

HOT = SamplingSettings(temperature=1.6, top_p=0.8, top_k=50)


@pytest.fixture(scope="module")
def prefix(embedded_lm):
    return embedded_lm.tokenizer("The capital of France is").input_ids


def reference(embedded_lm, ids, warpers) -> torch.Tensor:
    """transformers' own warpers, in the given order, on one forward's last row."""
    with torch.inference_mode():
        logits = embedded_lm.model(input_ids=torch.tensor([ids])).logits[:, -1].float()
    scores = logits
    for warper in warpers:
        scores = warper(torch.tensor([ids]), scores)
    return torch.softmax(scores, dim=-1)[0]


def test_both_orders_equal_transformers_warpers(embedded_lm, prefix):
    order = sampling_order_lesson.run(embedded_lm, prefix, HOT)
    temperature, top_k, top_p = TemperatureLogitsWarper(1.6), TopKLogitsWarper(50), TopPLogitsWarper(0.8)
    first = reference(embedded_lm, prefix, [temperature, top_k, top_p])  # generate's order
    second = reference(embedded_lm, prefix, [top_k, top_p, temperature])
    assert torch.allclose(order.before, first, atol=1e-6) and torch.allclose(order.after, second, atol=1e-6)
    assert order.kept_before == set(first.nonzero().flatten().tolist())
    assert len(order.kept_before) > len(order.kept_after)  # a hot temperature first lets more through
    assert (
        order.difference == pytest.approx(total_variation(first, second), abs=1e-6)
        and order.difference > 0.05
    )


def test_the_histogram_follows_the_distribution_closer_with_more_draws(embedded_lm, prefix):
    hist = sample_histogram(embedded_lm, prefix, HOT, n=5000, seed=3)
    assert sum(hist.counts.values()) == 5000 and set(hist.counts) <= set(hist.probs)
    assert sum(hist.probs.values()) == pytest.approx(1.0, abs=1e-5)
    tv = dict(hist.tv_by_draws)
    assert tv[5000] < tv[1000] < tv[100] < tv[10]
    assert hist.tv == tv[5000] < 0.1
    again = sample_histogram(embedded_lm, prefix, HOT, n=5000, seed=3)
    assert again.counts == hist.counts  # seeded: the same draws


def test_draws_on_a_hand_made_distribution():
    probs = torch.tensor([0.5, 0.25, 0.25, 0.0])
    *_, hist = list(draw(probs, 4000, seed=0))
    assert 3 not in hist.counts and abs(hist.counts[0] / 4000 - 0.5) < 0.03


def test_bad_input_is_refused(embedded_lm, prefix):
    with pytest.raises(PlaygroundError, match="Draws \\(N\\) must be a whole number from 1 to 5000"):
        sample_histogram(embedded_lm, prefix, HOT, n=5001)
    with pytest.raises(PlaygroundError, match="Temperature 0 is greedy"):
        sampling_order_lesson.run(embedded_lm, prefix, SamplingSettings(temperature=0))
    with pytest.raises(PlaygroundError, match=re.escape("top-p must be in (0, 1], got 1.5")):
        sampling_order_lesson.run(embedded_lm, prefix, SamplingSettings(top_p=1.5))


def test_the_view_reads_the_step_tabs_step(embedded_lm):
    hood = Hood(embedded_lm)
    final = hood.last("order", "The capital of France is", False, 1.6, 0.8, 0, 300, "0")
    assert final["order_status"].startswith("Done: the prefix: 300/300 draws")
    assert "temperature first" in final["order_summary"]
    session = hood.workspaces.get("tab").use_step(StepSession(embedded_lm, "Once upon a time"))
    session.greedy(2)
    final = hood.last("order", "ignored", True, 1.6, 0.8, 0, 100, "0")
    assert f"the Step tab's step ({len(session.ids)} tokens)" in final["order_status"]
    with pytest.raises(PlaygroundError, match="The prefix is empty"):
        Hood(embedded_lm).last("order", " ", True, 1.6, 0.8, 0, 100, "0")

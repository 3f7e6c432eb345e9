"""KV cache on vs off and prefill vs decode: identical tokens both ways, the cache's bytes equal
the KV formula at every step, arithmetic-intensity estimates on hand numbers, bad input."""

from __future__ import annotations

import pytest
from hood_helpers import generate_greedy

from playground.engine.control import Control
from playground.engine.probes import ModelShape
from playground.errors import Cancelled, PlaygroundError
from playground.hood import kv_on_off as kv_on_off_lesson
from playground.hood import prefill_decode as prefill_decode_lesson
from playground.hood.common import preset_ids
from playground.hood.prefill_decode import decode_work, kv_bytes_per_token, prefill_work


def test_embedded_cached_and_recomputed_give_the_same_greedy_tokens(embedded_lm):
    ids = preset_ids(embedded_lm.tokenizer, 120)
    result = kv_on_off_lesson.run(embedded_lm, ids, 6)
    assert result.cached_ids == result.recomputed_ids == generate_greedy(embedded_lm, ids, 6)
    assert result.identical
    assert len(result.cached_step_seconds) == len(result.recomputed_step_seconds) == 5
    assert result.cached_prefill_seconds > 0 and result.recomputed_prefill_seconds > 0
    # the cache holds the prompt after the prefill, one more token after each step
    assert result.cache_lengths == list(range(120, 126))
    # 2 (K, V) × 30 layers × 3 KV heads × 64 × 4 bytes = 46,080 bytes per token in float32
    assert result.cache_bytes == result.formula_bytes == [46_080 * n for n in range(120, 126)]
    assert result.bytes_match and result.step_ratio > 0
    cumulative = result.cumulative(cached=True)
    assert len(cumulative) == 6 and cumulative[-1] == pytest.approx(
        result.cached_prefill_seconds + sum(result.cached_step_seconds)
    )


def test_tiny_model_streams_one_update_per_token(tiny_lm):
    ids = list(range(20, 60))
    updates = [(len(r.cached_ids), r.phase) for r in kv_on_off_lesson.iter_run(tiny_lm, ids, 5)]
    assert updates == [(n, f"token {n}/5") for n in range(1, 6)]
    result = kv_on_off_lesson.run(tiny_lm, ids, 5)
    assert result.identical and result.cached_ids == generate_greedy(tiny_lm, ids, 5)


def test_cancel_stops_between_steps(tiny_lm):
    control = Control()
    steps = kv_on_off_lesson.iter_run(tiny_lm, list(range(20, 60)), 20, control)
    next(steps)
    control.cancel()
    with pytest.raises(Cancelled):
        next(steps)


def test_kv_bad_input(tiny_lm):
    with pytest.raises(PlaygroundError, match="New tokens must be a whole number from 1 to 256"):
        kv_on_off_lesson.run(tiny_lm, [1, 2, 3], 0)
    with pytest.raises(PlaygroundError, match="more than the context of 512"):
        kv_on_off_lesson.run(tiny_lm, list(range(500)), 20)
    with pytest.raises(PlaygroundError, match="empty"):
        kv_on_off_lesson.run(tiny_lm, [], 3)


SHAPE = ModelShape(
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=8,
    hidden=32,
    intermediate=64,
    vocab=100,
    matmul_params=10_000,
    head_params=3_200,
    weight_bytes=40_000,
    element_bytes=4,
)


def test_work_estimates_on_hand_numbers():
    assert kv_bytes_per_token(SHAPE) == 2 * 2 * 2 * 8 * 4  # 256 bytes
    decode = decode_work(SHAPE, 99)
    assert decode.flops == 2 * 10_000 + 4 * 2 * 4 * 8 * 100  # weights, then attention over 100 keys
    assert decode.bytes == 40_000 + 100 * 256
    prefill = prefill_work(SHAPE, 10, chunk=4)
    assert prefill.flops == 2 * 6_800 * 10 + 2 * 3_200 + 2 * 2 * 4 * 8 * 10 * 11
    assert prefill.bytes == 3 * 40_000 + 10 * 256  # three chunks read the weights three times
    one_chunk = prefill_work(SHAPE, 10, chunk=16)  # the weights read once for all ten tokens
    assert one_chunk.intensity > 5 * decode.intensity > prefill.intensity


def test_prefill_vs_decode_on_the_tiny_model(tiny_lm):
    result = prefill_decode_lesson.run(tiny_lm, lengths=(256, 16, 64), decode_tokens=2)
    assert [p.length for p in result.points] == [16, 64, 256]
    assert result.chunk == tiny_lm.forwarder.prefill_chunk and result.shape.layers == 2
    for point in result.points:
        assert point.prefill_tokens_per_second > 0 and point.decode_tokens_per_second > 0
        assert point.prefill.intensity > point.decode.intensity
    intensities = [p.prefill.intensity for p in result.points]
    assert intensities == sorted(intensities)  # longer prompts: more FLOPs per weight byte


def test_prefill_vs_decode_bad_input(tiny_lm):
    with pytest.raises(PlaygroundError, match="Prompt length must be a whole number from 1 to 510"):
        prefill_decode_lesson.run(tiny_lm, lengths=(16, 4096), decode_tokens=2)
    with pytest.raises(PlaygroundError, match="at least one prompt length"):
        prefill_decode_lesson.run(tiny_lm, lengths=())
    with pytest.raises(PlaygroundError, match="Decode steps per length"):
        prefill_decode_lesson.run(tiny_lm, lengths=(16,), decode_tokens=0)


def test_preset_prompts_have_the_asked_length(embedded_lm):
    for n in (1, 16, 1000):
        ids = preset_ids(embedded_lm.tokenizer, n)
        assert len(ids) == n
    assert embedded_lm.tokenizer.decode(preset_ids(embedded_lm.tokenizer, 6)).startswith("The history")

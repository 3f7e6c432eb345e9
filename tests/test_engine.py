"""The engine core: one place runs the model, caches that append and crop in place, chunked
prefill with progress and cancellation, the pinned private transformers helpers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from forward_counts import count_forwards
from transformers import DynamicCache

from playground.chat import ChatRequest, run_chat, stream_chat
from playground.engine import Control, DecodePlan, Progress
from playground.engine.cache import GrowableLayer, copy_cache, new_cache, storage_bytes
from playground.engine.records import TokenRecord
from playground.engine.sampling import SamplingSettings
from playground.errors import Cancelled, PlaygroundError

ENGINE_DIR = Path(__file__).resolve().parents[1] / "playground" / "engine"
GREEDY = SamplingSettings(temperature=0)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_no_model_calls_outside_the_engine_in_the_source():
    """The same rule, read from the code: nothing outside playground/engine/ calls model(...) or generate."""
    root = ENGINE_DIR.parent
    offenders = []
    for path in root.rglob("*.py"):
        if ENGINE_DIR in path.parents:
            continue
        code = [line for line in path.read_text(encoding="utf-8").splitlines() if "`" not in line]  # not docs
        for needle in ("model(input_ids", "model.generate(", ".model(ids", "model.forward("):
            if any(needle in line for line in code):
                offenders.append(f"{path.relative_to(root)}: {needle}")
    assert offenders == []


# --- the cache: appends in place, crops without copying -----------------------------------------


def test_growable_cache_gives_the_same_logits_as_a_dynamic_cache(tiny_lm):
    model = tiny_lm.model
    ids = torch.randint(3, 1000, (1, 40), generator=torch.Generator().manual_seed(0))
    dynamic, growable = DynamicCache(config=model.config), new_cache(model.config)
    assert all(isinstance(layer, GrowableLayer) for layer in growable.layers)
    with torch.inference_mode():
        for cache in (dynamic, growable):
            model(input_ids=ids[:, :30], past_key_values=cache, use_cache=True)
        for position in range(30, 40):
            step = ids[:, position : position + 1]
            a = model(input_ids=step, past_key_values=dynamic, use_cache=True).logits
            b = model(input_ids=step, past_key_values=growable, use_cache=True).logits
            assert torch.equal(a, b)


def test_growable_layer_appends_in_place_and_crops_without_copying(tiny_lm):
    cache = new_cache(tiny_lm.model.config)
    with torch.inference_mode():
        tiny_lm.model(input_ids=torch.arange(3, 13).unsqueeze(0), past_key_values=cache, use_cache=True)
        layer = cache.layers[0]
        tiny_lm.model(input_ids=torch.tensor([[20]]), past_key_values=cache, use_cache=True)  # grows once
        buffer = layer._key_buffer.data_ptr()
        for token in range(21, 40):
            tiny_lm.model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            assert layer._key_buffer.data_ptr() == buffer  # no reallocation: written in place
    assert cache.get_seq_length() == 30 and layer.keys.shape[-2] == 30
    cache.crop(-12)
    assert cache.get_seq_length() == 18 and layer._key_buffer.data_ptr() == buffer
    twin = copy_cache(cache)
    assert twin.get_seq_length() == 18 and torch.equal(twin.layers[0].keys, layer.keys)
    assert twin.layers[0]._key_buffer.data_ptr() != buffer  # a fork owns its rows
    assert storage_bytes(cache) >= sum(t.numel() * t.element_size() for t in (layer.keys, layer.values))


# --- sequences by key -----------------------------------------------------------------------------


def test_sync_reuses_the_common_prefix_and_remembers_rows(embedded_lm, monkeypatch):
    ids = embedded_lm.tokenizer("The capital of France is Paris, and", add_special_tokens=False).input_ids
    reference = embedded_lm.prefill(ids, last=3)
    calls = count_forwards(monkeypatch, embedded_lm)
    key = "test:sync"
    rows = embedded_lm.sync(key, ids, last=3)
    torch.testing.assert_close(rows, reference, atol=1e-4, rtol=0)
    embedded_lm.sync(key, ids[:-2])  # back two tokens: remembered, no forward
    embedded_lm.sync(key, [*ids[:-2], 42])  # a different token: one forward of one token
    assert calls == [len(ids), 1]
    assert embedded_lm.sequence_ids(key) == [*ids[:-2], 42]
    embedded_lm.fork(key, "test:fork")
    assert embedded_lm.sequence_ids("test:fork") == [*ids[:-2], 42]
    embedded_lm.release(key)
    assert embedded_lm.sequence_ids(key) == []


def test_bad_ids_and_lengths_are_refused_with_the_value(tiny_lm):
    for ids, message in [
        ([], "empty"),
        ([1, 10**9], "1000000000"),
        ([1, -4], "-4"),
        ([1, True], "True"),
        (list(range(600)), "context of 512"),
    ]:
        with pytest.raises(PlaygroundError, match=message):
            tiny_lm.prefill(ids)
    with pytest.raises(PlaygroundError, match="last 5 of 2"):
        tiny_lm.prefill([1, 2], last=5)


# --- chunked prefill: progress, cancellation, queue wait apart ------------------------------------


def long_prompt(lm, tokens: int) -> list[int]:
    text = "The history of the printing press begins long before Gutenberg. " * (tokens // 10)
    return lm.tokenizer(text, add_special_tokens=False).input_ids[:tokens]


def test_prefill_runs_in_chunks_with_progress_and_the_same_numbers(embedded_lm, monkeypatch):
    monkeypatch.setattr(embedded_lm.forwarder, "prefill_chunk", 64)
    ids = long_prompt(embedded_lm, 300)
    events = list(embedded_lm.stream(ids, DecodePlan(GREEDY, 2, 0)))
    progress = [(e.done, e.total) for e in events if isinstance(e, Progress)]
    assert progress == [(64, 300), (128, 300), (192, 300), (256, 300), (300, 300)]
    records = [e for e in events if isinstance(e, TokenRecord)]
    monkeypatch.setattr(embedded_lm.forwarder, "prefill_chunk", 4096)
    whole = [e for e in embedded_lm.stream(ids, DecodePlan(GREEDY, 2, 0)) if isinstance(e, TokenRecord)]
    assert [r.id for r in records] == [r.id for r in whole]
    assert [r.logprob for r in records] == pytest.approx([r.logprob for r in whole], abs=1e-4)


def test_a_cancelled_prefill_stops_within_a_chunk_and_raises_cancelled(embedded_lm, monkeypatch):
    monkeypatch.setattr(embedded_lm.forwarder, "prefill_chunk", 64)
    control = Control()
    seen = []

    def stop_after_two_chunks(phase: str, done: int, total: int) -> None:
        seen.append(done)

    control.progress = stop_after_two_chunks
    stream = embedded_lm.stream(long_prompt(embedded_lm, 400), DecodePlan(GREEDY, 5, 0), control=control)
    with pytest.raises(Cancelled, match="Stopped"):
        for event in stream:
            if isinstance(event, Progress) and event.done >= 128:
                control.cancel()
                control.cancel()  # a double cancel is harmless
    assert control.cancelled


def test_after_a_cancelled_long_prefill_a_short_request_starts_at_once(embedded_lm):
    """Stop during a long prefill, then "Hi": its time to first token stays within 2 s of alone."""
    hi = ChatRequest([{"role": "user", "content": "Hi"}], settings=GREEDY, max_new_tokens=1)
    alone = min(run_chat(embedded_lm, hi).timings.prefill_seconds for _ in range(2))
    long_request = ChatRequest(
        [{"role": "user", "content": "Summarize: " + "the cat sat on the mat. " * 600}],
        settings=GREEDY,
        max_new_tokens=4,
    )
    control = Control()
    started = threading.Event()
    chunk_times: list[float] = []
    outcome: list[BaseException] = []

    def long_user() -> None:
        try:
            for update in stream_chat(embedded_lm, long_request, control=control):
                if update.progress is not None:
                    chunk_times.append(time.perf_counter())
                    if len(chunk_times) >= 2:
                        started.set()
        except Cancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=long_user)
    thread.start()
    assert started.wait(60), "the long prefill never reported progress"
    control.cancel()  # Stop
    begun = time.perf_counter()
    answer = run_chat(embedded_lm, hi)
    first_token = time.perf_counter() - begun
    thread.join(30)
    assert not thread.is_alive() and len(outcome) == 1  # the long request ended with Cancelled
    # The cancelled request ends at its next chunk boundary: 2 s, or more on a machine so loaded
    # that one prefill chunk itself takes longer.
    allowed = alone + max(2.0, 1.5 * (chunk_times[1] - chunk_times[0]))
    assert answer.timings.prefill_seconds < allowed
    assert first_token < allowed, f"waited {first_token:.1f} s for the first token (alone: {alone:.2f} s)"
    assert answer.timings.wait_seconds < 2.0


# --- private transformers helpers the engine relies on (no public API exists) ---------------------


def test_pinned_private_helpers_still_behave(tiny_lm):
    """`_get_logits_processor` builds generate's processors from a generation config (beam parity);
    `get_layer_types_and_kwargs` gives the layer types DynamicCache itself uses (the KV calculator)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    tiny_lm.model.generation_config.repetition_penalty = 1.5
    try:
        processors = tiny_lm.generation_processors([1, 2, 3], num_beams=2, max_new_tokens=4)
        names = [type(p).__name__ for p in processors]
        assert "RepetitionPenaltyLogitsProcessor" in names
    finally:
        tiny_lm.model.generation_config.repetition_penalty = None
    types, kwargs = get_layer_types_and_kwargs(tiny_lm.model.config)
    assert len(types) == tiny_lm.model.config.num_hidden_layers and len(kwargs) == len(types)
    assert set(types) == {"full_attention"}

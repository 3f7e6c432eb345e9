"""The OpenAI-compatible API (/v1/...) driven by the reference `openai` client against the live app.

The answers are the engine's: the same tokens and log-probs (1e-5: a row batched with others sums in
another order) as `run_chat` / `Engine.stream` alone, greedy and seeded, streamed or not. Every bad
parameter is a 400 with a message naming it; a client that leaves mid-stream frees its place in the
batch; a set API key is required.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from typing import Any

import httpx
import openai
import pytest

from playground.api.generate import release
from playground.api.routes import OpenAIApi
from playground.chat import ChatRequest, run_chat
from playground.engine.base import DecodePlan
from playground.engine.control import Control
from playground.engine.prompts import encode_text
from playground.engine.records import TokenRecord
from playground.engine.sampling import SamplingSettings
from playground.engine.tokens import token_piece
from playground.settings import load_settings
from playground.ui.app import build_demo, launch_local, launch_options

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SEEDED = {"temperature": 0.8, "top_p": 0.95, "seed": 7}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def client(launched_app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{launched_app}/v1", api_key="unused", max_retries=0, timeout=120)


def chat_alone(lm: Any, sampling: dict, max_tokens: int) -> list[TokenRecord]:
    """The app's own chat, alone: the records every API answer must equal (no end-of-sequence token)."""
    settings = SamplingSettings(
        temperature=sampling.get("temperature", 1.0), top_p=sampling.get("top_p", 1.0)
    )
    request = ChatRequest(QUESTION, settings=settings, max_new_tokens=max_tokens, seed=sampling.get("seed"))
    return [r for r in run_chat(lm, request).tokens if not r.special]


def assert_same_records(lm: Any, entries: list, records: list[TokenRecord], top: int) -> None:
    """The API's log-prob entries are the engine's records: tokens, log-probs, top alternatives."""
    assert [e.token for e in entries] == [r.text for r in records]
    for entry, record in zip(entries, records, strict=True):
        assert math.isclose(entry.logprob, record.logprob, abs_tol=TOLERANCE)
        assert entry.bytes == list(record.text.encode()) or "\ufffd" in record.text
        expected = [(token_piece(lm.tokenizer, a.id).text, math.log(a.prob)) for a in record.top[:top]]
        shown = entry.top_logprobs[: len(expected)]
        assert [t.token for t in shown] == [text for text, _ in expected]
        for alt, (_, logprob) in zip(shown, expected, strict=True):
            assert math.isclose(alt.logprob, logprob, abs_tol=TOLERANCE)


def test_models_lists_the_loaded_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


@pytest.mark.parametrize("sampling", [{"temperature": 0}, SEEDED], ids=["greedy", "seeded"])
def test_chat_streamed_with_logprobs_equals_the_engine(client, embedded_lm, sampling):
    records = chat_alone(embedded_lm, sampling, 12)
    stream = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=12, logprobs=True, top_logprobs=3, stream=True, **sampling
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    entries = [e for c in chunks for e in (c.choices[0].logprobs.content if c.choices[0].logprobs else [])]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text == "".join(r.text for r in records)
    assert_same_records(embedded_lm, entries, records, 3)
    assert all(len(e.top_logprobs) == 3 for e in entries)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_chat_not_streamed_equals_the_engine(client, embedded_lm):
    records = chat_alone(embedded_lm, SEEDED, 10)
    reply = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=10, logprobs=True, top_logprobs=20, **SEEDED
    )
    choice = reply.choices[0]
    assert choice.message.content == "".join(r.text for r in records)
    assert len(choice.logprobs.content[0].top_logprobs) == 20
    assert_same_records(embedded_lm, choice.logprobs.content, records, 5)  # alone: 5 alternatives kept
    assert reply.usage.completion_tokens == len(records) + (choice.finish_reason == "stop")
    greedy = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=16, temperature=0)
    assert greedy.choices[0].message.content == "The capital of France is Paris."
    assert greedy.choices[0].finish_reason == "stop"


def engine_completion(lm: Any, prompt: str, plan: DecodePlan) -> list[TokenRecord]:
    return [e for e in lm.stream(encode_text(lm.tokenizer, prompt), plan) if isinstance(e, TokenRecord)]


def test_completions_streamed_and_not_equal_the_engine(client, embedded_lm):
    prompt = "The capital of France is"
    records = engine_completion(embedded_lm, prompt, DecodePlan(SamplingSettings(temperature=0), 8, 0))
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, logprobs=2)
    assert reply.choices[0].text == "".join(r.text for r in records)
    logprobs = reply.choices[0].logprobs
    assert logprobs.tokens == [r.text for r in records]
    for got, record in zip(logprobs.token_logprobs, records, strict=True):
        assert math.isclose(got, record.logprob, abs_tol=TOLERANCE)
    assert len(logprobs.top_logprobs[0]) == 2
    assert logprobs.text_offset[1] == len(records[0].text)
    chunks = list(
        client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=8, temperature=0.7, seed=3, stream=True
        )
    )
    seeded = engine_completion(embedded_lm, prompt, DecodePlan(SamplingSettings(temperature=0.7), 8, 3))
    assert "".join(c.choices[0].text for c in chunks) == "".join(r.text for r in seeded)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_stop_string_ends_the_answer_before_it(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, stop=[" Paris", "xyz"]
    )
    assert reply.choices[0].message.content == "The capital of France is"
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, stop="France", stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "The capital of "
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_release_holds_back_what_may_start_a_stop_string():
    assert release("Hello wor", ["world"]) == (6, False)
    assert release("Hello world!", ["world"]) == (6, True)
    assert release("Hello", []) == (5, False)
    assert release("xab", ["abc", "q"]) == (1, False)  # "ab" may start "abc"
    assert release("xab", ["b", "abc"]) == (2, True)  # the first stop found wins


BAD_CHAT = [
    ({"temperature": -1}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 100_000}, "max_tokens"),
    ({"max_completion_tokens": -3}, "max_completion_tokens"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"n": 2}, "n"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages"),
    ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0]"),
    ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
    ({"extra_body": {"top_k": -5}}, "top_k"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
]


@pytest.mark.parametrize(("change", "param"), BAD_CHAT, ids=[p for _, p in BAD_CHAT])
def test_every_bad_chat_parameter_is_a_400_with_a_message(client, change, param):
    request = {"model": MODEL, "messages": QUESTION, "max_tokens": 4, **change}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(**request)
    error = raised.value.body
    assert raised.value.status_code == 400
    assert error["param"] == param, error
    assert param.split("[")[0] in error["message"] or "message" in error["message"], error
    assert "Traceback" not in error["message"]


BAD_COMPLETIONS = [
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [10**9]}, "prompt"),
    ({"logprobs": 21}, "logprobs"),
    ({"echo": True}, "echo"),
    ({"best_of": 3}, "best_of"),
    ({"max_tokens": 9000}, "max_tokens"),
]


@pytest.mark.parametrize(("change", "param"), BAD_COMPLETIONS, ids=[p for _, p in BAD_COMPLETIONS])
def test_every_bad_completions_parameter_is_a_400_with_a_message(client, change, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(**{"model": MODEL, "prompt": "Hi", "max_tokens": 4, **change})
    assert raised.value.body["param"] == param, raised.value.body
    assert raised.value.body["message"]


def test_an_unknown_model_is_a_404_and_a_broken_body_a_400(client, launched_app):
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-5", messages=QUESTION)
    assert MODEL in raised.value.body["message"] and raised.value.body["code"] == "model_not_found"
    broken = httpx.post(f"{launched_app}/v1/chat/completions", content=b"{not json", timeout=30)
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]
    too_long = httpx.post(
        f"{launched_app}/v1/completions",
        json={"model": MODEL, "prompt": "word " * 9000, "max_tokens": 4},
        timeout=60,
    )
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"


def test_a_client_that_leaves_mid_stream_frees_its_place(launched_app, embedded_lm):
    batcher = embedded_lm.schedule
    assert batcher is not None, "the app runs with continuous batching by default"
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 400, "temperature": 0.7, "stream": True}
    body["messages"] = [{"role": "user", "content": "Write a very long story about a lighthouse."}]
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{launched_app}/v1/chat/completions", json=body) as r,
    ):
        chunks = 0
        for line in r.iter_lines():
            chunks += line.startswith("data: ")
            if chunks == 3:
                break
        assert any(job.name == "stream" for job in batcher.running), "the request runs in the batch"
    started = batcher.iterations
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (batcher.running or batcher.waiting):
        time.sleep(0.1)
    assert not batcher.running and not batcher.waiting, "the place is free again"
    assert batcher.iterations - started < 60, "it left long before its 400 tokens"


def test_an_api_key_when_set_is_required(tiny_lm):
    demo = build_demo(tiny_lm, load_settings(api_key="sesame"))
    url = launch_local(demo, **launch_options())
    try:
        request = {"model": "tiny-random-llama", "messages": QUESTION, "max_tokens": 2}
        for key in ("wrong", None):
            anonymous = openai.OpenAI(base_url=f"{url}/v1", api_key=key or "", max_retries=0)
            with pytest.raises(openai.AuthenticationError) as raised:
                anonymous.chat.completions.create(**request)
            assert raised.value.body["code"] == "invalid_api_key"
        assert httpx.get(f"{url}/v1/models", timeout=30).status_code == 401
        keyed = openai.OpenAI(base_url=f"{url}/v1", api_key="sesame", max_retries=0)
        assert keyed.chat.completions.create(**request).usage.completion_tokens == 2
        assert [m.id for m in keyed.models.list().data] == ["tiny-random-llama"]
    finally:
        demo.close()


def test_the_api_key_comes_from_the_command_line_or_the_environment(monkeypatch):
    import app

    assert app.parse_args(["--api-key", "sesame"]).api_key == "sesame"
    monkeypatch.setenv("PLAYGROUND_API_KEY", "from-env")
    assert app.parse_args([]).api_key == "from-env"
    monkeypatch.delenv("PLAYGROUND_API_KEY")
    assert app.parse_args([]).api_key is None  # no key asked by default


def test_the_api_serves_every_model_the_registry_holds(embedded_lm, gemma_lm):
    """The app's registry holds SmolLM2 (its own) and Gemma (as the model picker loads it): /v1/models
    lists both, the app's first; a request for Gemma gets Gemma's own answer, and holds Gemma loaded
    while it answers (the registry refuses to unload it mid-answer)."""
    from playground.errors import PlaygroundError
    from playground.models import ModelRegistry

    settings = load_settings()
    registry = ModelRegistry(settings)
    registry.add(None, embedded_lm)
    registry.add("gemma-3-270m", gemma_lm, pinned=False)
    demo = build_demo(embedded_lm, settings, registry=registry)
    url = launch_local(demo, **launch_options())
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        gemma = "gemma-3-270m"
        assert [m.id for m in client.models.list().data] == [MODEL, gemma]
        prompt = "今天天气很好"
        alone = engine_completion(gemma_lm, prompt, DecodePlan(SamplingSettings(temperature=0), 6, 0))
        reply = client.completions.create(model=gemma, prompt=prompt, max_tokens=6, temperature=0)
        assert reply.choices[0].text == "".join(r.text for r in alone)
        stream = client.completions.create(model=gemma, prompt=prompt, max_tokens=200, stream=True)
        next(iter(stream))  # answering now
        with pytest.raises(PlaygroundError, match="using it"):
            registry.unload(gemma)
        stream.close()
    finally:
        demo.close()


class _Unbatched:
    """An engine as the API's places see it: no running batch (concurrency None)."""

    concurrency = None


class _Lookup:
    def keep(self, engine: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def test_an_unloaded_engines_places_go_with_it():
    """The API's places per engine (requests answered at once) are kept while the engine lives and
    go when it is unloaded: no entry stays behind for a later engine at the same address."""
    api = OpenAIApi(_Lookup(), None, 100, places=2)
    engine = _Unbatched()
    assert list(api.in_turn(engine, Control(), iter(["a", "b"]))) == ["a", "b"]
    assert list(api.in_turn(engine, Control(), iter(["c"]))) == ["c"]
    assert len(api._places) == 1 and api._places[engine]._value == 2  # both places free again
    del engine
    gc.collect()
    assert len(api._places) == 0

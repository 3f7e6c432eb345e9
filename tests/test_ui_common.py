"""Shared UI helpers: error translation, ZeroGPU decoration, seeds, the model queue."""

from __future__ import annotations

import sys
import types

import gradio as gr
import pytest
import torch

from playground.errors import PlaygroundError
from playground.ui import common


def test_engine_errors_become_gradio_errors_with_the_same_message():
    def bad() -> None:
        raise PlaygroundError("top-p must be in (0, 1], got 2")

    with pytest.raises(gr.Error, match=r"top-p must be in \(0, 1\], got 2"):
        common.friendly_errors(bad)()


def test_out_of_memory_and_unexpected_errors_get_one_line_messages():
    assert "Out of memory" in common.explain_exception(torch.OutOfMemoryError("CUDA out of memory"))
    message = common.explain_exception(KeyError("boom"))
    assert message.startswith("Something went wrong: KeyError") and "\n" not in message


def test_generator_handlers_translate_errors_too():
    def stream():
        yield 1
        raise PlaygroundError("Empty message")

    wrapped = common.friendly_errors(stream)
    with pytest.raises(gr.Error, match="Empty message"):
        list(wrapped())


def test_model_handlers_get_spaces_gpu_when_spaces_is_installed(monkeypatch):
    calls = []
    fake = types.ModuleType("spaces")
    fake.GPU = lambda fn: calls.append(fn) or fn
    monkeypatch.setitem(sys.modules, "spaces", fake)

    def handler() -> str:
        return "ok"

    assert common.model_handler(handler)() == "ok" and calls == [handler]
    monkeypatch.setitem(sys.modules, "spaces", None)  # not installed: unchanged
    assert common.on_gpu(handler) is handler


@pytest.mark.parametrize(("value", "expected"), [("", None), (None, None), ("42", 42), (7.0, 7), (" 3 ", 3)])
def test_seed_parsing(value, expected):
    assert common.parse_seed(value) == expected


@pytest.mark.parametrize("value", ["abc", "1.5", "inf", "nan"])
def test_bad_seeds_are_named(value):
    with pytest.raises(PlaygroundError, match="seed must be a whole number"):
        common.parse_seed(value)


def test_model_queue_limit_comes_from_settings():
    try:
        common.set_model_concurrency(3)
        assert common.model_event() == {"concurrency_id": "model", "concurrency_limit": 3}
        with pytest.raises(PlaygroundError, match="at least 1, got 0"):
            common.set_model_concurrency(0)
    finally:
        common.set_model_concurrency(2)


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), (3.0, 3), ("12345678901234567890", 12345678901234567890)]
)
def test_whole_numbers_from_numbers_and_exact_text(value, expected):
    assert common.as_whole(value, "steps") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (2.5, "steps must be a whole number, got 2.5"),
        (float("inf"), "steps must be a whole number, got inf"),
        (float("nan"), "steps must be a number, got nan"),
        (None, "steps must be a number, got None"),
        (True, "steps must be a number, got True"),
        ("many", "steps must be a number, got 'many'"),
    ],
)
def test_odd_values_are_refused_with_the_setting_named(value, message):
    with pytest.raises(PlaygroundError, match=message.replace("(", r"\(")):
        common.as_whole(value, "steps")

"""The Chat tab through a launched app and gradio_client: streaming, controls, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client.exceptions import AppError

from playground.chat import normalize_history

REPO = Path(__file__).resolve().parents[1]
# temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed, show_template
GREEDY = (0, 50, 1.0, 0.0, 1.0, 30, "1", False)


def chat(client, message: str, history=(), system: str = "", settings=GREEDY):
    job = client.submit(message, list(history), system, *settings, api_name="/chat")
    job.result()
    return job.outputs()


def test_streamed_chat_answers_with_token_view_and_timings(app_client):
    outputs = chat(app_client, "What is the capital of France?")
    assert len(outputs) > 3, "the answer should arrive token by token"
    textbox, history, token_view, stats = outputs[-1]
    assert textbox == ""
    messages = normalize_history(history)
    assert messages[0] == {"role": "user", "content": "What is the capital of France?"}
    assert "Paris" in messages[-1]["content"]
    growing = [len(normalize_history(out[1])[-1]["content"]) for out in outputs]
    assert growing == sorted(growing) and growing[0] < growing[-1]
    assert "tok-card" in token_view and "log-prob" in token_view and "#5" in token_view
    assert "prefill (time to first token)" in stats and "tok/s" in stats and "stopped: eos" in stats


def test_second_turn_uses_history_and_retry_undo_clear_work(app_client):
    first = chat(app_client, "My name is Ada. Say hi.")[-1][1]
    second = chat(app_client, "What is my name?", history=first)[-1][1]
    assert len(normalize_history(second)) == 4
    retried = app_client.predict(second, "", *GREEDY, api_name="/chat_retry")[1]
    assert normalize_history(retried)[:3] == normalize_history(second)[:3]
    textbox, undone, *_ = app_client.predict(second, api_name="/chat_undo")
    assert textbox == "What is my name?" and len(normalize_history(undone)) == 2
    assert app_client.predict(api_name="/chat_clear")[1] == []


def test_same_seed_same_answer_through_the_api(app_client):
    sampled = (1.0, 0, 1.0, 0.0, 1.0, 12, "42", False)
    first = chat(app_client, "Write a word.", settings=sampled)[-1][1]
    second = chat(app_client, "Write a word.", settings=sampled)[-1][1]
    assert normalize_history(first) == normalize_history(second)


def test_templated_stream_shows_special_tokens(app_client):
    view = chat(app_client, "Hi", settings=(*GREEDY[:-1], True))[-1][2]
    assert "&lt;|im_start|&gt;" in view and "tok-answer" in view and "tok-prompt" in view


@pytest.mark.parametrize(
    ("message", "settings", "expected"),
    [
        ("", GREEDY, "Empty message"),
        ("hi", (-1, 50, 1.0, 0.0, 1.0, 30, "1", False), "temperature must be >= 0"),
        ("hi", (1, 50, 1.5, 0.0, 1.0, 30, "1", False), r"top-p must be in \(0, 1\], got 1.5"),
        ("hi", (1, -3, 1.0, 0.0, 1.0, 30, "1", False), "top-k must be an integer >= 0"),
        ("hi", (1, 50, 1.0, 0.0, 1.0, 99999, "1", False), "max new tokens must be between 1 and"),
        ("word " * 9000, GREEDY, "Prompt too long"),
        ("hi", (1, 50, 1.0, 0.0, 1.0, 30, "abc", False), "seed must be a whole number"),
    ],
)
def test_bad_input_gets_a_clear_message_through_the_api(app_client, message, settings, expected):
    with pytest.raises(AppError, match=expected):
        app_client.predict(message, [], "", *settings, api_name="/chat")


def test_a_failing_request_does_not_break_another_session(launched_app):
    from gradio_client import Client

    good, bad = Client(launched_app, verbose=False), Client(launched_app, verbose=False)
    good_job = good.submit("What is the capital of France?", [], "", *GREEDY, api_name="/chat")
    bad_job = bad.submit("hi", [], "", -5, 50, 1.0, 0.0, 1.0, 30, "1", False, api_name="/chat")
    with pytest.raises(AppError):
        bad_job.result()
    assert "Paris" in normalize_history(good_job.result()[1])[-1]["content"]


def test_cli_exits_non_zero_with_a_one_line_reason():
    result = subprocess.run(
        [sys.executable, "app.py", "--model", "no-such-org/no-such-model"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": ""},
    )
    assert result.returncode == 2
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: Cannot load model 'no-such-org/no-such-model'")

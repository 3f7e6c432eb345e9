"""The Chat tab through a launched app and gradio_client: streaming, controls, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client.exceptions import AppError

from playground.chat import normalize_history
from playground.errors import PlaygroundError
from playground.ui.chat_controls import ChatControls

REPO = Path(__file__).resolve().parents[1]
# temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed, show_template
GREEDY = (0, 50, 1.0, 0.0, 1.0, 30, "1", False)
PLAIN = ChatControls("", *GREEDY)  # the same values, as a plain-function call takes them


def chat(client, message: str, history=(), system: str = "", settings=GREEDY):
    job = client.submit(message, list(history), system, *settings, api_name="/chat")
    job.result()
    return job.outputs()


def test_streamed_chat_answers_with_token_view_and_timings(app_client):
    outputs = chat(app_client, "What is the capital of France?")
    assert len(outputs) > 3, "the answer should arrive token by token"
    _, history, token_view, stats, _ = outputs[-1]
    assert outputs[0][0] == "", "the message box is cleared when the answer starts"
    messages = normalize_history(history)
    assert messages[0] == {"role": "user", "content": "What is the capital of France?"}
    assert "Paris" in messages[-1]["content"]
    growing = [len(normalize_history(out[1])[-1]["content"]) for out in outputs[1:]]
    assert growing == sorted(growing) and growing[0] < growing[-1]
    assert (
        "tok-card" in token_view
        and "log-prob" in token_view
        and "#5" in token_view
        and "tok-alt" in token_view
    )
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


def test_the_default_settings_answer_the_readme_question_right(app_client):
    """A newcomer's first answer, with every control as it starts (README: how they were chosen)."""
    _, history, _, stats, _ = app_client.predict("What is the capital of France?", api_name="/chat")
    assert normalize_history(history)[-1]["content"].startswith("The capital of France is Paris")
    assert "seed 0" in stats  # the same answer on every run


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


def last_values(stream) -> dict:
    """Every named output's last value over a handler's stream of updates."""
    values: dict = {}
    for update in stream:
        values.update(update)
    return values


def test_handlers_as_plain_functions_put_statistics_under_each_answer(embedded_lm):
    from playground.settings import load_settings
    from playground.ui.chat_tab import ChatHandlers

    handlers = ChatHandlers(embedded_lm, load_settings())
    history = last_values(handlers.chat("What is the capital of France?", [], PLAIN))["history"]
    answer = history[-1]["content"]
    assert "Paris" in answer and "prefill (time to first token)" in answer and "tok/s" in answer
    history = last_values(handlers.chat("And of Italy?", history, PLAIN))["history"]
    assert sum("prefill" in m["content"] for m in history if m["role"] == "assistant") == 2
    assert "prefill" not in normalize_history(history)[1]["content"]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ((None, 50, 1.0, 0.0, 1.0, 30, "1", False), "Temperature must be a number, got None"),
        ((1, 50, 1.0, 0.0, 1.0, 3.7, "1", False), "Max new tokens must be a whole number, got 3.7"),
        ((1, "many", 1.0, 0.0, 1.0, 30, "1", False), "Top-k must be a number, got 'many'"),
    ],
)
def test_odd_api_values_are_named(embedded_lm, settings, expected):
    from playground.settings import load_settings
    from playground.ui.chat_tab import ChatHandlers

    with pytest.raises(PlaygroundError, match=expected):
        list(ChatHandlers(embedded_lm, load_settings()).chat("hi", [], ChatControls("", *settings)))


def test_cli_bad_environment_value_exits_with_one_line():
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "", "PLAYGROUND_PORT": "abc"},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "error: PLAYGROUND_PORT must be a whole number, got 'abc'"


def test_message_box_is_cleared_once_so_typing_during_streaming_survives(embedded_lm):
    from playground.settings import load_settings
    from playground.ui.chat_tab import ChatHandlers

    outputs = list(ChatHandlers(embedded_lm, load_settings()).chat("Count to ten.", [], PLAIN))
    assert outputs[0]["message"] == "" and len(outputs) > 2
    assert all("message" not in out for out in outputs[1:])  # later updates leave the box alone
    assert outputs[0]["status"] == "Waiting for the model…"  # the previous answer's numbers are gone


def test_stop_marks_the_cut_off_answer_and_the_template_toggle_rerenders(embedded_lm):
    from playground.settings import load_settings
    from playground.ui.chat_tab import ChatHandlers

    handlers = ChatHandlers(embedded_lm, load_settings())
    partial = [{"role": "user", "content": "Tell a story"}, {"role": "assistant", "content": "Once upon"}]
    stopped = handlers.chat_stopped(partial, "prompt 30 tokens · generated 3 tokens\n\n> a note")
    history, stats = stopped["history"], stopped["status"]
    assert stats == "prompt 30 tokens · generated 3 tokens · stopped: by you\n\n> a note"
    assert "stopped: by you" in history[-1]["content"]
    assert normalize_history(history)[-1]["content"] == "Once upon"
    assert handlers.chat_stopped(history, stats) == {"history": history, "status": stats}  # already marked
    before_first = handlers.chat_stopped(partial[:1], "Reading the prompt (prefill): 256 / 4,468 tokens…")
    assert before_first == {  # no answer yet: the message goes back in the box
        "history": [],
        "message": "Tell a story",
        "status": "Stopped before the first token: your message is back in the box.",
    }

    plain_view = last_values(handlers.chat("Hi", [], PLAIN))["token_view"]
    templated = handlers.show_answer(True)["token_view"]
    assert "&lt;|im_start|&gt;" in templated and "&lt;|im_start|&gt;" not in plain_view
    assert handlers.show_answer(False)["token_view"] == plain_view


def test_stop_undo_or_clear_drops_an_answer_still_waiting_in_the_queue(embedded_lm):
    """Send, then Stop (or Undo, or Clear) while the answer waits for the model: its ticket is
    dropped, so when its turn comes it changes nothing (no model work, the message stays in its
    box); a later Send's answer comes."""
    from playground.settings import load_settings
    from playground.ui.chat_tab import ChatHandlers

    handlers = ChatHandlers(embedded_lm, load_settings())
    waiting = handlers.chat_ticket()["ticket"]
    stopped = handlers.chat_stopped([], "", "Hi")
    assert stopped == {"status": "Stopped while it waited for the model: nothing changed."}
    assert list(handlers.chat("Hi", [], PLAIN, ticket=waiting)) == [{}]
    assert handlers.workspaces.get(None).chat.turn is None  # nothing was answered or kept
    for drop in (lambda: handlers.chat_undo([]), handlers.chat_clear):
        waiting = handlers.chat_ticket()["ticket"]
        drop()
        assert list(handlers.chat_retry([], PLAIN, ticket=waiting)) == [{}]
    answered = last_values(handlers.chat("Hi", [], PLAIN, ticket=handlers.chat_ticket()["ticket"]))
    assert answered["history"][-1]["role"] == "assistant" and "generated" in answered["status"]
    nothing = handlers.chat_stopped(answered["history"], answered["status"])  # nothing runs or waits
    assert nothing == {"history": answered["history"], "status": answered["status"]}

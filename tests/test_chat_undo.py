"""What is on screen is the only conversation the chat knows: after Undo (or Clear), no fork,
retry, branch switch or template toggle brings back an undone turn. Also: a message that gets no
answer goes back in the box, user text shows as typed, values out of range are named, and the
tab's controls reach its handlers as one ChatControls while the API keeps its named parameters.
Plain functions and gradio_client against the launched app, on the real embedded model."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.helpers import special_args
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.chat import as_typed, normalize_history
from playground.chat_history import back_in_box
from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.ui.chat_controls import ChatControls
from playground.ui.chat_tab import ChatHandlers
from playground.ui.common import grouped_inputs, input_names
from playground.workspace import Workspaces

FRANCE, ITALY = "What is the capital of France?", "What is the capital of Italy?"
GREEDY = ChatControls(temperature=0, max_new_tokens=12, seed="1")
# The same, as the API takes them after message and history.
GREEDY_API = ("", 0, 50, 0.95, 0.0, 1.0, 12, "1", False)


def last_values(stream) -> dict:
    """Every named output's last value over a handler's stream of updates."""
    values: dict = {}
    for update in stream:
        values.update(update)
    return values


def users(history) -> list[str]:
    return [m["content"] for m in normalize_history(history) if m["role"] == "user"]


def alternative(token_view: str, position: int) -> int:
    """The second choice at position, read from the token cards' fork buttons."""
    return [int(t) for t in re.findall(rf"data-pos='{position}' data-token='(\d+)'", token_view)][1]


@pytest.fixture
def tab(embedded_lm):
    """Handlers as plain functions and one browser tab's request, with a France and an Italy turn."""
    handlers = ChatHandlers(embedded_lm, load_settings(), Workspaces(embedded_lm))
    request = SimpleNamespace(session_hash="undo-tab")
    first = last_values(handlers.chat(FRANCE, [], GREEDY, request))
    second = last_values(handlers.chat(ITALY, first["history"], GREEDY, request))
    assert "Rome" in normalize_history(second["history"])[-1]["content"]
    return SimpleNamespace(
        handlers=handlers, request=request, first=first, second=second, chat=handlers._workspace(request).chat
    )


def test_undo_shows_the_answer_before_and_the_template_toggle_keeps_to_it(tab):
    h, r = tab.handlers, tab.request
    undone = h.chat_undo(tab.second["history"], False, r)
    assert undone["message"] == ITALY and normalize_history(undone["history"]) == normalize_history(
        tab.first["history"]
    )
    assert undone["token_view"] == tab.first["token_view"] and undone["status"] == tab.first["status"]
    for show in (True, False, True):
        view = h.show_answer(show, r)["token_view"]
        assert "Paris" in view and "Italy" not in view and "Rome" not in view
    assert h.show_answer(False, r)["token_view"] == tab.first["token_view"]


def test_undo_keeps_text_typed_in_the_box_since(tab):
    h, r = tab.handlers, tab.request
    typed = "And what is the capital of Spain?"
    undone = h.chat_undo(tab.second["history"], False, r, typed)
    assert undone["message"] == f"{ITALY}\n{typed}"  # the undone message, before what was typed
    assert normalize_history(undone["history"]) == normalize_history(tab.first["history"])
    again = h.chat_undo(undone["history"], False, r, "   ")  # a box of blanks holds nothing typed
    assert again["message"] == FRANCE and again["history"] == []
    nothing = h.chat_undo([], False, r, typed)  # nothing to undo: the box stays as it is
    assert nothing["message"] == typed and nothing["history"] == []
    assert back_in_box(FRANCE, FRANCE) == FRANCE and back_in_box(FRANCE, None) == FRANCE


def test_retry_leaves_the_message_box_alone(tab):
    h, r = tab.handlers, tab.request
    updates = list(h.chat_retry(tab.second["history"], GREEDY, r, message="typed since"))
    assert updates and all("message" not in values for values in updates)  # text typed there stays
    assert normalize_history(updates[-1]["history"]) == normalize_history(tab.second["history"])
    too_long = "word " * 9000  # a retry that gets no answer leaves the chat and the box as they were
    history = [{"role": "user", "content": as_typed(too_long)}, {"role": "assistant", "content": "x"}]
    retry, updates = h.chat_retry(history, GREEDY, r, message="typed since"), []
    with pytest.raises(PlaygroundError, match="Prompt too long"):
        updates.extend(retry)
    assert "message" not in updates[0] and updates[-1]["message"] == "typed since"
    status = updates[-1]["status"]
    assert updates[-1]["history"] == history and status.startswith("Not answered: Prompt too long")
    assert "back in the box" not in status


def test_retry_keeps_every_branch_of_the_answer_and_each_keeps_its_settings(tab):
    """Retry answers the last message again as a new branch: the earlier answer and its fork stay
    in the branch list, and each branch keeps the settings it was answered with."""
    h, r = tab.handlers, tab.request
    forked = last_values(
        h.chat_fork(tab.second["history"], 1, alternative(tab.second["token_view"], 1), False, r)
    )
    assert len(tab.chat.branches()) == 2
    sampled = ChatControls(temperature=1.5, max_new_tokens=12, seed="3")
    retried = last_values(h.chat_retry(forked["history"], sampled, r, message=""))
    branches = tab.chat.branches()
    assert len(branches) == 3 and branches[-1].current and retried["branch"].visible
    assert [value for _, value in retried["branch"].choices] == [b.node_id for b in branches]
    assert users(retried["history"]) == [FRANCE, ITALY] and tab.chat.request.settings.temperature == 1.5
    back = h.chat_branch(retried["history"], branches[0].node_id, False, r)  # the first, greedy answer
    assert normalize_history(back["history"]) == normalize_history(tab.second["history"])
    assert tab.chat.request.settings.temperature == 0 and [
        len(t.request.messages) for t in tab.chat.turns
    ] == [
        1,
        3,
    ]


def test_after_undo_a_fork_runs_on_the_conversation_on_screen(tab):
    h, r = tab.handlers, tab.request
    undone = h.chat_undo(tab.second["history"], False, r)
    france = tab.chat.turn.shown
    token = alternative(undone["token_view"], 2)
    forked = last_values(h.chat_fork(undone["history"], 2, token, True, r))
    assert users(forked["history"]) == [FRANCE]
    assert (
        "Italy" not in forked["token_view"]
        and "Rome" not in normalize_history(forked["history"])[-1]["content"]
    )
    fork = tab.chat.turn.shown
    assert fork.prompt_ids == france.prompt_ids  # the France conversation, 37 tokens, not the undone 62
    assert fork.answer_ids[:3] == [*france.answer_ids[:2], token]


def test_after_undo_branches_and_retry_stay_on_the_conversation_on_screen(tab):
    h, r = tab.handlers, tab.request
    undone = h.chat_undo(tab.second["history"], False, r)
    forked = last_values(h.chat_fork(undone["history"], 1, alternative(undone["token_view"], 1), False, r))
    original = next(b.node_id for b in tab.chat.branches() if not b.current)
    back = h.chat_branch(forked["history"], original, False, r)
    assert normalize_history(back["history"]) == normalize_history(tab.first["history"])
    assert back["token_view"] == tab.first["token_view"]
    retried = last_values(h.chat_retry(back["history"], GREEDY, r))  # greedy: the same France answer
    assert normalize_history(retried["history"]) == normalize_history(tab.first["history"])
    assert [len(t.request.messages) for t in tab.chat.turns] == [1]


def test_a_retry_with_a_bad_value_keeps_the_answer_on_screen(tab):
    """Retry refused for a bad seed: the engine still holds the answer the page shows."""
    h, r = tab.handlers, tab.request
    bad = ChatControls(temperature=0, max_new_tokens=12, seed="one")
    with pytest.raises(PlaygroundError, match="seed"):
        list(h.chat_retry(tab.second["history"], bad, r))
    assert [len(t.request.messages) for t in tab.chat.turns] == [1, 3]
    assert h.show_answer(False, r)["token_view"] == tab.second["token_view"]


def test_clear_forgets_every_answer(tab):
    h, r = tab.handlers, tab.request
    assert h.chat_clear(r)["history"] == [] and h.show_answer(True, r) == {}
    with pytest.raises(PlaygroundError, match="No answer to fork yet"):
        list(h.chat_fork([], 0, 5, False, r))


def test_a_stale_history_is_refused_not_forked(tab):
    """An API client that sends the conversation from before its Undo gets a clear refusal."""
    h, r = tab.handlers, tab.request
    h.chat_undo(tab.second["history"], False, r)
    with pytest.raises(PlaygroundError, match="no longer this tab's last one"):
        list(h.chat_fork(tab.second["history"], 1, 5, False, r))
    with pytest.raises(PlaygroundError, match="no longer this tab's last one"):
        h.chat_branch(tab.second["history"], 1, False, r)


def test_a_message_that_gets_no_answer_goes_back_in_the_box(tab):
    h, r = tab.handlers, tab.request
    too_long = "word " * 9000
    outputs = []
    with pytest.raises(PlaygroundError, match="Prompt too long"):
        for values in h.chat(too_long, tab.second["history"], GREEDY, r):
            outputs.append(values)
    assert outputs[0]["message"] == "" and users(outputs[0]["history"])[-1] == too_long
    failed = outputs[-1]
    assert failed["message"] == too_long and failed["history"] == tab.second["history"]
    assert (
        failed["status"].startswith("Not answered: Prompt too long") and "back in the box" in failed["status"]
    )
    assert failed["token_view"] == tab.second["token_view"]  # the last answer is shown again
    assert [len(t.request.messages) for t in tab.chat.turns] == [1, 3]  # nothing changed


def test_stop_before_the_first_token_puts_the_message_back_before_what_was_typed_since(tab):
    h, r = tab.handlers, tab.request
    waiting = [*tab.second["history"], {"role": "user", "content": as_typed("Tell me **more**")}]
    stopped = h.chat_stopped(waiting, "Reading the prompt (prefill): 256 / 3,535 tokens…", "and", r)
    assert stopped == {
        "history": tab.second["history"],
        "message": "Tell me **more**\nand",
        "status": "Stopped before the first token: your message is back in the box.",
    }


def test_user_messages_are_shown_as_typed_and_read_back_exactly():
    typed = "**bold** <img src=x onerror=alert(1)> $$x^2$$ &amp; \\n\n\ttab  and  spaces"
    shown = as_typed(typed)
    assert "<img" not in shown and "**" not in shown and "$$" not in shown and "\n" not in shown
    assert normalize_history([{"role": "user", "content": shown}])[0]["content"] == typed
    assert normalize_history([{"role": "user", "content": typed}])[0]["content"] == typed  # plain API text


def test_values_outside_a_sliders_range_are_brought_in_and_named():
    settings, notes = ChatControls(temperature=5, top_k=500, top_p=0.005, repetition_penalty=0.2).settings()
    assert (settings.temperature, settings.top_k, settings.top_p, settings.repetition_penalty) == (
        2,
        200,
        0.01,
        0.5,
    )
    assert notes == [
        "Temperature 5 is outside its range 0–2: used 2.",
        "Top-k 500 is outside its range 0–200: used 200.",
        "Top-p 0.005 is outside its range 0.01–1: used 0.01.",
        "Repetition penalty 0.2 is outside its range 0.5–2: used 0.5.",
    ]
    assert ChatControls().settings()[1] == []
    with pytest.raises(PlaygroundError, match="temperature must be >= 0"):  # the engine cannot use it
        ChatControls(temperature=-1).settings()


def test_one_controls_dataclass_serves_every_answering_handler(embedded_lm):
    h = ChatHandlers(embedded_lm, load_settings())
    controls = [
        "system_prompt",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repetition_penalty",
        "max_new_tokens",
        "seed",
        "show_template",
    ]
    assert input_names(h.chat) == ["message", "history", *controls, "ticket"]  # the button's, for Stop
    assert input_names(h.chat_retry) == ["history", *controls, "ticket", "message"]  # the box, kept
    assert input_names(h.chat_from_step) == [*controls, "ticket"]
    assert input_names(h.chat_from_link) == controls  # a page load: nothing to stop before it begins


@dataclass(frozen=True)
class Pair:
    """Two components' values (a module-level class: annotations are resolved in the module)."""

    left: int
    right: int


def test_a_grouped_parameter_is_flat_for_gradio_and_rebuilt_for_the_handler():
    def add(first: int, pair: Pair, request: gr.Request = None):
        yield first + pair.left * pair.right, request

    flat = grouped_inputs(add)
    assert list(inspect.signature(flat).parameters) == ["first", "left", "right", "request"]
    inputs, *_ = special_args(flat, [1, 2, 3], request="the request")  # Gradio puts the request in
    assert list(flat(*inputs)) == [(7, "the request")]
    assert input_names(add) == ["first", "left", "right"] and grouped_inputs(len) is len


# --- through the API ---------------------------------------------------------------------------------


@pytest.fixture
def client(launched_app):
    """A fresh browser tab of its own (the shared app_client's chat is other tests' business)."""
    return Client(launched_app, verbose=False)


def test_api_chat_chat_undo_fork_runs_on_the_conversation_on_screen(client):
    first = client.predict(FRANCE, [], *GREEDY_API, api_name="/chat")
    second = client.predict(ITALY, first[1], *GREEDY_API, api_name="/chat")
    message, history, token_view, status, _ = client.predict(second[1], api_name="/chat_undo")
    assert message == ITALY and users(history) == [FRANCE]
    assert token_view == first[2] and status == first[3]
    with pytest.raises(AppError, match="no longer this tab's last one"):
        client.predict(history=second[1], fork_position=2, fork_token=5, api_name="/chat_fork")
    token = alternative(token_view, 2)
    _, forked, view, stats, branches = client.predict(
        history=history, fork_position=2, fork_token=token, show_template=True, api_name="/chat_fork"
    )
    assert users(forked) == [FRANCE] and "Italy" not in view and "Rome" not in str(forked)
    assert "prompt 37 tokens" in stats  # the France conversation alone, not the undone 62 tokens
    original = branches["choices"][0][1]
    back, view, _, _ = client.predict(history=forked, branch=original, api_name="/chat_branch")
    assert normalize_history(back) == normalize_history(first[1]) and view == first[2]
    retried = client.predict(back, *GREEDY_API, api_name="/chat_retry")
    assert normalize_history(retried[1]) == normalize_history(first[1])
    box, emptied, *_ = client.predict(history=retried[1], message="typed since", api_name="/chat_undo")
    assert box == f"{FRANCE}\ntyped since" and emptied == []  # what was typed stays in the box


def test_api_a_too_long_message_comes_back_with_the_reason(client):
    too_long = "word " * 9000
    job = client.submit(too_long, [], *GREEDY_API, api_name="/chat")
    with pytest.raises(AppError, match="Prompt too long"):
        job.result()
    message, history, _, status, _ = job.outputs()[-1]
    assert message == too_long and history == [] and status.startswith("Not answered: Prompt too long")


def test_api_keeps_its_named_parameters_and_names_what_it_changed(client):
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/chat"][
        "parameters"
    ]
    assert [p["parameter_name"] for p in parameters] == [
        "message",
        "history",
        "system_prompt",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repetition_penalty",
        "max_new_tokens",
        "seed",
        "show_template",
    ]
    _, history, _, stats, _ = client.predict(FRANCE, temperature=0, max_new_tokens=16, api_name="/chat")
    assert "Paris" in normalize_history(history)[-1]["content"] and "stopped: eos" in stats
    stats = client.predict("Say hi.", temperature=5, max_new_tokens=2, api_name="/chat")[3]
    assert "Temperature 5 is outside its range 0–2: used 2." in stats

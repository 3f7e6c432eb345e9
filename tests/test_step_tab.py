"""Step-by-step tab: handlers as plain functions, then the launched app through gradio_client."""

from __future__ import annotations

import html
import json
import re
import threading
import time

import gradio as pytest_gradio
import pytest
from gradio_client import handle_file

from playground.errors import PlaygroundError
from playground.plots_step import REMOVED_COLOR, cumulative_logprob_figure, distribution_figure
from playground.sampling import DEFAULT_ORDER
from playground.session_store import SessionStore
from playground.stepper import StepSession
from playground.ui import step_tab
from playground.ui.step_tab import (
    N_BUTTONS,
    VIEW_OUTPUTS,
    StepHandlers,
    parse_token_ids,
    probability_markdown,
    read_settings,
    render,
    text_html,
)

PROMPT = "The capital of France is"
ORDER = list(DEFAULT_ORDER)
SETTINGS = (1.0, 0, 1.0, 0.0, 1.0, 1.0, ORDER)  # temperature, top-k, top-p, min-p, typical-p, rep, order
VIEW = (10, "raw", *SETTINGS)  # candidates in the chart, stage shown, settings
# positions in a handler's view outputs
TEXT, STATUS, IDS, FIGURE, STAGE, LEDGER = 0, 1, 2 + N_BUTTONS, 3 + N_BUTTONS, 4 + N_BUTTONS, 5 + N_BUTTONS


def ledger_tokens(outputs: tuple, offset: int = 0) -> list[str]:
    return [row[1] for row in outputs[offset + LEDGER]]


@pytest.fixture
def handlers(embedded_lm) -> StepHandlers:
    return StepHandlers(embedded_lm, SessionStore())


def test_handlers_pick_undo_force_sample(handlers, embedded_lm) -> None:
    started = handlers.start("", PROMPT, False, *VIEW)
    session_id, view = started[0], started[3:]
    engine = StepSession(embedded_lm, PROMPT)
    top = engine.candidates(N_BUTTONS)
    assert view[IDS] == [c.token_id for c in top]  # the ids behind the buttons
    assert view[2]["value"].startswith(f"[1] {top[0].piece.visible} ")
    view = handlers.pick_nth(2)(session_id, [c.token_id for c in top], *VIEW)
    assert ledger_tokens(view) == [top[1].piece.visible]
    view = handlers.force(session_id, " Lyon", *VIEW)
    assert "Lyon" in view[TEXT] and len(ledger_tokens(view)) == 2
    view = handlers.undo(session_id, *VIEW)
    assert ledger_tokens(view) == [top[1].piece.visible]
    first = handlers.sample(session_id, 3, *VIEW)
    handlers.undo(session_id, *VIEW)
    again = handlers.sample(session_id, 3, *VIEW)
    assert ledger_tokens(first) == ledger_tokens(again) and len(ledger_tokens(again)) == 2
    view = handlers.run_steps(session_id, 3, 5, *VIEW, progress=lambda *a, **k: None)
    assert len(ledger_tokens(view)) == 5
    assert "5 generated tokens" in view[STATUS]


def test_handlers_refuse_bad_input_without_change(handlers) -> None:
    session_id = handlers.start("", PROMPT, False, *VIEW)[0]
    before = ledger_tokens(handlers.greedy(session_id, *VIEW))
    bad_view = (10, "raw", 1.0, 0, 1.5, 0.0, 1.0, 1.0, ORDER)  # top-p 1.5
    for call, shown in [
        (lambda: handlers.pick(session_id, 10**9, *VIEW), "1000000000"),
        (lambda: handlers.force(session_id, "", *VIEW), "empty"),
        (lambda: handlers.sample(session_id, 1, *bad_view), "1.5"),
        (lambda: handlers.pick(session_id, 5, *bad_view), "1.5"),
        (lambda: handlers.run_steps(session_id, 2.5, 1, *VIEW), "2.5"),
        (lambda: handlers.undo("no-such-session", *VIEW), "Start"),
    ]:
        with pytest.raises(PlaygroundError) as info:
            call()
        assert shown in str(info.value)
    assert ledger_tokens(handlers.refresh(session_id, *VIEW)) == before
    skipped = handlers.refresh("", *VIEW)  # settings moved before Start: no error, nothing to show
    assert len(skipped) == VIEW_OUTPUTS and all(v == pytest_gradio.skip() for v in skipped)


def test_stage_view_branches_and_open_prefix(handlers, embedded_lm) -> None:
    session_id = handlers.start("", PROMPT, False, *VIEW)[0]
    view = handlers.refresh(session_id, 10, "top_k", 0.7, 3, 1.0, 0.0, 1.0, 1.0, ORDER)
    figure, stage = view[FIGURE], view[STAGE]
    assert stage["choices"] == ["raw", "temperature", "top_k"] and stage["value"] == "top_k"
    colors = figure.to_dict()["data"][1]["marker"]["color"]
    assert colors[3:] == [REMOVED_COLOR] * 7 and REMOVED_COLOR not in colors[:3]
    handlers.greedy(session_id, *VIEW)
    handlers.greedy(session_id, *VIEW)
    handlers.undo(session_id, *VIEW)
    view = handlers.force(session_id, " Rome", *VIEW)
    branches = view[-1]["choices"]
    assert len(branches) == 2 and view[-1]["value"] == branches[1][1]
    assert view[-2].count("<li>") == 3  # "Paris" then two branches under it
    view = handlers.switch(session_id, branches[0][1], *VIEW)
    assert view[-1]["value"] == branches[0][1]
    ids = embedded_lm.tokenizer(" Paris.", add_special_tokens=False).input_ids
    opened = handlers.open_prefix(session_id, PROMPT, False, json.dumps(ids), *VIEW)
    assert opened[0] == session_id and ledger_tokens(opened, 3) == ["␣Paris", "."]
    assert [row[2] for row in opened[3 + LEDGER]] == ["force", "force"]


def test_export_writes_the_settings_on_screen_and_import_restores_them(handlers) -> None:
    session_id = handlers.start("", PROMPT, False, *VIEW)[0]
    tuned = (0.7, 5, 0.9, 0.0, 1.0, 1.0, ORDER)
    handlers.refresh(session_id, 10, "raw", *tuned)  # settings moved after Start
    handlers.greedy(session_id, 10, "raw", *tuned)
    path = handlers.export_file(session_id)
    with open(path, encoding="utf-8") as handle:
        exported = json.load(handle)["settings"]
    assert (exported["temperature"], exported["top_k"], exported["top_p"]) == (0.7, 5, 0.9)
    handlers.probability(session_id, " Paris", 10, "raw", *SETTINGS)  # asking uses the screen's too
    assert handlers.sessions.get(session_id).settings.temperature == 1.0
    imported = handlers.import_file(session_id, path, *VIEW)  # widgets still show the defaults
    assert len(imported) == 3 + VIEW_OUTPUTS + len(SETTINGS)
    assert imported[-len(SETTINGS) :] == tuned
    assert handlers.sessions.get(session_id).settings.top_k == 5


def test_cumulative_plot_has_room_and_no_duplicate_title() -> None:
    labels = [f"tok{i}" for i in range(30)]
    figure = cumulative_logprob_figure([-0.7] * 30, labels).to_dict()
    layout, bars = figure["layout"], figure["data"][0]
    assert "title" not in layout or not layout["title"].get("text")  # the component's label names it
    assert layout["yaxis"]["automargin"] and layout["margin"]["l"] >= 60 and layout["height"] >= 320
    assert bars["textangle"] == -90 and bars["customdata"] == labels  # hover names every token
    shown = [t for t in bars["text"] if t]
    assert 1 < len(shown) <= 12 and shown[0] == "tok0"
    assert cumulative_logprob_figure([-1.0, -2.0], ["a", "b"]).to_dict()["data"][0]["text"] == ["a", "b"]


def test_probability_answer_labels_first_token_values(embedded_lm) -> None:
    answer = probability_markdown(StepSession(embedded_lm, PROMPT).probability_of(" Paris, the city"))
    assert "first token rank" in answer and "first token after sampling" in answer
    assert " · after sampling" not in answer


def test_render_helpers() -> None:
    settings = read_settings(0.5, 40.0, 0.9, 0.0, 1.0, 1.0, ["top_p", "temperature"])
    assert settings.order[:2] == ("top_p", "temperature") and set(settings.order) == set(ORDER)
    assert settings.top_k == 40
    assert parse_token_ids("1, 2 3") == [1, 2, 3] and parse_token_ids("[4, 5]") == [4, 5]
    with pytest.raises(PlaygroundError, match="x"):
        parse_token_ids("1, x")
    figure = distribution_figure(["a", "b"], [0.6, 0.4], [1.0, 0.0], [False, True], "top_k").to_dict()
    assert figure["data"][1]["marker"]["color"] == ["#2a7de1", REMOVED_COLOR]
    assert figure["data"][1]["name"] == "after top_k"


def test_render_shows_token_cards(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.force(" Paris\n")
    views = render(session, read_settings(*SETTINGS), 10, "raw")
    assert len(views) == VIEW_OUTPUTS
    text = views[0]
    assert text.count("class='tok'") >= 2 + 5  # two tokens plus the legend's five swatches
    assert "log-prob" in text and "rank" in text and "Paris" in text


# --- the launched app through gradio_client -------------------------------------------------------


def test_tab_through_gradio_client(app_client, embedded_lm, tmp_path) -> None:
    engine = StepSession(embedded_lm, PROMPT)
    top = engine.candidates(3)
    out = app_client.predict(PROMPT, False, *VIEW, api_name="/step_start")
    assert out[0] == PROMPT and "Prompt:" in out[3]
    out = app_client.predict(*VIEW, api_name="/step_pick_candidate_1")
    assert [r[1] for r in out[4]["data"]] == [top[0].piece.visible]
    out = app_client.predict(top[2].token_id, *VIEW, api_name="/step_pick")
    assert [r[1] for r in out[4]["data"]] == [top[0].piece.visible, top[2].piece.visible]
    out = app_client.predict(*VIEW, api_name="/step_undo")
    assert len(out[4]["data"]) == 1
    out = app_client.predict(" is a city", *VIEW, api_name="/step_force")
    assert "city" in out[0] and len(out[4]["data"]) == 4
    sampled = app_client.predict("42", *VIEW, api_name="/step_sample")
    app_client.predict(*VIEW, api_name="/step_undo")
    resampled = app_client.predict("42", *VIEW, api_name="/step_sample")
    assert sampled[4]["data"] == resampled[4]["data"] and len(resampled[4]["data"]) == 5
    with pytest.raises(Exception, match="outside the vocabulary"):
        app_client.predict(10**9, *VIEW, api_name="/step_pick")
    answer = app_client.predict(" London", *VIEW, api_name="/step_probability")
    assert "rank" in answer
    path = app_client.predict(api_name="/step_export")
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    assert len(data["nodes"]) == 6 and data["prompt"] == PROMPT
    imported = app_client.predict(handle_file(path), *VIEW, api_name="/step_import")
    assert list(imported[-len(SETTINGS) :]) == list(SETTINGS)  # the settings widgets show the file's
    replayed, original = imported[2 + 4]["data"], resampled[4]["data"]
    assert imported[0] == PROMPT and [r[:3] for r in replayed] == [r[:3] for r in original]
    assert [r[4] for r in replayed] == pytest.approx([r[4] for r in original], abs=1e-3)  # log-probs


def test_two_clients_never_mix(launched_app, embedded_lm) -> None:
    from gradio_client import Client

    prompts = ["Roses are red,", "One, two, three,"]
    results: dict[str, list] = {}

    def play(prompt: str) -> None:
        client = Client(launched_app, verbose=False)
        client.predict(prompt, False, *VIEW, api_name="/step_start")
        for _ in range(3):
            client.predict(*VIEW, api_name="/step_greedy")
            client.predict(*VIEW, api_name="/step_pick_candidate_2")
            client.predict(*VIEW, api_name="/step_undo")
        results[prompt] = client.predict(*VIEW, api_name="/step_refresh")[4]["data"]

    threads = [threading.Thread(target=play, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for prompt in prompts:
        alone = StepSession(embedded_lm, prompt)
        alone.greedy(3)
        assert [r[1] for r in results[prompt]] == [e.piece.visible for e in alone.ledger]


assert pytest_gradio  # gradio must import for these tests


def test_connect_open_prefix_from_another_tab(embedded_lm) -> None:
    """How the beam-search tab opens a prefix here: its own components, one call to wire them."""
    from gradio_client import Client

    from playground.ui.step_tab import build_step_tab

    with pytest_gradio.Blocks() as demo:
        with pytest_gradio.Tab("Beam"):
            prompt = pytest_gradio.Textbox(PROMPT)
            chat = pytest_gradio.Checkbox(False)
            ids = pytest_gradio.Textbox("")
            button = pytest_gradio.Button("open in step-by-step")
        with pytest_gradio.Tab("Step"):
            step = build_step_tab(embedded_lm)
        step.connect_open_prefix(button.click, prompt, chat, ids)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        paris = embedded_lm.tokenizer(" Paris", add_special_tokens=False).input_ids
        out = Client(url, verbose=False).predict(
            PROMPT, False, json.dumps(paris), api_name="/step_open_prefix"
        )
        assert out[0] == PROMPT and [r[1] for r in out[2 + 4]["data"]] == ["␣Paris"]
    finally:
        demo.close()


def test_text_shows_multibyte_characters_whole(tiny_lm) -> None:
    """The coloured text reads exactly as the decoded sequence (no U+FFFD from byte tokens)."""
    session = StepSession(tiny_lm, PROMPT)
    session.force(" 東京 😀 café")
    page = text_html(session)
    stream = page.split("<div class='token-stream step-text'>", 1)[1]
    visible = html.unescape(re.sub(r"<span class='tok-card'>.*?</table></span>|<[^>]+>", "", stream))
    assert visible == PROMPT + " 東京 😀 café" and "\ufffd" not in visible
    assert stream.count("tabindex='0'") == len(session.ledger) and "tok-partial" in stream


def rendered_counts(outputs: tuple) -> tuple[int, int, int, int]:
    """Tokens in the coloured text, the status line, the ledger and the log-prob chart."""
    status = outputs[STATUS]
    in_status = 0 if status.startswith("Prompt:") else int(status.split(" generated tokens")[0])
    chart = outputs[LEDGER + 1].data[0].x
    return outputs[TEXT].count("tabindex='0'"), in_status, len(outputs[LEDGER]), len(chart)


def test_concurrent_clicks_render_one_state_each(tiny_lm, monkeypatch) -> None:
    """Two threads pick and undo on ONE session: every result shows a single state."""
    chart = step_tab.cumulative_logprob_figure

    def slow_chart(*args: object) -> object:
        time.sleep(0.005)  # widen the render so the other thread's click lands inside it
        return chart(*args)

    monkeypatch.setattr(step_tab, "cumulative_logprob_figure", slow_chart)
    handlers = StepHandlers(tiny_lm, SessionStore())
    session_id = handlers.start("", PROMPT, False, *VIEW)[0]
    handlers.force(session_id, " in the north of", *VIEW)
    results: list[tuple] = []
    errors: list[BaseException] = []

    def clicks(token_id: int) -> None:
        try:
            for _ in range(12):
                results.append(handlers.pick(session_id, token_id, *VIEW))
                results.append(handlers.undo(session_id, *VIEW))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=clicks, args=(t,)) for t in (11, 12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 48
    for outputs in results:
        counts = rendered_counts(outputs)
        assert len(set(counts)) == 1, counts

"""Step-by-step tab: handlers as plain functions, then the launched app through gradio_client."""

from __future__ import annotations

import html
import json
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio_client import handle_file

from playground.engine.sampling import DEFAULT_ORDER
from playground.errors import PlaygroundError
from playground.plots.step import REMOVED_COLOR, cumulative_logprob_figure, distribution_figure
from playground.step import StepSession
from playground.step.snapshot import StepSnapshot, take_snapshot
from playground.ui import step_render
from playground.ui.i18n import ENGLISH
from playground.ui.step_render import (
    CANDIDATE_BUTTONS,
    SETTINGS_INPUTS,
    VIEW_OUTPUTS,
    parse_token_ids,
    probability_markdown,
    read_settings,
    render,
    text_html,
)
from playground.ui.step_tab import StepHandlers
from playground.workspace import Workspaces

DOCS_TRACES = Path(__file__).resolve().parents[1] / "docs" / "traces"

PROMPT = "The capital of France is"
ORDER = list(DEFAULT_ORDER)
SETTINGS = (1.0, 0, 1.0, 0.0, 1.0, 1.0, ORDER)  # temperature, top-k, top-p, min-p, typical-p, rep, order
TAB = SimpleNamespace(session_hash="one-browser-tab")  # what gr.Request gives a handler


def ledger_tokens(view: dict) -> list[str]:
    return [row[1] for row in view["ledger"]["data"]]


API_OUTPUTS = [name for name in VIEW_OUTPUTS if name not in CANDIDATE_BUTTONS]  # buttons are UI only


def api_ledger(outputs: tuple) -> list[list]:
    """The ledger rows from an API result (the view outputs without the buttons)."""
    return outputs[API_OUTPUTS.index("ledger")]["data"]


@pytest.fixture
def handlers(embedded_lm) -> StepHandlers:
    return StepHandlers(embedded_lm, Workspaces(embedded_lm))


def test_a_preset_opened_before_the_page_load_ran_stays(handlers) -> None:
    """The page load starts the default prompt, unless the page already opened a session (a preset
    clicked before the load's turn in the queue): that one stays, prompt box and all."""
    first = handlers.step_from_link(PROMPT, False, TAB)
    assert first["text"].count("capital of France") == 1
    chain = handlers.step_preset("chain_rule", TAB)
    shown = handlers.step_from_link(PROMPT, False, TAB)  # a load that ran after the preset
    assert shown["ledger"] == chain["ledger"] and "capital of France" not in shown["text"]
    assert len(shown["ledger"]["data"]) > 0


def test_handlers_pick_undo_force_sample(handlers, embedded_lm) -> None:
    view = handlers.step_start(PROMPT, False, TAB)
    top = StepSession(embedded_lm, PROMPT).candidates(len(CANDIDATE_BUTTONS))
    assert view["cand_1"]["value"].startswith(f"[1] {top[0].piece.visible} ")
    assert [view[name]["visible"] for name in CANDIDATE_BUTTONS] == [True] * len(CANDIDATE_BUTTONS)
    view = handlers.step_pick_rank(2, TAB)
    assert ledger_tokens(view) == [top[1].piece.visible]
    view = handlers.step_force(" Lyon", TAB)
    assert "Lyon" in view["text"] and len(ledger_tokens(view)) == 2
    view = handlers.step_undo(TAB)
    assert ledger_tokens(view) == [top[1].piece.visible]
    first = handlers.step_sample(3, TAB)
    handlers.step_undo(TAB)
    again = handlers.step_sample(3, TAB)
    assert ledger_tokens(first) == ledger_tokens(again) and len(ledger_tokens(again)) == 2
    view = handlers.step_run(3, 5, TAB, progress=lambda *a, **k: None)
    assert len(ledger_tokens(view)) == 5
    assert "5 generated tokens" in view["status"]


def test_an_empty_raw_prompt_starts_from_the_start_token_and_says_so(handlers) -> None:
    assert (
        "Prompt: 1 token (an empty prompt: the start token only)"
        in handlers.step_start("", False, TAB)["status"]
    )
    assert "Prompt: 5 tokens ·" in handlers.step_start("The capital of France is", False, TAB)["status"]


def test_handlers_refuse_bad_input_without_change(handlers) -> None:
    handlers.step_start(PROMPT, False, TAB)
    before = ledger_tokens(handlers.step_greedy(TAB))
    for call, shown in [
        (lambda: handlers.step_pick(10**9, TAB), "1000000000"),
        (lambda: handlers.step_force("", TAB), "empty"),
        (lambda: handlers.step_settings(1.0, 0, 1.5, 0.0, 1.0, 1.0, ORDER, TAB), "1.5"),
        (lambda: handlers.step_run(2.5, 1, TAB), "2.5"),
        (lambda: handlers.step_pick_rank(0, TAB), "got 0"),
        (lambda: handlers.step_undo(SimpleNamespace(session_hash="another-tab")), "Start"),
    ]:
        with pytest.raises(PlaygroundError) as info:
            call()
        assert shown in str(info.value)
    assert ledger_tokens(handlers.step_refresh(TAB)) == before
    assert handlers.step_settings(*SETTINGS, SimpleNamespace(session_hash="new")) == {}  # before Start


def test_stage_view_branches_and_open_prefix(handlers, embedded_lm) -> None:
    handlers.step_start(PROMPT, False, TAB)
    handlers.step_settings(0.7, 3, 1.0, 0.0, 1.0, 1.0, ORDER, TAB)
    view = handlers.step_view(10, "top_k", TAB)
    stage = view["stage"]
    labels = [(ENGLISH[label.key], value) for label, value in stage["choices"]]  # translated in the browser
    assert labels == [
        ("raw (the model)", "raw"),
        ("temperature", "temperature"),
        ("top-k", "top_k"),
    ]
    assert stage["value"] == "top_k"  # stage names read as words, values stay the engine's names
    colors = view["chart"].to_dict()["data"][1]["marker"]["color"]
    assert colors[3:] == [REMOVED_COLOR] * 7 and REMOVED_COLOR not in colors[:3]
    handlers.step_greedy(TAB)
    handlers.step_greedy(TAB)
    handlers.step_undo(TAB)
    view = handlers.step_force(" Rome", TAB)
    branches = view["branch"]["choices"]
    assert len(branches) == 2 and view["branch"]["value"] == branches[1][1]
    assert view["tree"].count("<li>") == 3  # "Paris" then two branches under it
    assert "'" not in branches[0][0]  # labels read plain, no Python quotes
    view = handlers.step_switch(branches[0][1], TAB)
    assert view["branch"]["value"] == branches[0][1]
    ids = embedded_lm.tokenizer(" Paris.", add_special_tokens=False).input_ids
    opened = handlers.step_open_prefix(PROMPT, False, json.dumps(ids), TAB)
    assert opened["prompt"] == PROMPT and ledger_tokens(opened) == ["␣Paris", "."]
    assert [row[2] for row in opened["ledger"]["data"]] == ["force", "force"]


def test_export_writes_the_settings_in_use_and_import_restores_them(handlers) -> None:
    handlers.step_start(PROMPT, False, TAB)
    tuned = (0.7, 5, 0.9, 0.0, 1.0, 1.0, ORDER)
    handlers.step_settings(*tuned, TAB)  # settings moved after Start
    handlers.step_greedy(TAB)
    path = handlers.step_export(TAB)
    with open(path, encoding="utf-8") as handle:
        exported = json.load(handle)["settings"]
    assert (exported["temperature"], exported["top_k"], exported["top_p"]) == (0.7, 5, 0.9)
    other_tab = SimpleNamespace(session_hash="fresh-tab")  # its widgets still show the defaults
    imported = handlers.step_import(path, other_tab)
    assert [imported[name] for name in SETTINGS_INPUTS] == list(tuned)
    assert handlers.workspaces.get("fresh-tab").step.settings.top_k == 5
    with pytest.raises(PlaygroundError, match="Choose a session"):
        handlers.step_import(None, other_tab)


def test_import_replays_the_bundled_step_trace_and_names_what_it_refuses(handlers, tmp_path) -> None:
    """The Step tab's import takes a recorded step trace too (docs/traces), not only an exported session."""
    trace = json.loads((DOCS_TRACES / "step-capital.json").read_text(encoding="utf-8"))
    recorded = trace["data"]["snapshot"]["records"]
    view = handlers.step_import(str(DOCS_TRACES / "step-capital.json"), SimpleNamespace(session_hash="trace"))
    session = handlers.workspaces.get("trace").step
    assert view["prompt"] == trace["data"]["session"]["prompt"]
    assert [e.token.id for e in session.ledger] == [r["id"] for r in recorded]
    # the numbers are this model's, recomputed: the embedded model recorded them, so they agree
    assert [e.token.logprob for e in session.ledger] == pytest.approx(
        [r["logprob"] for r in recorded], abs=1e-3
    )
    chat_trace, bare = tmp_path / "chat.json", tmp_path / "bare.json"
    chat_trace.write_text((DOCS_TRACES / "chat-capital-greedy.json").read_text(encoding="utf-8"), "utf-8")
    assert view["status"].startswith("Imported step-capital.json · 4 generated tokens")
    # a file it cannot import is named in the status line (and a toast); the session stays
    with pytest.warns(UserWarning, match="recorded chat trace"):  # gr.Warning outside an event
        refused = handlers.step_import(str(chat_trace), SimpleNamespace(session_hash="trace"))
    assert refused == {
        "status": "**Can't import chat.json:** This file is a recorded chat trace: Step by step imports "
        "sessions and step traces (serve any trace with --replay).",
        "import_file": None,  # the box empty again: the next upload is a new one
    }
    assert handlers.workspaces.get("trace").step is session
    bare.write_text(json.dumps({**trace, "data": {"snapshot": trace["data"]["snapshot"]}}), "utf-8")
    with pytest.warns(UserWarning, match="holds no session to replay"):
        refused = handlers.step_import(str(bare), TAB)
    assert refused["status"].startswith("**Can't import bare.json:** This step trace holds no session")


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
    # The text as typed, its spaces shown, in a code span (bold around a leading space showed "**").
    assert answer.startswith("`␣Paris,␣the␣city`: P = ") and "**" not in answer


def test_the_chart_follows_new_sampling_settings_until_a_stage_is_chosen(handlers) -> None:
    handlers.step_start(PROMPT, False, TAB)
    top_k = (1.0, 5, 1.0, 0.0, 1.0, 1.0, ORDER)
    view = handlers.step_settings(*top_k, TAB)  # the list says "removed by sampling": so does the chart
    assert view["stage"]["value"] == "top_k" and view["chart"].to_dict()["data"][1]["name"] == "after top-k"
    assert "removed by sampling" in view["cand_6"]["value"]
    handlers.step_view(10, "raw", TAB)  # a stage chosen by hand stays while the settings do
    assert handlers.step_settings(*top_k, TAB)["stage"]["value"] == "raw"
    view = handlers.step_settings(1.0, 5, 0.5, 0.0, 1.0, 1.0, ORDER, TAB)  # new settings: follow again
    assert view["stage"]["value"] == view["stage"]["choices"][-1][1] == "top_p"


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


def test_a_snapshot_renders_the_same_views_after_a_json_round_trip(embedded_lm) -> None:
    """What a recorded trace replays: the snapshot's plain data draws the same views."""
    session = StepSession(embedded_lm, PROMPT)
    session.force(" Paris, the")
    session.undo()
    session.pick(session.candidates(3)[2].token_id)
    snap = take_snapshot(session)
    again = StepSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    live, replayed = render(session), step_render.render_snapshot(again)
    for name in ("text", "status", "ledger", "tree"):
        assert replayed[name] == live[name], name
    assert replayed["chart"].to_dict() == live["chart"].to_dict()
    assert [c.token_id for c in again.candidates[:3]] == [c.token_id for c in session.candidates(3)]


def test_render_shows_token_cards(embedded_lm) -> None:
    session = StepSession(embedded_lm, PROMPT)
    session.force(" Paris\n")
    views = render(session)
    assert set(views) == set(VIEW_OUTPUTS)
    text = views["text"]
    assert text.count("class='tok'") >= 2 + 5  # two tokens plus the legend's five swatches
    assert "log-prob" in text and "rank" in text and "Paris" in text


# --- the launched app through gradio_client -------------------------------------------------------


def test_tab_through_gradio_client(app_client, embedded_lm, tmp_path) -> None:
    top = StepSession(embedded_lm, PROMPT).candidates(3)
    text_index = API_OUTPUTS.index("text")
    out = app_client.predict(PROMPT, False, api_name="/step_start")
    assert out[0] == PROMPT and "Prompt:" in out[API_OUTPUTS.index("status")]
    out = app_client.predict(1, api_name="/step_pick_rank")
    assert [r[1] for r in api_ledger(out)] == [top[0].piece.visible]
    out = app_client.predict(top[2].token_id, api_name="/step_pick")
    assert [r[1] for r in api_ledger(out)] == [top[0].piece.visible, top[2].piece.visible]
    out = app_client.predict(api_name="/step_undo")
    assert len(api_ledger(out)) == 1
    out = app_client.predict(" is a city", api_name="/step_force")
    assert "city" in out[text_index] and len(api_ledger(out)) == 4
    sampled = app_client.predict("42", api_name="/step_sample")
    app_client.predict(api_name="/step_undo")
    resampled = app_client.predict("42", api_name="/step_sample")
    assert api_ledger(sampled) == api_ledger(resampled) and len(api_ledger(resampled)) == 5
    with pytest.raises(Exception, match="outside the vocabulary"):
        app_client.predict(10**9, api_name="/step_pick")
    answer = app_client.predict(" London", api_name="/step_probability")
    assert "rank" in answer
    path = app_client.predict(api_name="/step_export")
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    assert len(data["nodes"]) == 6 and data["prompt"] == PROMPT
    imported = app_client.predict(handle_file(path), api_name="/step_import")
    assert imported[3].startswith("Imported step-session.json · 5 generated tokens"), imported[3]
    assert list(imported[-len(SETTINGS) :]) == list(SETTINGS)  # the settings widgets show the file's
    replayed, original = api_ledger(imported), api_ledger(resampled)
    assert imported[0] == PROMPT and [r[:3] for r in replayed] == [r[:3] for r in original]
    assert [r[4] for r in replayed] == pytest.approx([r[4] for r in original], abs=1e-3)  # log-probs


def test_two_clients_never_mix(launched_app, embedded_lm) -> None:
    from gradio_client import Client

    prompts = ["Roses are red,", "One, two, three,"]
    results: dict[str, list] = {}

    def play(prompt: str) -> None:
        client = Client(launched_app, verbose=False)
        client.predict(prompt, False, api_name="/step_start")
        for _ in range(3):
            client.predict(api_name="/step_greedy")
            client.predict(2, api_name="/step_pick_rank")
            client.predict(api_name="/step_undo")
        results[prompt] = api_ledger(client.predict(api_name="/step_refresh"))

    threads = [threading.Thread(target=play, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for prompt in prompts:
        alone = StepSession(embedded_lm, prompt)
        alone.greedy(3)
        assert [r[1] for r in results[prompt]] == [e.token.visible for e in alone.ledger]


def test_text_shows_multibyte_characters_whole(tiny_lm) -> None:
    """The coloured text reads exactly as the decoded sequence (no U+FFFD from byte tokens)."""
    session = StepSession(tiny_lm, PROMPT)
    session.force(" 東京 😀 café")
    page = text_html(take_snapshot(session))
    stream = page.split("<div class='token-stream step-text'>", 1)[1]
    no_cards = re.sub(r"<span class='tok-card'>.*?</table></span>", "", stream)
    # a character's byte tokens stand under its glyph: read the glyphs, not the bytes' cells
    no_cells = re.sub(r"<span class='tok-bytes'>(?:<span[^>]*>[^<]*</span>)*</span>", "", no_cards)
    visible = html.unescape(re.sub(r"<[^>]+>", "", no_cells))
    assert visible == PROMPT + " 東京 😀 café" and "\ufffd" not in visible
    assert stream.count("tabindex='0'") == len(session.ledger) and stream.count("class='tok-group'") == 3


def rendered_counts(view: dict) -> tuple[int, int, int, int]:
    """Tokens in the coloured text, the status line, the ledger and the log-prob chart."""
    status = view["status"]
    in_status = 0 if status.startswith("Prompt:") else int(status.split(" generated token")[0])
    chart = view["curve"].data[0].x
    return view["text"].count("tabindex='0'"), in_status, len(view["ledger"]["data"]), len(chart)


def test_concurrent_clicks_render_one_state_each(tiny_lm, monkeypatch) -> None:
    """Two threads pick and undo on ONE session: every result shows a single state."""
    chart = step_render.cumulative_logprob_figure

    def slow_chart(*args: object) -> object:
        time.sleep(0.005)  # widen the render so the other thread's click lands inside it
        return chart(*args)

    monkeypatch.setattr(step_render, "cumulative_logprob_figure", slow_chart)
    handlers = StepHandlers(tiny_lm, Workspaces(tiny_lm))
    handlers.step_start(PROMPT, False, TAB)
    handlers.step_force(" in the north of", TAB)
    results: list[dict] = []
    errors: list[BaseException] = []

    def clicks(token_id: int) -> None:
        try:
            for _ in range(12):
                results.append(handlers.step_pick(token_id, TAB))
                results.append(handlers.step_undo(TAB))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=clicks, args=(t,)) for t in (11, 12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 48
    for view in results:
        counts = rendered_counts(view)
        assert len(set(counts)) == 1, counts


assert gr  # gradio must import for these tests


def test_an_import_says_what_it_read_or_why_it_cannot(app_client, tmp_path) -> None:
    """Through the API: the bundled step trace loads; random bytes are named in the status line and
    the session on screen stays (issue 33, item 4)."""
    loaded = app_client.predict(handle_file(str(DOCS_TRACES / "step-capital.json")), api_name="/step_import")
    assert loaded[0] == "The capital of France is" and len(api_ledger(loaded)) == 4
    assert loaded[3].startswith("Imported step-capital.json · 4 generated tokens · log P = ")
    noise = tmp_path / "noise.json"
    noise.write_bytes(bytes(range(256)) * 3)
    refused = app_client.predict(handle_file(str(noise)), api_name="/step_import")
    assert (
        refused[3]
        == "**Can't import noise.json:** Not a JSON file: Expecting value: line 1 column 1 (char 0)"
    )
    kept = app_client.predict(api_name="/step_refresh")
    assert kept[0] == "The capital of France is" and len(api_ledger(kept)) == 4  # the trace is still there

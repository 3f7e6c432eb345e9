"""Recorded traces: save every tab's run, refuse foreign, corrupt and newer files, and replay
them with no model loaded (the gallery in docs/traces, a launched replay app, a browser)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from playground.engine.sampling import DEFAULT_ORDER
from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.traces import TRACE_VERSION, load_gallery, load_traces, read_trace
from playground.ui.app import launch_local
from playground.ui.beam_tab import BeamHandlers, render_beam_trace
from playground.ui.chat_controls import ChatControls
from playground.ui.chat_tab import ChatHandlers, render_chat_trace
from playground.ui.hood import VIEWS
from playground.ui.replay import check_drawable
from playground.ui.step_render import render, render_step_trace
from playground.ui.step_tab import StepHandlers
from playground.workspace import Workspaces

GALLERY = Path(__file__).resolve().parents[1] / "docs" / "traces"
TAB = SimpleNamespace(session_hash="trace-tab")


def last(stream) -> dict:
    values: dict = {}
    for update in stream:
        values.update(update)
    return values


@pytest.fixture(scope="module")
def recorded(embedded_lm):
    """One run of each tab, saved as traces by the same handlers the app uses."""
    workspaces = Workspaces(embedded_lm)
    chat = ChatHandlers(embedded_lm, load_settings(), workspaces)
    step, beam = StepHandlers(embedded_lm, workspaces), BeamHandlers(embedded_lm, workspaces)
    live_chat = last(
        chat.chat("What is the capital of France?", [], ChatControls("", 0, 50, 1.0, 0.0, 1.0, 24, "1"), TAB)
    )
    step.step_settings(0.7, 0, 1.0, 0.0, 1.0, 1.0, list(DEFAULT_ORDER), TAB)
    step.step_start("The capital of France is", False, TAB)
    step.step_pick_rank(2, TAB)
    live_step = step.step_view(10, "temperature", TAB)
    live_beam = beam.beam_run(
        "Hello there", False, 3, 5, 1.0, "off", 2, True, "png", TAB, progress=lambda *a, **k: None
    )
    paths = {"chat": chat.chat_trace(TAB), "step": step.step_trace(TAB), "beam": beam.beam_trace(TAB)}
    return SimpleNamespace(paths=paths, chat=live_chat, step=live_step, beam=live_beam, workspaces=workspaces)


def test_each_tab_saves_a_trace_that_replays_its_view(recorded):
    traces = {kind: load_traces(path)[0] for kind, path in recorded.paths.items()}
    assert {t.kind for t in traces.values()} == {"chat", "step", "beam"}
    assert all(
        t.model.startswith("SmolLM2-135M-Instruct") and t.engine == "transformers" for t in traces.values()
    )
    chat = render_chat_trace(traces["chat"].data)
    # The same token spans; a replay has no model to fork with, so its cards carry no fork buttons.
    assert chat["token_view"].count("class='tok'") == recorded.chat["token_view"].count("class='tok'") > 10
    assert "tok-alt" not in chat["token_view"] and "tok-alt" in recorded.chat["token_view"]
    assert chat["status"] == recorded.chat["status"] and "Paris" in chat["history"][-1]["content"]
    step = render_step_trace(traces["step"].data)
    session = recorded.workspaces.get(TAB.session_hash).step
    live = render(session, 10, "temperature")
    assert step["text"] == live["text"] and step["ledger"] == live["ledger"]
    assert step["stage"]["value"] == "temperature"  # the view on screen was recorded too
    beam = render_beam_trace(traces["beam"].data)
    assert beam["status"] == recorded.beam["status"] and beam["table"] == recorded.beam["table"]


def test_foreign_corrupt_and_newer_traces_are_refused_with_a_reason(recorded, tmp_path):
    good = json.loads(Path(recorded.paths["chat"]).read_text(encoding="utf-8"))
    cases = [
        ("{not json", "not valid JSON"),
        (json.dumps({"hello": "world"}), "not a playground trace"),
        (json.dumps({**good, "version": TRACE_VERSION + 1}), "recorded by a newer version"),
        (json.dumps({**good, "version": "one"}), "corrupt trace"),
        (json.dumps({k: v for k, v in good.items() if k != "data"}), "missing data"),
        (json.dumps({**good, "kind": "poem"}), "kind 'poem'"),
    ]
    for text, message in cases:
        with pytest.raises(PlaygroundError, match=message):
            read_trace(text, "the file")
    (tmp_path / "bad.json").write_text(json.dumps({**good, "version": 99}), encoding="utf-8")
    with pytest.raises(PlaygroundError, match=r"bad\.json was recorded by a newer version"):
        load_traces(tmp_path)
    with pytest.raises(PlaygroundError, match="No file or folder"):
        load_traces(tmp_path / "missing")
    from playground.traces import Trace
    from playground.ui.replay import ReplayHandlers

    broken = Trace("chat", "broken", "m", "e", "now", {"update": {"tokens": []}})  # right shape, wrong data
    with pytest.raises(PlaygroundError, match="The chat trace 'broken' is corrupt"):
        ReplayHandlers([broken]).replay_chat(0)


def test_the_bundled_gallery_loads_and_covers_every_tab():
    traces = load_traces(GALLERY)
    assert {t.kind for t in traces} == {"chat", "step", "beam", "hood"}
    hood_views = {t.data["view"] for t in traces if t.kind == "hood"}
    assert hood_views == {view.key for view in VIEWS}  # one run of each registered lesson
    assert all(t.version == TRACE_VERSION for t in traces)


def test_replay_serves_the_gallery_without_loading_a_model(monkeypatch):
    import app as playground_app
    from playground.engine import loading

    def no_model(*args, **kwargs):
        raise AssertionError("replay must not load a model")

    monkeypatch.setattr(loading, "load_model", no_model)
    started = time.perf_counter()
    demo = playground_app.create_demo(playground_app.parse_args(["--replay", str(GALLERY)]))
    built = time.perf_counter() - started
    url = launch_local(demo)
    try:
        from gradio_client import Client

        client = Client(url, verbose=False)
        assert client.view_api(return_format="dict", print_info=False) is not None
    finally:
        demo.close()
    assert built < 30  # no model: seconds, not the model's load time


def test_replay_skips_a_corrupt_file_of_a_folder_and_says_which(monkeypatch, tmp_path, capsys):
    """One bad file no longer refuses the whole gallery: it is skipped, named in the console and in
    the replay header; a folder with nothing good, or a single bad file, is still refused."""
    import app as playground_app
    from playground.engine import loading
    from playground.ui.replay import header_markdown

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("replay must not load a model"))
    for file in GALLERY.glob("*.json"):
        (tmp_path / file.name).write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "broken.json").write_text("{half a trace", encoding="utf-8")
    undrawable = json.loads((GALLERY / "chat-capital-greedy.json").read_text(encoding="utf-8"))
    (tmp_path / "undrawable.json").write_text(json.dumps({**undrawable, "data": {"update": {}}}), "utf-8")
    traces, skipped = load_gallery(tmp_path, check=check_drawable)
    assert len(traces) == len(load_traces(GALLERY)) and len(skipped) == 2
    assert "broken.json is not a trace: not valid JSON" in skipped[0]
    assert "undrawable.json: The chat trace" in skipped[1] and "is corrupt" in skipped[1]
    header = header_markdown(traces, skipped)
    assert header.count("⚠️ Skipped ") == 2 and "broken.json" in header and "undrawable.json" in header
    playground_app.create_demo(playground_app.parse_args(["--replay", str(tmp_path)]))
    console = capsys.readouterr().err
    assert "replay: skipped " in console and "broken.json" in console and "undrawable.json" in console
    with pytest.raises(PlaygroundError, match=r"broken\.json is not a trace"):
        load_gallery(tmp_path / "broken.json")  # one file: what you asked for, refused
    for file in tmp_path.glob("*-*.json"):
        file.unlink()
    with pytest.raises(PlaygroundError, match=r"has no trace to replay: .*broken\.json.*undrawable\.json"):
        load_gallery(tmp_path, check=check_drawable)


@pytest.mark.browser
def test_replay_in_a_browser_marks_every_view_recorded(replay_app):
    from browser import browser_page, chromium_path

    if chromium_path() is None:
        pytest.skip("Debian chromium not installed (scripts/install_browser.sh)")
    with browser_page(replay_app, 1280, 720) as page:
        page.wait_for_function("document.querySelector('#chat-tokens .answer-tokens')")
        assert "recorded" in page.locator("#header").inner_text()
        assert "Paris" in page.locator("#chat-tokens").inner_text()
        page.get_by_role("tab", name="Step by step").click()
        page.wait_for_function("document.querySelector('#step-text .step-text .tok')")
        page.get_by_role("tab", name="Beam search").click()
        page.wait_for_function("document.querySelector('#beam-plot .js-plotly-plot')")
        page.get_by_role("tab", name="Under the hood").click()
        page.wait_for_function("document.querySelector('#replay-hood-plot-0 .js-plotly-plot')")
        assert "Attention and the causal mask" in page.locator("#replay-hood-status").inner_text()
        assert page.locator(".recorded-badge").count() >= 4

"""A crowd in a real headless Chromium: a tab that waits for the model sees its place in the queue
and an estimate in every tab, and a closed tab's queued events never run and its workspace goes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from browser import BROWSER_TESTS, browser_context, new_tab
from conftest import make_tiny_llama
from test_crowd import HEARTBEAT_SECONDS, wait_until

from bench.crowd_sessions import launched
from playground.settings import load_settings
from playground.ui.common import MODEL_QUEUE

pytestmark = BROWSER_TESTS

# Gradio's line while waiting: "queue: <place>/<queue length> | <seconds waited>/<estimate>s"
QUEUE_LINE = re.compile(r"queue: (\d+)/(\d+) \| [\d.]+/([\d.]+)s")
QUEUE_TEXT = """el => {
    const text = el.querySelector('.progress-text');
    if (!text || !text.innerText.startsWith('queue')) return null;
    const box = text.getBoundingClientRect();
    const hit = document.elementFromPoint(box.x + 2, box.y + box.height / 2);
    return {text: text.innerText, shown: box.height > 0 && (hit === text || text.contains(hit))};
}"""


@pytest.fixture(scope="module")
def one_at_a_time(embedded_lm):
    """The app over a tiny random model serving one model event at a time."""
    settings = load_settings(model_concurrency=1, max_workspaces=16)
    with launched(
        make_tiny_llama(embedded_lm.tokenizer), settings, heartbeat_seconds=HEARTBEAT_SECONDS
    ) as app:
        yield app


def started_tab(context, url: str):
    """A tab whose page load has started its step session (the Step tab shown)."""
    page = new_tab(context, url)
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#step-cand-1").wait_for(state="visible")
    return page


def start_a_long_step(page) -> None:
    """A greedy step that holds the model (its lock is held by the test) until the test lets go."""
    page.get_by_role("button", name="Greedy step").click()
    page.wait_for_function("document.querySelector('#step-status .progress-text') !== null")


def queue_line(page, status) -> tuple[int, int, float]:
    """The place, queue length and estimate a waiting tab sees in a status line, which must be
    visible (on top, not clipped) in the shown tab."""
    status.scroll_into_view_if_needed()
    status.locator(".progress-text").filter(has_text="queue:").wait_for()
    seen = status.evaluate(QUEUE_TEXT)
    assert seen is not None and seen["shown"], f"the queue line is not visible: {seen}"
    match = QUEUE_LINE.fullmatch(seen["text"].strip())
    assert match, f"no place and estimate in {seen['text']!r}"
    return int(match[1]), int(match[2]), float(match[3])


def settled(read: Callable[[], int], seconds: float = 1.5) -> int:
    """read()'s value once it has stayed the same for `seconds` (or after 30 s)."""
    value, since = read(), time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.1)
        if (now := read()) != value:
            value, since = now, time.monotonic()
    return value


def model_queue(app: SimpleNamespace) -> int:
    return len(app.demo._queue.event_queue_per_concurrency_id[MODEL_QUEUE].queue)


def test_a_waiting_tab_sees_its_place_and_an_estimate_in_every_tab(one_at_a_time):
    """While another tab holds the model, a second tab's chat, beam search and measured cache wait;
    each tab's status line shows that request's place in the queue and an estimate."""
    app = one_at_a_time
    with browser_context(1280, 720) as context:
        busy, waiting = started_tab(context, app.url), started_tab(context, app.url)
        with app.engine.lock:  # the model is busy: every model event waits
            start_a_long_step(busy)
            waiting.get_by_role("tab", name="Chat").click()
            waiting.get_by_label("Max new tokens").first.fill("8")
            waiting.locator("#chat-message textarea").fill("What is the capital of France?")
            waiting.locator("#chat-send").click()
            chat = queue_line(waiting, waiting.locator("#chat-status"))
            waiting.get_by_role("tab", name="Beam search").click()
            waiting.get_by_role("button", name="Run beam search").click()
            beam = queue_line(waiting, waiting.locator(".queue-status:visible").first)
            waiting.get_by_role("tab", name="KV cache").click()
            waiting.get_by_role("button", name="Build a real cache and compare").click()
            kv = queue_line(waiting, waiting.locator(".queue-status:visible").first)
            assert [chat[0], beam[0], kv[0]] == [1, 2, 3]  # in the order they were asked
            assert kv[1] == model_queue(app) == 3
            assert 0 < chat[2] <= kv[2] and 0 < beam[2] <= kv[2]  # later in the queue, later done
        waiting.get_by_text(re.compile(r"Measured [\d,]+ bytes")).first.wait_for()  # the last one ran
        waiting.get_by_role("tab", name="Chat").click()
        waiting.wait_for_function("document.querySelector('#chat-status').innerText.includes('stopped')")


def test_a_closed_tab_gives_back_its_place_and_its_workspace(one_at_a_time):
    """A tab closed while its chat waits: the chat never runs, and its workspace and KV cache go."""
    app = one_at_a_time
    assert wait_until(lambda: len(app.workspaces) == 0)  # the first test's tabs are gone
    with browser_context(1280, 720) as context:
        busy, leaving = started_tab(context, app.url), started_tab(context, app.url)
        assert len(app.workspaces) == 2 and len(app.engine.kv_store.keys()) == 2
        with app.engine.lock:
            start_a_long_step(busy)  # its cache is checked out while it runs
            leaving.get_by_role("tab", name="Chat").click()
            leaving.get_by_label("Max new tokens").first.fill("8")
            leaving.locator("#chat-message textarea").fill("Hi")
            leaving.locator("#chat-send").click()
            queue_line(leaving, leaving.locator("#chat-status"))
            late = new_tab(context, app.url)  # its page load (a step start, a shared link) waits too
            # On a slow machine the late tab's page takes a while to load and queue its events.
            assert wait_until(lambda: model_queue(app) >= 2, 60), "the late tab's page load never queued"
            queued = settled(lambda: model_queue(app))
            # The late tab's language and picker events (not queued) may have made its workspace.
            tabs = settled(lambda: len(app.workspaces))
            assert tabs in (2, 3)
            leaving.close()
            assert wait_until(lambda: model_queue(app) == queued - 1), "the closed tab's chat is still queued"
            assert wait_until(lambda: len(app.workspaces) == tabs - 1), "the closed tab kept its workspace"
            # Its step cache goes just after its workspace; the busy tab's is in use.
            assert wait_until(lambda: app.engine.kv_store.keys() == []), app.engine.kv_store.keys()
        late.get_by_role("tab", name="Step by step").click()
        late.locator("#step-cand-1").wait_for(state="visible")
        busy.wait_for_function("document.querySelector('#step-status .progress-text') === null")
        assert len(app.workspaces) == 2  # the busy and the late tab: the closed tab's chat never ran
        stored = app.engine.kv_store.keys()
        assert [key.split(":")[0] for key in stored] == ["step", "step"]
    assert wait_until(lambda: len(app.workspaces) == 0 and len(app.demo.state_holder.session_data) == 0)
    assert wait_until(lambda: app.engine.kv_store.keys() == []), app.engine.kv_store.keys()

"""The UI in a real headless Chromium: what a person sees and clicks."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from browser import BROWSER_TESTS, browser_page
from playwright.sync_api import Error as PlaywrightError

pytestmark = BROWSER_TESTS


SCREENSHOTS = Path(tempfile.gettempdir()) / "playground-browser-failures"


@pytest.fixture(scope="module")
def shared_page(launched_app):
    with browser_page(launched_app) as page:
        yield page


@pytest.fixture
def page(shared_page, request):
    """The module's page; a failing test leaves a screenshot (its path is printed)."""
    yield shared_page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}.png"
        shared_page.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the failure: {path}")


def test_header_states_model_device_and_dtype(page):
    header = page.locator("#header").inner_text()
    assert "SmolLM2-135M-Instruct" in header and "device cpu" in header and "dtype float32" in header
    assert "M parameters" in header and "loaded in" in header


def test_chat_streams_an_answer_with_hover_cards(page):
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-message textarea").fill("What is the capital of France?")
    page.get_by_label("Temperature").first.fill("0")
    page.locator("#chat-send").click()
    page.wait_for_function("document.querySelector('.chat-stats')?.innerText.includes('stopped')")
    assert "Paris" in page.locator(".token-stream").first.inner_text()
    token = page.locator(".token-stream .tok").nth(1)
    card = token.locator(".tok-card")
    assert not card.is_visible()
    token.hover()
    assert card.is_visible() and "log-prob" in card.inner_text() and "#5" in card.inner_text()
    stats = page.locator(".chat-stats").first.inner_text()
    assert "prefill (time to first token)" in stats and "tok/s" in stats


def test_chat_empty_message_shows_an_error_not_a_trace(page):
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-message textarea").fill("")
    page.locator("#chat-send").click()
    toast = page.get_by_text("Empty message: type something to send.")
    toast.first.wait_for()
    assert "Traceback" not in page.content()


def test_step_tab_opens_started_and_number_keys_pick_candidates(page):
    page.get_by_role("tab", name="Step by step").click()
    first = page.locator("#step-cand-1")
    first.wait_for(state="visible")
    label = first.inner_text()  # "[1] ␣Paris   77.3% · ..."
    tokens = "#step-text .step-text .tok"
    before = page.locator(tokens).count()
    page.locator("body").click(position={"x": 5, "y": 5})  # focus outside any text box
    page.keyboard.press("1")
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length === n + 1", arg=[tokens, before]
    )
    picked = page.locator(tokens).last.locator(".tok-card").inner_text()
    assert label.split()[1] in picked  # the card names the token the button showed


def test_kv_tab_shows_bytes_in_gib_and_gb(page):
    page.get_by_role("tab", name="KV cache").click()
    summary = page.locator("#kv-summary")
    summary.wait_for()
    text = summary.inner_text()  # the result itself, not the tab's intro
    assert re.search(r"KV cache: [\d,]+ bytes = [\d,.]+ GiB \(2\^30 B\) = [\d,.]+ GB \(10\^9 B\)", text), text


def test_chat_fork_picks_an_alternative_and_switches_back(page):
    page.get_by_role("tab", name="Chat").click()
    send_greedy(page, "What is the capital of France?")
    original = page.locator("#chat-tokens .answer-tokens").inner_text()
    token = page.locator("#chat-tokens .answer-tokens > .tok").nth(3)
    token.click()  # pins its card: the alternatives are buttons
    alternative = token.locator(".tok-alt").nth(1)
    chosen = alternative.inner_text().split()[1].replace("␣", " ")
    alternative.click()
    page.wait_for_function(  # the fork's own statistics: it starts with given tokens
        "document.querySelector('#chat-status')?.innerText.includes('given tokens first · stopped')"
    )
    forked = page.locator("#chat-tokens .answer-tokens").inner_text()
    assert chosen.strip() in forked and forked != original
    assert page.locator("#chat-tokens .tok-given").count() == 4  # the kept three and the chosen one
    page.locator("#chat-branch input").click()
    page.get_by_role("option").first.click()  # the original answer
    page.wait_for_function(  # its tokens and statistics are back, nothing given
        "() => document.querySelector('#chat-tokens .answer-tokens')"
        " && !document.querySelector('#chat-tokens .tok-given')"
        " && !document.querySelector('#chat-status').innerText.includes('given')"
    )
    assert page.locator("#chat-tokens .answer-tokens").inner_text() == original


def test_a_chat_token_opens_in_step_by_step_and_continues_as_chat(page):
    page.get_by_role("tab", name="Chat").click()
    send_greedy(page, "Name a colour.")
    token = page.locator("#chat-tokens .answer-tokens > .tok").nth(1)
    token.click()  # pins its card
    token.locator(".tok-open").click()
    page.wait_for_function(
        "() => document.querySelector('[role=tab][aria-selected=true]')?.innerText.includes('Step by step')"
    )
    page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 2")
    page.locator("#step-cand-2").click()  # a different third token
    page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 3")
    page.locator("#step-continue-chat").click()
    page.wait_for_function(
        "() => document.querySelector('[role=tab][aria-selected=true]')?.innerText.includes('Chat')"
    )
    page.wait_for_function(  # the answer starts with the step path's three tokens, marked given
        "document.querySelectorAll('#chat-tokens .tok-given').length === 3"
        " && document.querySelector('#chat-status')?.innerText.includes('3 given tokens first · stopped')"
    )


def send_greedy(page, message: str) -> None:
    """Send a message at temperature 0 and wait for this answer's own statistics."""
    before = page.locator("#chat-status").inner_text()
    page.locator("#chat-message textarea").fill(message)
    page.get_by_label("Temperature").first.fill("0")
    page.locator("#chat-send").click()
    page.wait_for_function(
        "old => { const s = document.querySelector('#chat-status')?.innerText || '';"
        " return s !== old && s.includes('stopped'); }",
        arg=before,
    )
    wait_until_stable(page, "#chat-tokens")  # the same update's token view paints after the status


def wait_until_stable(page, selector: str, interval_ms: int = 300) -> str:
    """The element's text once two readings `interval_ms` apart agree."""
    text = page.locator(selector).inner_text()
    while True:
        page.wait_for_timeout(interval_ms)
        again = page.locator(selector).inner_text()
        if again == text:
            return text
        text = again


def settled_box(page, plot: str, trace_name: str) -> dict:
    """The on-screen box of the first point of a trace, scrolled into view, once the plot has
    stopped redrawing (a late relayout replaces the point elements: then look again)."""
    for _ in range(5):
        names = page.evaluate(f"document.querySelector('{plot} .js-plotly-plot').data.map(t => t.name)")
        trace = page.locator(f"{plot} .scatterlayer .trace").nth(names.index(trace_name))
        point = trace.locator(".points path").first
        try:
            point.scroll_into_view_if_needed(timeout=5000)
            page.wait_for_timeout(300)
            box = point.bounding_box(timeout=5000)
            if box is not None and box == point.bounding_box(timeout=5000):
                return box
        except PlaywrightError:
            pass  # redrawn under us
    raise AssertionError(f"the {trace_name!r} points of {plot} kept moving")


def test_beam_search_node_click_chooses_a_prefix_that_opens_in_step_by_step(page):
    page.get_by_role("tab", name="Beam search").click()
    page.get_by_label("Pruned candidates drawn per node").first.fill("1")  # else they fold into "+N"
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Run beam search").click()
    page.wait_for_function(  # static/plotclick.js flags a wired chart with data-click<N>
        "Object.keys(document.querySelector('#beam-plot .js-plotly-plot')?.dataset || {})"
        ".some(k => k.startsWith('click'))"
    )
    prefix = page.get_by_label("Prefix (prompt + tokens up to the node)")
    page.wait_for_function("() => [...document.querySelectorAll('textarea')].some(t => t.value.length > 40)")
    best = prefix.input_value()  # the best hypothesis is chosen after a search
    assert best.startswith("The best thing about beam search is")

    box = settled_box(page, "#beam-plot", "pruned")  # a pruned node is never on the best path
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "best => [...document.querySelectorAll('textarea')].some(t => t.value !== best"
        " && t.value.length > 35 && t.value.startsWith('The best thing about beam search is'))",
        arg=best,
    )
    chosen = prefix.input_value()
    assert chosen != best and chosen.startswith("The best thing about beam search is")

    page.get_by_role("button", name="Open in Step by step").click()
    page.wait_for_function(
        "text => document.querySelector('#step-text')?.innerText.replace(/\\s+/g, '')"
        ".includes(text.replace(/\\s+/g, '').slice(-12))",
        arg=chosen,
    )
    page.wait_for_function(  # the tab switch runs right after the prefix opens
        "() => document.querySelector('[role=tab][aria-selected=true]')?.innerText.includes('Step by step')"
    )
    # Its charts arrived while the tab was hidden (this page has shown it before): drawn again for their
    # boxes once the tab shows, not at plotly's default 700 px.
    page.wait_for_function(
        "() => { const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent);"
        " return plots.length >= 2 && plots.every(g => Math.abs(g._fullLayout.width"
        " - g.getBoundingClientRect().width) <= 2); }",
        timeout=10_000,
    )


def test_after_an_error_the_status_line_says_it_not_an_older_line(page):
    """A Send refused (seed 'abc'): the toast names it, and so does the status line, which said
    something else before (the last answer's statistics, or 'Stopped before the first token')."""
    page.get_by_role("tab", name="Chat").click()
    status = page.locator("#chat-status")
    before = status.inner_text()
    seed = page.locator("#chat-seed textarea")
    seed.fill("abc")
    page.locator("#chat-message textarea").fill("What is the capital of Italy?")
    page.locator("#chat-send").click()
    page.wait_for_function(
        "() => document.querySelector('#chat-status').innerText.includes('seed must be a whole number')"
    )
    assert status.inner_text().strip() != before.strip() and "Stopped" not in status.inner_text()
    assert page.locator("#chat-message textarea").input_value() == "What is the capital of Italy?"
    seed.fill("0")


def test_a_refused_import_file_leaves_its_box_and_the_next_upload_imports(page, tmp_path):
    """A file that is not a session is refused (a toast and the status line say why) and leaves the
    import box empty, so the next file uploads at once: the gallery's step trace imports."""
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#step-cand-1").wait_for(state="visible")
    page.get_by_role("button", name="Start").click()  # a path of no tokens: the imported one has 4
    page.wait_for_function("() => document.querySelectorAll('#step-text .step-text .tok').length === 0")
    bad = tmp_path / "notes.json"
    bad.write_text('{"not": "a session"}', encoding="utf-8")
    page.locator("#step-import input[type=file]").set_input_files(str(bad))
    page.locator(".toast-body").filter(has_text="Can't import notes.json").first.wait_for()
    page.wait_for_function(  # the box is empty again, ready for the next file
        "() => document.querySelector('#step-import').innerText.includes('Drop File Here')"
        " && !document.querySelector('#step-import').innerText.includes('notes.json')"
    )
    trace = Path(__file__).resolve().parents[1] / "docs" / "traces" / "step-capital.json"
    page.locator("#step-import input[type=file]").set_input_files(str(trace))
    page.wait_for_function("() => document.querySelectorAll('#step-text .step-text .tok').length === 4")

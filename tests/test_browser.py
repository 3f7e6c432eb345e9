"""The UI in a real headless Chromium: what a person sees and clicks."""

from __future__ import annotations

import pytest
from browser import browser_page, chromium_path

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        chromium_path() is None, reason="Debian chromium not installed (scripts/install_browser.sh)"
    ),
]


@pytest.fixture(scope="module")
def page(launched_app):
    with browser_page(launched_app) as page:
        yield page


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
    label = first.inner_text()
    assert "Paris" not in page.locator("#step-text").inner_text()
    page.locator("body").click(position={"x": 5, "y": 5})  # focus outside any text box
    page.keyboard.press("1")
    piece = label.split()[1].replace("␣", "") if len(label.split()) > 1 else label
    page.wait_for_function(
        "piece => document.querySelector('#step-text').innerText.includes(piece)", arg=piece
    )


def test_kv_tab_shows_bytes_in_gib_and_gb(page):
    page.get_by_role("tab", name="KV cache").click()
    page.get_by_text("KV cache:", exact=False).first.wait_for()
    body = page.locator("body").inner_text()
    assert "bytes" in body and "GiB" in body and "GB" in body


def test_beam_search_node_click_chooses_a_prefix_that_opens_in_step_by_step(page):
    page.get_by_role("tab", name="Beam search").click()
    page.get_by_role("button", name="Run beam search").click()
    page.wait_for_function("document.querySelector('#beam-plot .js-plotly-plot')?.dataset.clickWired")
    prefix = page.get_by_label("Prefix (prompt + tokens up to the node)")
    page.wait_for_function("() => [...document.querySelectorAll('textarea')].some(t => t.value.length > 40)")
    best = prefix.input_value()  # the best hypothesis is chosen after a search
    assert best.startswith("The best thing about beam search is")

    names = page.evaluate("document.querySelector('#beam-plot .js-plotly-plot').data.map(t => t.name)")
    pruned = page.locator("#beam-plot .scatterlayer .trace").nth(names.index("pruned"))
    node = pruned.locator(".points path").first  # a pruned node is never on the best path
    node.scroll_into_view_if_needed()
    box = node.bounding_box()
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

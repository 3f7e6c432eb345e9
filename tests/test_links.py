"""Shared links that can't be opened: each gives a toast naming the bad value and what is allowed,
the server logs no traceback, and the page opens as usual (Step started). Pure reading first,
then headless Chromium on the launched app."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

import pytest
from browser import chromium_browser, chromium_path, open_page

from playground.ui.links import read_query

STEP, BEAM = "Step by step", "Beam search"
BAD_LINKS = [
    # (query, what the toast must say, the tab that opens)
    ({"tab": "nonsense"}, ["tab='nonsense'", "use one of chat, step, beam, kv, hood"], "Chat"),
    ({"tab": "step", "path": "abc"}, ["path='abc'", "token ids: whole numbers"], STEP),
    ({"tab": "step", "t": "abc", "path": "7042"}, ["t='abc'", "temperature must be a number"], STEP),
    ({"tab": "beam", "beams": "100"}, ["beams='100'", "a whole number from 1 to 16"], BEAM),
    ({"tab": "step", "t": "-1"}, ["t='-1'", "temperature must be >= 0"], STEP),
    ({"tab": "kv", "gpu": "lots"}, ["gpu='lots'", "GPU memory must be a positive size in GB"], "KV cache"),
    ({"tab": "step", "tt": "0"}, ["tt='0' is not a setting of this tab", "it takes prompt, chat, t,"], STEP),
]


@pytest.mark.parametrize(("query", "said", "tab"), BAD_LINKS)
def test_a_bad_link_is_read_as_no_link_and_names_its_bad_value(query, said, tab):
    reading = read_query(query)
    assert reading.link is None
    for part in said:
        assert part in reading.problem
    assert reading.tab == (None if tab == "Chat" else query["tab"])


def test_a_good_link_is_read_whole_with_foreign_parameters_left_alone():
    reading = read_query({"tab": "kv", "gpu": "12.5 GB", "seq": "8192", "__theme": "dark", "presenter": "1"})
    assert reading.problem == "" and reading.link.values == {"gpu_gb": 12.5, "seq_len": 8192}
    assert read_query({}).link is None and read_query({}).problem == ""


# --- the browser ------------------------------------------------------------------------------------------

pytest_browser = pytest.mark.skipif(
    chromium_path() is None, reason="Debian chromium not installed (scripts/install_browser.sh)"
)
SELECTED_TAB = "() => document.querySelector('[role=tab][aria-selected=true]')?.innerText.trim()"


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def assert_no_traceback(capfd, caplog) -> None:
    out, err = capfd.readouterr()
    for text in (out, err):
        assert "Traceback" not in text and "PlaygroundError" not in text, text[-2000:]
    for record in caplog.records:
        assert record.exc_info is None and "Traceback" not in record.getMessage(), record.getMessage()


def step_started(page) -> None:
    """The Step tab holds its default session, as on a page opened without a link."""
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#step-cand-1").wait_for(state="visible")
    page.wait_for_function("document.querySelector('#step-status')?.innerText.startsWith('Prompt:')")
    assert "The capital of France is" in page.locator("#step-text").inner_text()


LIVE_BAD_LINKS = [*BAD_LINKS[:4], ({"tab": "step", "path": "7042,999999"}, ["999999"], STEP)]


@pytest_browser
@pytest.mark.browser
@pytest.mark.parametrize(("query", "said", "tab"), LIVE_BAD_LINKS)
def test_a_bad_link_toasts_logs_no_traceback_and_the_page_opens_as_usual(
    browser, launched_app, capfd, caplog, query, said, tab
):
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    with open_page(browser, f"{launched_app}/?{urlencode(query)}") as page:
        toast = page.locator(".toast-body").filter(has_text=said[0])
        toast.first.wait_for()
        text = toast.first.inner_text()
        assert all(part in text for part in said), text
        assert "opened with its defaults instead" in text
        assert page.evaluate(SELECTED_TAB) == tab
        step_started(page)
    assert_no_traceback(capfd, caplog)


@pytest_browser
@pytest.mark.browser
def test_a_beam_link_without_a_prompt_sets_the_controls_and_runs_nothing(browser, launched_app):
    with open_page(browser, f"{launched_app}/?tab=beam&beams=8&steps=5") as page:
        page.wait_for_function(f"({SELECTED_TAB})() === 'Beam search'")
        beams, steps = page.get_by_label("Beams").first, page.get_by_label("Steps").first
        page.wait_for_function("el => el.value === '8'", arg=beams.element_handle())
        assert steps.input_value() == "5"
        step_started(page)
        page.get_by_role("tab", name="Beam search").click()
        assert page.locator("#beam-status").inner_text().strip() == ""  # no search ran

"""Shared links that can't be opened: each gives a toast naming the bad value and what is allowed,
the server logs no traceback, and the page opens as usual (Step started); a link to one lesson with
its inputs. Pure reading first, then headless Chromium on the launched app."""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

import gradio as gr
import pytest
from browser import chromium_browser, needs_chromium, open_page

from playground.ui.hood import VIEWS, build_hood_tab
from playground.ui.hood.tab import link_params
from playground.ui.links import link_rules, make_query, read_query
from playground.ui.state import TabStates
from playground.workspace import Workspaces

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


# Each setting a link fills, one value outside its control's range (the engine takes some of them,
# e.g. temperature 99, but the control can't show them): refused when the page opens.
OUT_OF_RANGE = [
    ("chat", "t", "99", "temperature must be a number from 0 to 2"),
    ("chat", "k", "500", "top-k must be a whole number from 0 to 200"),
    ("chat", "p", "0.005", "top-p must be a number from 0.01 to 1"),
    ("chat", "rep", "5", "repetition penalty must be a number from 0.5 to 2"),
    ("chat", "max", "5000", "max new tokens must be a whole number from 1 to 1024"),
    ("chat", "seed", "-1", "seed must be a whole number of at least 0"),
    ("step", "t", "99", "temperature must be a number from 0 to 2"),
    ("step", "k", "500", "top-k must be a whole number from 0 to 200"),
    ("step", "p", "0.005", "top-p must be a number from 0.01 to 1"),
    ("step", "typ", "0.005", "typical-p must be a number from 0.01 to 1"),
    ("step", "rep", "5", "repetition penalty must be a number from 0.5 to 2"),
    ("step", "seed", "-1", "seed must be a whole number of at least 0"),
    ("step", "cands", "41", "candidates in the chart must be a whole number from 5 to 40"),
    ("beam", "beams", "17", "beams must be a whole number from 1 to 16"),
    ("beam", "steps", "0", "steps must be a whole number from 1 to"),
    ("beam", "lp", "4", "length penalty must be a number from -2 to 3"),
    ("compare", "ta", "99", "temperature a must be a number from 0 to 2"),
    ("compare", "tb", "-1", "temperature b must be a number from 0 to 2"),
    ("compare", "max", "5000", "max new tokens must be a whole number from 1 to 1024"),
    ("compare", "a", "", "model A must be a model's name, e.g. smollm2-135m-instruct"),
    ("compare", "b", " ", "model B must be a model's name"),
]


@pytest.mark.parametrize(("tab", "key", "value", "why"), OUT_OF_RANGE)
def test_a_link_value_outside_its_controls_range_is_refused_when_the_page_opens(tab, key, value, why):
    """Not put on the control as typed and used (the Step tab ran at temperature 99), nor brought into
    range later ("used 2"), nor refused on Send: refused when the page opens, every tab alike."""
    reading = read_query({"tab": tab, "prompt" if tab in ("step", "beam") else "q": "hi", key: value})
    assert reading.link is None and reading.tab == tab
    assert f"{key}={value!r} is not allowed: {why}" in reading.problem, reading.problem


def test_values_at_the_ends_of_a_controls_range_are_taken():
    step = {"tab": "step", "t": "2", "k": "200", "p": "0.01", "minp": "1", "typ": "1", "rep": "0.5"}
    assert read_query(step).link.values == {
        "temperature": 2.0,
        "top_k": 200,
        "top_p": 0.01,
        "min_p": 1.0,
        "typical_p": 1.0,
        "repetition_penalty": 0.5,
    }
    assert read_query({"tab": "beam", "lp": "-2"}).link.values == {"length_penalty": -2.0}
    compare = read_query({"tab": "compare", "a": "gemma-3-270m", "ta": "2", "sb": "-3"}).link.values
    assert compare == {"model_a": "gemma-3-270m", "temperature_a": 2.0, "seed_b": "-3"}


def test_a_chat_link_takes_the_apps_own_max_new_tokens_limit():
    assert read_query({"tab": "chat", "max": "300"}).link.values == {"max_new_tokens": 300}
    refused = read_query({"tab": "chat", "max": "300"}, rules=link_rules(max_new_tokens_limit=256))
    assert "max new tokens must be a whole number from 1 to 256" in refused.problem
    refused = read_query({"tab": "compare", "max": "300"}, rules=link_rules(max_new_tokens_limit=256))
    assert "max new tokens must be a whole number from 1 to 256" in refused.problem


@pytest.fixture(scope="module")
def hood_rules(tiny_lm):
    """The link rules of an app with every lesson (their inputs as the built widgets take them)."""
    with gr.Blocks():
        widgets, _ = build_hood_tab(tiny_lm, Workspaces(tiny_lm), TabStates(), VIEWS)
    return link_rules(1024, link_params(VIEWS, widgets))


def test_a_link_to_a_lesson_carries_its_inputs_and_a_bad_one_is_named(hood_rules):
    query = {"tab": "hood", "view": "quant", "formats": "hqq4,kv-fp8", "tokens": "4", "text": "A b."}
    link = read_query(query, rules=hood_rules).link
    assert link.values == {
        "view": "quant",
        "quant_formats": ["hqq4", "kv-fp8"],
        "quant_tokens": 4,
        "quant_text": "A b.",
    }
    again = make_query("hood", link.values, rules=hood_rules)
    assert read_query(dict(parse_qsl(again)), rules=hood_rules).link == link  # Copy link's query reads back
    for bad, said in [
        ({"view": "nonsense"}, "view='nonsense' is not a lesson: use one of tok, tf, order, attn, lens"),
        (
            {"view": "quant", "tokens": "999"},
            "tokens='999' is not allowed: tokens must be a whole number from 1 to 64",
        ),
        (
            {"view": "quant", "formats": "hqq9"},
            "formats='hqq9' is not allowed: formats must be names from hqq8",
        ),
        (
            {"view": "attn", "foo": "1"},
            "foo='1' is not a setting of this lesson (it takes view, text, layer, head)",
        ),
    ]:
        reading = read_query({"tab": "hood", **bad}, rules=hood_rules)
        assert reading.link is None and reading.tab == "hood" and said in reading.problem, reading.problem
    assert "candidates" not in {p.key for p in hood_rules.of("hood", "lens")}  # filled by a run: not linkable


# --- the browser ------------------------------------------------------------------------------------------

pytest_browser = needs_chromium
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
    page.locator("#tab-step-button").click()  # (Compare has a view of that name too)
    page.locator("#step-cand-1").wait_for(state="visible")
    page.wait_for_function("document.querySelector('#step-status')?.innerText.startsWith('Prompt:')")
    assert "The capital of France is" in page.locator("#step-text").inner_text()


LIVE_BAD_LINKS = [
    *BAD_LINKS[:4],
    ({"tab": "step", "path": "7042,999999"}, ["999999"], STEP),
    (
        {"tab": "step", "t": "99", "prompt": "hi"},
        ["t='99' is not allowed: temperature must be a number from 0 to 2"],
        STEP,
    ),
    (  # both sides blanked: it ran, and said "Side A has no model: pick one." with an Error mark
        {"tab": "compare", "view": "chat", "a": "", "b": "", "text": ""},
        ["a='' is not allowed: model A must be a model's name", "b='' is not allowed"],
        "Compare",
    ),
]


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
        if tab == "Compare":  # the default sides kept, nothing ran
            assert page.locator("#compare-model-a input").input_value().startswith("smollm2-135m-instruct")
            assert page.locator("#compare-model-b input").input_value().startswith("gemma-3-270m")
            assert page.locator("#compare-parting").inner_text().strip() == ""
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


# Whether the lesson sub-tab called label is the one shown.
LESSON_SHOWN = """label => [...document.querySelectorAll('#hood-views .hood-lessons [role=tab]')]
  .some((t) => t.offsetParent && t.ariaSelected === 'true' && t.innerText.trim() === label)"""


@pytest_browser
@pytest.mark.browser
def test_a_link_opens_one_lesson_with_its_inputs_and_copy_link_gives_it(browser, launched_app):
    """?tab=hood&view=attn&text=… opens Attention with that text (nothing runs until Run); Copy link
    on a lesson gives a link to it with its inputs; an unknown lesson is told as a toast."""
    text = "Links open one lesson."
    with open_page(
        browser, f"{launched_app}/?{urlencode({'tab': 'hood', 'view': 'attn', 'text': text})}"
    ) as page:
        page.wait_for_function(LESSON_SHOWN, arg="Attention")
        page.wait_for_function(
            "text => document.querySelector('#hood-attn-text textarea')?.value === text", arg=text
        )
        assert page.locator("#hood-attn-status").inner_text().startswith("Opened from a link")
        page.locator("#hood-attn-text textarea").fill("Edited after opening.")
        page.locator("#copy-link").click()
        page.wait_for_function(
            "() => (document.querySelector('#share-link textarea, #share-link input')?.value || '')"
            ".includes('view=attn')"
        )
        link = page.locator("#share-link textarea, #share-link input").first.input_value()
    query = dict(parse_qsl(link.split("?", 1)[1]))
    assert query["tab"] == "hood" and query["view"] == "attn" and query["text"] == "Edited after opening."
    assert {"layer", "head"} <= set(query)
    with open_page(browser, f"{launched_app}/?tab=hood&view=nonsense") as page:
        toast = page.locator(".toast-body").filter(has_text="view='nonsense' is not a lesson")
        toast.first.wait_for()
        assert "Under the hood opened with its defaults instead" in toast.first.inner_text()
        assert page.evaluate(SELECTED_TAB) == "Under the hood"

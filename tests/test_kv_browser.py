"""The KV tab in headless Chromium: a size typed as the presets read it, one toast per refused
size (a preset chosen after it calculates once), and a shared link to a calculation."""

from __future__ import annotations

import pytest
from browser import BROWSER_TESTS, chromium_browser, open_page

pytestmark = BROWSER_TESTS
GPU = "GPU memory (GB = 10^9 B)"
REFUSED = "GPU memory must be a positive size in GB"


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def summary_has(page, text: str) -> None:
    page.wait_for_function("t => document.querySelector('#kv-summary')?.innerText.includes(t)", arg=text)


def type_gpu(page, text: str) -> None:
    box = page.get_by_label(GPU)
    box.click()
    box.fill(text)
    page.keyboard.press("Enter")


def refusals(page) -> int:
    """How many times the refusal was told (Gradio groups equal toasts into one, '(2)')."""
    return sum(text.count(REFUSED) for text in page.locator(".toast-body").all_inner_texts())


def test_a_typed_size_with_a_unit_or_decimals_is_used(browser, launched_app):
    with open_page(browser, launched_app) as page:
        page.get_by_role("tab", name="KV cache").click()
        type_gpu(page, "12.5 GB")
        summary_has(page, "On a 12.5 GB GPU")
        assert refusals(page) == 0


def test_a_refused_size_is_told_once_also_when_a_preset_is_chosen_after_it(browser, launched_app):
    with open_page(browser, launched_app) as page:
        page.get_by_role("tab", name="KV cache").click()
        type_gpu(page, "lots")
        page.locator(".toast-body").filter(has_text=REFUSED).first.wait_for()
        page.wait_for_timeout(1500)  # a second calculation, if any, has toasted by now
        assert refusals(page) == 1
        page.locator(".toast-body button").first.click()  # close it
        page.wait_for_function("() => document.querySelectorAll('.toast-body').length === 0")
        page.get_by_label("Model", exact=True).click()
        page.get_by_role("option", name="Llama-3.1-8B", exact=True).click()  # its dtype changes too
        page.locator(".toast-body").filter(has_text=REFUSED).first.wait_for()
        page.wait_for_timeout(1500)
        assert refusals(page) == 1


def test_a_link_to_a_calculation_opens_it(browser, launched_app):
    with open_page(browser, f"{launched_app}/?tab=kv&preset=Llama-3.1-8B&seq=200000&gpu=24+GB") as page:
        summary_has(page, "On a 24 GB GPU")
        text = page.locator("#kv-summary").inner_text()
        assert "200,000 tokens × batch 1" in text and "published count of Llama-3.1-8B) in bfloat16" in text
        assert "past this model's own context limit of 131,072" in text


STALE_VIEWS = ("#kv-curves", "#kv-bars", "#kv-formula", "#kv-layers")
STALE_MARKS_JS = """sels => sels.map(s => { const e = getComputedStyle(document.querySelector(s));
  return [e.opacity, e.outlineStyle]; })"""


def test_a_refused_config_keeps_the_last_good_result_marked_stale(browser, launched_app):
    """Issue 33, item 7: the plot and the per-layer table stay (they were wiped), greyed in a dashed
    frame, and the summary says why and that they are stale, until a calculation succeeds."""
    with open_page(browser, launched_app, width=1280, height=720) as page:
        page.get_by_role("tab", name="KV cache").click()
        summary_has(page, "bytes")
        rows = page.locator("#kv-layers tbody tr").count()
        box = page.get_by_label("Sequence length (tokens)")
        box.fill("-5")
        box.press("Enter")
        summary_has(page, "Sequence length must be a positive whole number, got -5")
        assert "last good calculation, marked stale" in page.locator("#kv-summary").inner_text()
        assert page.locator(".toast-body").filter(has_text="Sequence length").count() == 1  # one toast
        assert (
            page.locator("#kv-curves .js-plotly-plot").count() == 1
            and page.locator("#kv-bars .js-plotly-plot").count() == 1
        )
        assert page.locator("#kv-layers tbody tr").count() == rows > 0
        marks = page.evaluate(STALE_MARKS_JS, list(STALE_VIEWS))
        assert all(float(opacity) < 0.6 and outline == "dashed" for opacity, outline in marks), marks
        assert box.input_value() == "-5"  # what was typed stays
        box.fill("8192")
        box.press("Enter")
        summary_has(page, "8,192 tokens")
        marks = page.evaluate(STALE_MARKS_JS, list(STALE_VIEWS))
        assert all(float(opacity) == 1 and outline == "none" for opacity, outline in marks), marks

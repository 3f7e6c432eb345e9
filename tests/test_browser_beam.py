"""The beam tree at any size in a real headless Chromium at 1280 x 720: a 16 beams x 64 steps search
run through the UI, with no label clipped or overlapping (measured on the page's own text boxes),
"prompt" whole, the wheel scrolling the page until the plot has focus, and the same in presenter
mode on a dark page. The app runs the tiny random Llama (with the embedded model's tokenizer): the
layout does not depend on which model scored the tokens, and a 16 x 64 search takes seconds, not
the minutes it takes the embedded model on 2 CPU cores (tests/test_browser.py and
tests/test_stage.py cover the embedded model's beam search in the browser)."""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser import BROWSER_TESTS, browser_page
from conftest import make_tiny_llama

from playground.ui.app import launch_local

pytestmark = BROWSER_TESTS

SCREENSHOTS = Path(tempfile.gettempdir()) / "playground-browser-beam"
VIEWPORT = {"width": 1280, "height": 720}
PLOT = "#beam-plot .js-plotly-plot"
# Every text label of the tree, and the plot area, as page rectangles.
LABELS_AND_AREA = """() => {
  const plot = document.querySelector('#beam-plot .js-plotly-plot');
  const area = plot.querySelector('.draglayer .nsewdrag').getBoundingClientRect().toJSON();
  const labels = [...plot.querySelectorAll('.scatterlayer .textpoint text')]
    .filter((t) => t.textContent)
    .map((t) => ({text: t.textContent, ...t.getBoundingClientRect().toJSON()}));
  return {area, labels, figure: plot.getBoundingClientRect().toJSON()};
}"""
# The view the server drew equals the browser's (no redraw pending).
SETTLED = """() => {
  const plot = document.querySelector('#beam-plot .js-plotly-plot');
  const meta = plot?.layout?.meta?.beam_view;
  if (!meta || !plot._fullLayout) return false;
  const range = [...plot._fullLayout.xaxis.range, ...plot._fullLayout.yaxis.range];
  const size = [plot._fullLayout._size.w, plot._fullLayout._size.h];
  const body = document.body.classList;
  return range.every((v, i) => Math.abs(v - meta.window[i]) < 1e-6 * (1 + Math.abs(v)))
    && size.every((v, i) => Math.abs(v - meta.area[i]) <= 1.5)
    && meta.dark === body.contains('dark') && meta.presenter === body.contains('presenter');
}"""
X_RANGE = "() => document.querySelector('#beam-plot .js-plotly-plot')._fullLayout.xaxis.range.slice()"


@pytest.fixture(scope="module")
def tiny_app(embedded_lm):
    """The full app on the tiny random Llama, on a free local port; yields its URL."""
    from playground.settings import load_settings
    from playground.ui.app import build_demo, launch_options

    demo = build_demo(make_tiny_llama(embedded_lm.tokenizer), load_settings())
    url = launch_local(demo, **launch_options())
    yield url
    demo.close()


@contextmanager
def screenshot_on_failure(page, request):
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}-failure.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the failure: {path}")


@pytest.fixture(scope="module")
def shared_page(tiny_app):
    with browser_page(tiny_app, **VIEWPORT) as page:
        yield page


@pytest.fixture
def page(shared_page, request):
    """The module's page at 1280 x 720; a failing test leaves a screenshot (its path is printed)."""
    with screenshot_on_failure(shared_page, request) as page:
        yield page


def settle(page, wait_ms: int = 700) -> None:
    """Wait until the plot shows the view the server drew for it, and stays so."""
    page.wait_for_timeout(wait_ms)
    page.wait_for_function(SETTLED)


def run_search(page, beams: int, steps: int) -> None:
    page.get_by_role("tab", name="Beam search").click()
    page.get_by_label("Beams").first.fill(str(beams))
    page.get_by_label("Steps").first.fill(str(steps))
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Run beam search").click()
    title = f"{beams} beams, {steps} steps"
    page.wait_for_function(
        f"() => document.querySelector('{PLOT}')?.layout?.title?.text?.includes('{title}')", timeout=60_000
    )
    settle(page)


def assert_labels_inside_and_apart(found: dict) -> None:
    area = found["area"]
    for label in found["labels"]:
        inside = (
            label["left"] >= area["left"] - 0.5
            and label["right"] <= area["right"] + 0.5
            and label["top"] >= area["top"] - 0.5
            and label["bottom"] <= area["bottom"] + 0.5
        )
        assert inside, f"label {label['text']!r} clipped: {label} outside {area}"
    labels = found["labels"]
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            overlap_x = min(a["right"], b["right"]) - max(a["left"], b["left"])
            overlap_y = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            assert overlap_x <= 1 or overlap_y <= 1, f"labels {a['text']!r} and {b['text']!r} overlap"


def test_a_16_by_64_tree_fits_with_every_label_whole_and_the_wheel_scrolls_the_page(page):
    run_search(page, 16, 64)
    page.evaluate("document.querySelector('#beam-plot').scrollIntoView({block: 'start'})")
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "beam-16x64.png"))
    found = page.evaluate(LABELS_AND_AREA)
    assert found["figure"]["height"] <= 720  # the whole tree fits the window
    assert len(found["labels"]) >= 20  # labelled where it fits, not bare
    assert_labels_inside_and_apart(found)
    prompt = [label for label in found["labels"] if label["text"] == "prompt"]
    assert len(prompt) == 1 and prompt[0]["left"] >= found["area"]["left"]  # whole, not "ompt"

    area = found["area"]
    middle = (area["left"] + area["width"] / 2, area["top"] + area["height"] / 2)
    page.mouse.move(*middle)
    before, x_range = page.evaluate("window.scrollY"), page.evaluate(X_RANGE)
    page.mouse.wheel(0, 240)
    page.wait_for_function(f"window.scrollY > {before}")  # the page scrolls ...
    settle(page)
    assert page.evaluate(X_RANGE) == x_range  # ... and the plot does not zoom

    page.evaluate("document.querySelector('#beam-plot').scrollIntoView({block: 'start'})")
    area = page.evaluate(LABELS_AND_AREA)["area"]
    page.mouse.click(area["left"] + 3, area["bottom"] - 3)  # an empty corner: the plot has focus
    page.mouse.move(area["left"] + area["width"] / 2, area["top"] + area["height"] / 2)
    scrolled = page.evaluate("window.scrollY")
    page.mouse.wheel(0, -240)
    page.wait_for_function(f"({X_RANGE})()[0] !== {x_range[0]}")  # now the wheel zooms ...
    assert page.evaluate("window.scrollY") == scrolled  # ... and the page stays
    settle(page)
    assert_labels_inside_and_apart(page.evaluate(LABELS_AND_AREA))  # the zoomed view's labels fit too
    page.screenshot(path=str(SCREENSHOTS / "beam-16x64-zoomed.png"))

    page.keyboard.press("Escape")  # released: the wheel scrolls the page again
    page.mouse.wheel(0, 240)
    page.wait_for_function(f"window.scrollY > {scrolled}")


def test_a_fold_unfolds_on_click_and_a_node_click_still_chooses_it(page):
    run_search(page, 4, 12)
    page.evaluate("document.querySelector('#beam-plot').scrollIntoView({block: 'start'})")
    found = page.evaluate(LABELS_AND_AREA)
    assert_labels_inside_and_apart(found)
    folds = page.locator("#beam-plot .tracefolds .points path")
    assert folds.count() > 0
    box = folds.first.bounding_box()
    before = page.evaluate(f"document.querySelector('{PLOT}').data.find(t => t.name === 'pruned').x.length")
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(
        f"document.querySelector('{PLOT}').data.find(t => t.name === 'pruned').x.length > {before}"
    )
    settle(page)
    node = page.locator("#beam-plot .tracepruned .points path").first
    box = node.bounding_box()
    prefix = page.get_by_label("Prefix (prompt + tokens up to the node)")
    best = prefix.input_value()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "best => [...document.querySelectorAll('textarea')].some(t => t.value !== best"
        " && t.value.startsWith('The best thing about beam search is'))",
        arg=best,
    )
    page.wait_for_function(f"document.querySelector('{PLOT}').data.some(t => t.name === 'chosen node')")


LABEL_FONTS = """() => [...document.querySelectorAll('#beam-plot .scatterlayer .textpoint text')]
  .filter((t) => t.textContent).map((t) => parseFloat(getComputedStyle(t).fontSize))"""


def test_on_stage_in_dark_mode_the_tree_fits_the_window_with_larger_light_text(page, tiny_app):
    page.goto(f"{tiny_app}/?presenter=1&__theme=dark")  # last in this module: it leaves the page so
    page.wait_for_selector("#header")
    assert page.evaluate("document.body.classList.contains('presenter')")
    run_search(page, 16, 64)
    page.evaluate("window.scrollTo(0, 0)")
    settle(page)
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "beam-16x64-presenter-dark.png"))
    found = page.evaluate(LABELS_AND_AREA)
    # The figure ends above the window's bottom (the tiny model's long status texts push its top
    # down, so it may get only the 200 px minimum; tests/test_stage.py checks the fit with the
    # embedded model's short texts).
    top = page.evaluate("document.querySelector('#beam-plot').getBoundingClientRect().top")
    assert found["figure"]["bottom"] <= max(VIEWPORT["height"] - 12, top + 280) + 1
    assert len(found["labels"]) >= 3  # still labelled at the larger size
    assert_labels_inside_and_apart(found)
    assert min(page.evaluate(LABEL_FONTS)) >= 16  # readable from the back (12 px at the desk)
    layout = page.evaluate(
        f"() => {{ const l = document.querySelector('{PLOT}')._fullLayout;"
        " return [l.font.color, l.paper_bgcolor, l.plot_bgcolor]; }"
    )
    assert layout[0] == "#e5e7eb" and all("255, 255, 255" not in c and c != "#fff" for c in layout[1:])

    page.evaluate("window.playgroundTogglePresenter(false)")  # back at the desk: redrawn at 12 px
    page.wait_for_function(f"document.querySelector('{PLOT}').layout.meta.beam_view.presenter === false")
    settle(page)
    assert max(page.evaluate(LABEL_FONTS)) <= 12
    page.evaluate("document.querySelector('#beam-plot').scrollIntoView({block: 'start'})")
    assert_labels_inside_and_apart(page.evaluate(LABELS_AND_AREA))

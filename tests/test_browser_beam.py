"""The beam tree at 16 beams x 64 steps in a real headless Chromium at 1280 x 720, searched through
the UI on the embedded model: no label clipped, "prompt" whole, the wheel scrolls the page until
the plot has focus. (A 16 x 64 search takes a few minutes on 2 CPU cores.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from browser import browser_page, chromium_path

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        chromium_path() is None, reason="Debian chromium not installed (scripts/install_browser.sh)"
    ),
]

SCREENSHOTS = Path(tempfile.gettempdir()) / "playground-browser-beam"
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
  return range.every((v, i) => Math.abs(v - meta.window[i]) < 1e-6 * (1 + Math.abs(v)))
    && size.every((v, i) => Math.abs(v - meta.area[i]) <= 1.5);
}"""
X_RANGE = "() => document.querySelector('#beam-plot .js-plotly-plot')._fullLayout.xaxis.range.slice()"


@pytest.fixture(scope="module")
def page(launched_app):
    with browser_page(launched_app, width=1280, height=720) as page:
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
        f"() => document.querySelector('{PLOT}')?.layout?.title?.text?.includes('{title}')", timeout=1_100_000
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


@pytest.mark.timeout(1500)
def test_a_16_by_64_tree_fits_with_every_label_whole_and_the_wheel_scrolls_the_page(page):
    run_search(page, 16, 64)
    page.evaluate("document.querySelector('#beam-plot').scrollIntoView({block: 'start'})")
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "beam-16x64.png"))
    found = page.evaluate(LABELS_AND_AREA)
    assert found["figure"]["height"] <= 720  # the whole tree fits the window
    assert len(found["labels"]) > 40  # labelled where it fits, not bare
    assert_labels_inside_and_apart(found)
    prompt = [label for label in found["labels"] if label["text"] == "prompt"]
    assert len(prompt) == 1 and prompt[0]["left"] >= found["area"]["left"]  # whole, not "ompt"

    area = found["area"]
    middle = (area["left"] + area["width"] / 2, area["top"] + area["height"] / 2)
    page.mouse.move(*middle)
    before, x_range = page.evaluate("window.scrollY"), page.evaluate(X_RANGE)
    page.mouse.wheel(0, 240)
    page.wait_for_function(f"window.scrollY > {before}")  # the page scrolls ...
    page.wait_for_timeout(500)
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


@pytest.mark.timeout(600)
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

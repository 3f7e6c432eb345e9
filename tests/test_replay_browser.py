"""Replay on stage: every recorded lesson of the gallery (python app.py --replay docs/traces) in
presenter mode at 1280x720, as a talk's fallback shows it. Each lesson's main visual lies in the
window at full height (at least the height it was recorded with; on stage its larger text may add
to it), as a live lesson's does on stage (test_hood_browser.py), no figure's parts collide, and no
figure leaves plotly an error. The recorded beam tree fits the window with stage-sized labels, as
the live tree does (test_browser_beam.py). Headless Chromium."""

from __future__ import annotations

import contextlib

import pytest
from browser import BROWSER_TESTS, chromium_browser, new_tab
from playwright.sync_api import Error as PlaywrightError
from stage_checks import assert_plots_clear, watch_errors
from test_browser_beam import LABEL_FONTS, LABELS_AND_AREA, assert_labels_inside_and_apart, settle

from playground.traces import GALLERY, Trace, load_traces
from playground.ui.hood import VIEWS

pytestmark = BROWSER_TESTS
WINDOW = {"width": 1280, "height": 720}
LESSONS = {view.key: view for view in VIEWS}
LESSON_TRACES = [trace for trace in load_traces(GALLERY) if trace.kind == "hood"]
# The lesson's main visual as replay draws it (playground/ui/replay.py): its own HTML slot, or the
# first plot slot; its box in the window, and a figure's height as drawn.
MAIN_JS = """() => {
  const html = document.querySelector('#replay-hood-main-html');
  const main = html && html.offsetParent ? html : document.querySelector('#replay-hood-plot-0');
  const box = main.getBoundingClientRect(), gd = main.querySelector('.js-plotly-plot');
  return {id: main.id, top: box.top, bottom: box.bottom, height: box.height,
          drawn: gd ? gd._fullLayout.height : null};
}"""


@pytest.fixture(scope="module")
def stage(replay_app):
    """A speaker's replay page (presenter mode, 1280x720) on Under the hood, and its errors so far."""
    with chromium_browser() as browser:
        context = browser.new_context(viewport=WINDOW)
        errors = watch_errors(context)
        page = new_tab(context, f"{replay_app}/?presenter=1")
        page.get_by_role("tab", name="Under the hood").click()
        yield page, errors
        context.close()


def pick(page, index: int, trace: Trace) -> None:
    """Choose the index-th recorded lesson in the picker; wait until it is drawn."""
    page.locator("#replay-hood input").click()
    page.get_by_role("option").nth(index).click(force=True)  # the open list scrolls to the chosen one
    title = LESSONS[trace.data["view"]].lesson.title
    page.wait_for_function(
        "title => document.querySelector('#replay-hood-status')?.innerText.startsWith(title)", arg=title
    )


def recorded_height(trace: Trace) -> int | None:
    """The height the lesson's main figure was recorded with (None: its main visual is HTML)."""
    main = LESSONS[trace.data["view"]].main
    figure = next((f["figure"] for f in trace.data["outputs"]["figures"] if f["name"] == main), None)
    return None if figure is None else figure["layout"]["height"]


@pytest.mark.parametrize("index", range(len(LESSON_TRACES)), ids=[t.data["view"] for t in LESSON_TRACES])
def test_every_recorded_lesson_fits_the_window_on_stage(stage, index: int):
    page, _ = stage
    trace = LESSON_TRACES[index]
    pick(page, index, trace)
    page.evaluate("window.scrollTo(0, 0)")
    height = recorded_height(trace)
    if height is not None:  # the presenter restyle (static/theme.js) settles on the fitted height
        fitted = f"() => ({MAIN_JS})().drawn >= {height}"
        with contextlib.suppress(PlaywrightError):  # the assertion below says what it got
            page.wait_for_function(fitted, timeout=5000)
    main = page.evaluate(MAIN_JS)
    assert main["top"] >= 0 and main["bottom"] <= WINDOW["height"], main
    if height is None:
        assert main["id"] == "replay-hood-main-html" and main["height"] > 100, main
    else:
        assert main["id"] == "replay-hood-plot-0" and main["drawn"] >= height, (main, height)
    assert_plots_clear(page)  # no figure squeezed until its titles and legend collide


def test_no_figure_leaves_plotly_an_error_across_the_tabs_on_stage(stage):
    """After every lesson above, each tab in turn: no "Something went wrong with axis scaling"."""
    page, errors = stage
    for tab in ("Beam search", "Step by step", "Chat", "Under the hood"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1500)
    assert not [e for e in errors if "axis scaling" in e], errors


def test_the_recorded_beam_tree_fits_the_window_on_stage(stage):
    """The replay's beam tree is redrawn for the plot's frame, as the live one: on stage it ends
    above the window's bottom and its labels are stage-sized, inside the plot and apart."""
    page, _ = stage
    page.get_by_role("tab", name="Beam search").click()
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function(
        "document.querySelector('#beam-plot .js-plotly-plot')?.layout?.meta?.beam_view?.presenter === true"
    )
    settle(page)
    found = page.evaluate(LABELS_AND_AREA)
    assert found["figure"]["bottom"] <= WINDOW["height"] - 12 + 1, found["figure"]  # at the page's top
    assert found["figure"]["height"] >= 300, found["figure"]
    assert len(found["labels"]) >= 3
    assert_labels_inside_and_apart(found)
    assert min(page.evaluate(LABEL_FONTS)) >= 16

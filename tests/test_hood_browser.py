"""The Under the hood tab in a real headless Chromium at 1280x720: every registered lesson run on
stage (presenter mode, dark), the clicks on its figures, Stop, bad input and the step -> lens move."""

from __future__ import annotations

import gradio as gr
import pytest
from browser import BROWSER_TESTS, chromium_browser, new_tab, open_page
from stage_checks import watch_errors

from playground.ui.hood import VIEWS, LessonView, build_hood_tab
from playground.ui.hood.base import GROUPS
from playground.ui.i18n import ENGLISH
from playground.ui.state import TabStates
from playground.workspace import Workspaces

pytestmark = BROWSER_TESTS
RUN_TIMEOUT = 300_000  # ms: a shared 2-core CPU
DONE = "/^(Done|Failed|Stopped)/"


@pytest.fixture(scope="module")
def widgets(embedded_lm):
    """The tab's components as built (their kinds and element ids), outside any app."""
    with gr.Blocks():
        built, _ = build_hood_tab(embedded_lm, Workspaces(embedded_lm), TabStates(), VIEWS)
    return built


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:  # one Playwright instance for the module's pages
        yield browser


@pytest.fixture(scope="module")
def stage_and_errors(browser, launched_app):
    """A speaker's page (presenter mode, dark, a 1280x720 projector) and every error its page has
    logged since it opened."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    errors = watch_errors(context)
    page = new_tab(context, f"{launched_app}/?presenter=1&__theme=dark")
    page.get_by_role("tab", name="Under the hood").click()
    yield page, errors
    context.close()


@pytest.fixture(scope="module")
def stage(stage_and_errors):
    return stage_and_errors[0]


@pytest.fixture(scope="module")
def page(browser, launched_app):
    with open_page(browser, launched_app, width=1280, height=720) as page:
        page.get_by_role("tab", name="Under the hood").click()
        yield page


LABELS = {ENGLISH.get(view.label, view.label): view for view in VIEWS}  # by the English name


def open_view(page, name: str) -> None:
    """A lesson's sub-tab: its group's tab first, then its own."""
    view = LABELS[name]
    group, lesson = ENGLISH.get(GROUPS[view.group], GROUPS[view.group]), name
    page.locator("#hood-views").get_by_role("tab", name=group, exact=True).click()
    page.locator("#hood-views").get_by_role("tab", name=lesson, exact=True).click()


def set_value(page, component: object, value: object) -> None:
    """Type a value into a component as a person would (by its kind)."""
    root = page.locator(f"#{component.elem_id}")
    if isinstance(component, gr.Slider):
        box = root.locator("input[type=number]")
        box.fill(str(value))
        box.press("Enter")
    elif isinstance(component, gr.CheckboxGroup):
        for choice in component.choices:
            box = root.get_by_label(str(choice[0]), exact=True)
            box.check() if choice[1] in value else box.uncheck()
    elif isinstance(component, gr.Checkbox):
        root.locator("input[type=checkbox]").set_checked(bool(value))
    else:
        root.locator("textarea, input").first.fill(str(value))


def run_and_wait(page, view: str) -> str:
    """Press the view's run button; wait for its status line to say Done (or Failed/Stopped)."""
    page.locator(f"#hood-{view}-run").click()
    page.wait_for_function(
        f"document.querySelector('#hood-{view}-status')?.innerText.match({DONE})", timeout=RUN_TIMEOUT
    )
    status = page.locator(f"#hood-{view}-status").inner_text()
    assert status.startswith("Done"), status
    return page.locator(f"#hood-{view}-summary").inner_text()


def in_window(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"] + 1


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_every_lesson_runs_on_stage(stage, widgets, view: LessonView):
    """Each registered lesson, driven through its widgets with its quick settings, at 1280x720 in
    presenter mode and dark mode: it finishes, its main visual is drawn dark and fits the window."""
    open_view(stage, ENGLISH.get(view.label, view.label))
    for name, value in view.quick.items():
        set_value(stage, widgets[name], value)
    run_and_wait(stage, view.key)
    main = f"#{widgets[view.main].elem_id}"
    stage.evaluate("window.scrollTo(0, 0)")
    stage.wait_for_timeout(300)  # the presenter restyle (static/theme.js) settles
    assert in_window(stage, main), stage.locator(main).bounding_box()
    plots = stage.locator(f"{main} .js-plotly-plot")
    if plots.count():
        font = plots.first.evaluate("gd => gd._fullLayout.font.color")
        assert font == "#e5e7eb"  # the dark template reached plotly
    assert stage.evaluate("document.documentElement.scrollWidth") <= 1280


def test_no_figure_on_stage_leaves_plotly_an_error(stage_and_errors):
    """After the lessons above ran on stage, and a visit to every tab: plotly never said "Something
    went wrong with axis scaling" (a figure drawn with no room for its plot area)."""
    page, errors = stage_and_errors
    for tab in ("Beam search", "Step by step", "Chat", "KV cache", "Under the hood"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1500)
    assert not [error for error in errors if "axis scaling" in error], errors


def test_stop_says_so_without_an_error(page):
    """Three runs stopped while running: each time the status line says so and stays, no "Error"
    mark (a cancelled Gradio event once left one, 1 CI run in several), no toast, no summary."""
    open_view(page, "Cache on vs off")
    page.locator("#hood-kv-length input[type=number]").fill("1500")
    page.locator("#hood-kv-length input[type=number]").press("Enter")
    status = page.locator("#hood-kv-status")
    for _ in range(3):
        page.locator("#hood-kv-run").click()
        page.wait_for_function("document.querySelector('#hood-kv-status')?.innerText.startsWith('Running')")
        page.locator("#hood-kv-stop").click()
        page.wait_for_function(
            "document.querySelector('#hood-kv-status')?.innerText.startsWith('Stopped by you')"
        )
        page.wait_for_timeout(1500)  # the run's own end, one step later, says the same
        assert status.inner_text().strip() == "Stopped by you: press Run to start again."
        assert page.locator("#hood-kv-summary").inner_text().strip() == ""
        assert page.locator(".toast-body.error").count() == 0  # no red "Error" toast


def test_the_crowd_draws_ttft_and_tpot_live_next_to_the_schedule(page):
    """The crowd button sends requests at the chosen rate to the app's own batch: while they run, the
    status line, the schedule and each request's TTFT and TPOT are redrawn; at the end every request is
    drawn, the two figures side by side in the 1280-pixel window."""
    open_view(page, "Continuous batching")
    for name, value in (("rate", 3), ("requests", 5)):
        page.locator(f"#hood-crowd-{name} input[type=number]").fill(str(value))
        page.locator(f"#hood-crowd-{name} input[type=number]").press("Enter")
    page.locator("#hood-crowd-run").click()
    points = "document.querySelector('#hood-crowd-latency .js-plotly-plot')?.data[0].x.length || 0"
    page.wait_for_function(
        f"document.querySelector('#hood-crowd-status')?.innerText.startsWith('Running') && {points} > 0",
        timeout=RUN_TIMEOUT,
    )  # drawn live, before the crowd is done
    page.wait_for_function(
        "document.querySelector('#hood-crowd-status')?.innerText.startsWith('Done')", timeout=RUN_TIMEOUT
    )
    status = page.locator("#hood-crowd-status").inner_text()
    assert status.startswith("Done: 5 of 5 requests answered") and "TTFT p50" in status, status
    assert page.evaluate(points) == 5  # every request's TTFT at its arrival
    assert page.locator("#hood-crowd-gantt .js-plotly-plot").evaluate("gd => gd.data.length") >= 1
    gantt, latency = (page.locator(f"#hood-crowd-{n}").bounding_box() for n in ("gantt", "latency"))
    assert gantt["x"] + gantt["width"] <= latency["x"] + 1  # side by side
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_attention_thumbnail_click_enlarges_it(page):
    open_view(page, "Attention")
    run_and_wait(page, "attn")
    x, y = plot_point(page, "#hood-attn-grid", 2.8, 5.3)  # layer 3, head 5: the lower left of its thumbnail
    page.mouse.click(x, y)
    page.wait_for_function(
        "document.querySelector('#hood-attn-map .js-plotly-plot')?.layout.title.text === 'layer 3, head 5'"
    )
    layer = page.get_by_label("number input for layer")  # a slider moves the same view
    layer.fill("7")
    layer.press("Tab")  # released: the view follows
    page.wait_for_function(
        "document.querySelector('#hood-attn-map .js-plotly-plot')?.layout.title.text === 'layer 7, head 5'"
    )


def test_logit_lens_click_tracks_a_token(page):
    open_view(page, "Logit lens")
    assert "Next token: ␣Paris" in run_and_wait(page, "lens")
    x, y = plot_point(page, "#hood-lens-top", 1, 29)  # the last layer's second most likely token
    page.mouse.click(x, y)
    page.wait_for_function(
        "document.querySelector('#hood-lens-tracks .js-plotly-plot')?.data.length === 4", timeout=RUN_TIMEOUT
    )


def test_bad_input_gives_a_message_not_a_trace(page):
    open_view(page, "Speculative decoding")
    page.locator("#hood-spec-method").get_by_label("draft model (--draft-model)").check()
    page.locator("#hood-spec-run").click()
    page.get_by_text("No draft model is loaded").first.wait_for()
    assert "Failed: No draft model" in page.locator("#hood-spec-status").inner_text()
    open_view(page, "Attention")
    page.locator("#hood-attn-text textarea").fill("")
    page.locator("#hood-attn-run").click()
    page.get_by_text("The text is empty").first.wait_for()
    page.locator("#hood-attn-text textarea").fill("word " * 400)
    page.locator("#hood-attn-run").click()
    page.get_by_text("at most 256 tokens").first.wait_for()
    assert "Traceback" not in page.content()


def test_a_value_typed_past_a_sliders_range_is_named(page):
    """Early exit with k = 30 on a 30-layer model ran as k = 29 without a word (issue 33, item 1)."""
    open_view(page, "Speculative decoding")
    box = page.get_by_label("number input for early exit: k layers")
    box.fill("30")
    box.press("Tab")  # the box brings it into range when it loses focus
    told = "Early exit: k layers 30 is outside its range 1–29: set to 29."
    page.locator(".toast-body").filter(has_text=told).first.wait_for()
    assert box.input_value() == "29"


def test_the_step_tab_opens_the_logit_lens_at_its_step_and_the_run_saves_as_a_trace(page):
    page.get_by_role("tab", name="Step by step").click()
    page.wait_for_function("document.querySelector('#step-text .tok')", timeout=RUN_TIMEOUT)
    page.locator("#step-open-lens").click()
    page.wait_for_function(
        "document.querySelector('#hood-lens-status')?.innerText.startsWith('From the Step tab')",
        timeout=RUN_TIMEOUT,
    )
    assert page.locator("#hood-lens-tracks .js-plotly-plot").is_visible()
    page.locator("#hood-lens-save").click()
    page.get_by_text(".json").first.wait_for(timeout=RUN_TIMEOUT)  # the trace, offered for download


def plot_point(page, plot: str, x: float, y: float) -> tuple[float, float]:
    """Viewport coordinates of data point (x, y) in a plotly figure (scrolled into view first)."""
    page.locator(f"{plot} .js-plotly-plot").scroll_into_view_if_needed()
    return page.evaluate(
        """([plot, x, y]) => {
            const gd = document.querySelector(`${plot} .js-plotly-plot`);
            const box = gd.getBoundingClientRect(), xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(y)];
        }""",
        [plot, x, y],
    )

"""The Under the hood tab in a real headless Chromium at 1280x720: every view opened and run."""

from __future__ import annotations

import pytest
from browser import browser_page, chromium_path

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        chromium_path() is None, reason="Debian chromium not installed (scripts/install_browser.sh)"
    ),
]
RUN_TIMEOUT = 300_000  # ms: a shared 2-core CPU


@pytest.fixture(scope="module")
def page(launched_app):
    with browser_page(launched_app, width=1280, height=720) as page:
        page.get_by_role("tab", name="Under the hood").click()
        yield page


def open_view(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def set_slider(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def run_and_wait(page, view: str) -> str:
    """Press the view's run button; wait for its status line to say Done (or show the result)."""
    page.locator(f"#hood-{view}-run").click()
    page.wait_for_function(
        f"document.querySelector('#hood-{view}-status')?.innerText.match(/Done|tokens ·|layers/)",
        timeout=RUN_TIMEOUT,
    )
    return page.locator(f"#hood-{view}-summary").inner_text()


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


def test_kv_cache_view_runs_live(page):
    open_view(page, "Cache on vs off")
    set_slider(page, "hood-kv-length", 48)
    set_slider(page, "hood-kv-tokens", 3)
    summary = run_and_wait(page, "kv")
    assert "Tokens: identical ✓" in summary and "exactly the formula ✓" in summary
    assert page.locator("#hood-kv-latency .js-plotly-plot").count() == 1
    assert "identical ✓" in page.locator("#hood-kv-text").inner_text()


def test_prefill_vs_decode_view_runs(page):
    open_view(page, "Prefill vs decode")
    for length in ("256", "1024", "4096"):
        page.locator("#hood-pd-lengths").get_by_label(length, exact=True).uncheck()
    set_slider(page, "hood-pd-decode", 2)
    summary = run_and_wait(page, "pd")
    assert "memory bandwidth" in summary
    assert page.locator("#hood-pd-lengths input:checked").count() == 2


def test_attention_view_runs_and_a_thumbnail_click_enlarges_it(page):
    open_view(page, "Attention")
    run_and_wait(page, "attn")
    assert "attention sink" in page.locator("#hood-attn-summary").inner_text()
    x, y = plot_point(page, "#hood-attn-grid", 2.8, 5.3)  # layer 3, head 5: the lower left of its thumbnail
    page.mouse.click(x, y)
    page.wait_for_function(
        "document.querySelector('#hood-attn-map .js-plotly-plot')?.layout.title.text === 'layer 3, head 5'"
    )
    assert page.locator("#hood-attn-map").get_by_text("attention sink").count() == 1


def test_logit_lens_view_runs_and_a_click_tracks_a_token(page):
    open_view(page, "Logit lens")
    summary = run_and_wait(page, "lens")
    assert "Next token: ␣Paris" in summary
    x, y = plot_point(page, "#hood-lens-top", 1, 29)  # the last layer's second most likely token
    page.mouse.click(x, y)
    page.wait_for_function(
        "document.querySelector('#hood-lens-tracks .js-plotly-plot')?.data.length === 4", timeout=RUN_TIMEOUT
    )


def test_speculative_view_runs_and_matches_plain_greedy(page):
    open_view(page, "Speculative decoding")
    set_slider(page, "hood-spec-tokens", 12)
    summary = run_and_wait(page, "spec")
    assert "Identical to plain greedy decoding ✓" in summary and "acceptance" in summary
    assert "accepted draft" in page.locator("#hood-spec-rounds").inner_text()


def test_batching_view_runs(page):
    open_view(page, "Batching")
    set_slider(page, "hood-batch-n", 2)
    set_slider(page, "hood-batch-tokens", 4)
    summary = run_and_wait(page, "batch")
    assert "Every sequence's tokens equal its solo run ✓" in summary


def test_bad_input_gives_a_message_not_a_trace(page):
    open_view(page, "Speculative decoding")
    page.locator("#hood-spec-method").get_by_label("draft model (--draft-model)").check()
    page.locator("#hood-spec-run").click()
    page.get_by_text("No draft model is loaded").first.wait_for()
    open_view(page, "Attention")
    page.get_by_label("text").first.fill("word " * 400)
    page.locator("#hood-attn-run").click()
    page.get_by_text("at most 256 tokens").first.wait_for()
    assert "Traceback" not in page.content()


def test_fits_1280_wide_and_figures_have_no_white_background(page):
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    backgrounds = page.evaluate(
        "[...document.querySelectorAll('#hood-views .js-plotly-plot')].map(p => p._fullLayout.paper_bgcolor)"
    )
    assert backgrounds and all(b == "rgba(0, 0, 0, 0)" for b in backgrounds)


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

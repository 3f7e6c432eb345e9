"""Beam search's progress and Stop in headless Chromium on the embedded model: a 16 x 64 search
(minutes on 2 CPU cores) shows its steps as it runs, and Stop ends it with a plain status line:
no error mark, no traceback in the server's console."""

from __future__ import annotations

import pytest
from browser import chromium_browser, chromium_path, open_page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        chromium_path() is None, reason="Debian chromium not installed (scripts/install_browser.sh)"
    ),
]
STEPS_DONE = """() => {
  const m = document.querySelector('#beam-status')?.innerText.match(/(\\d+)\\/64 steps/);
  return m ? Number(m[1]) : 0;
}"""


def test_a_long_search_shows_its_steps_and_stop_ends_it(launched_app, capfd):
    capfd.readouterr()
    with chromium_browser() as browser, open_page(browser, launched_app) as page:
        page.get_by_role("tab", name="Beam search").click()
        page.get_by_label("Beams").first.fill("16")
        page.get_by_label("Steps").first.fill("64")
        page.keyboard.press("Tab")
        status = page.locator("#beam-status")
        for _ in range(3):  # Stop's status line once raced Gradio's cancel (an "Error" mark, 1 in 8)
            page.get_by_role("button", name="Run beam search").click()
            page.wait_for_function(f"({STEPS_DONE})() >= 2", timeout=120_000)  # "2/64 steps | 3.1s"
            page.locator("#beam-stop").click()
            page.wait_for_function(
                "() => document.querySelector('#beam-status').innerText.includes('Stopped by you')"
            )
            page.wait_for_timeout(3000)  # the search's own end, one step later, changes nothing
            text = status.inner_text()
            assert text.strip().startswith("Stopped by you: the search ended at its next step."), text
            assert "Error" not in text and page.evaluate(STEPS_DONE) == 0  # no progress bar left
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, (out + err)[-2000:]

"""Beam search's progress and Stop in headless Chromium on the embedded model: a 16 x 64 search
(minutes on 2 CPU cores) shows its steps as it runs, and Stop ends it with its tree so far drawn,
marked "stopped at step N": no empty plot, no error mark, no traceback in the server's console."""

from __future__ import annotations

import re

from browser import BROWSER_TESTS, chromium_browser, open_page

pytestmark = BROWSER_TESTS
STEPS_DONE = """() => {
  const m = document.querySelector('#beam-status')?.innerText.match(/(\\d+)\\/64 steps/);
  return m ? Number(m[1]) : 0;
}"""


def test_a_long_search_shows_its_steps_and_stop_draws_its_tree_so_far(launched_app, capfd):
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
                "() => document.querySelector('#beam-status').innerText.includes('the tree as it stood')"
            )
            page.wait_for_timeout(3000)  # nothing later changes it
            text = status.inner_text()
            stopped = re.match(r"Stopped by you at step (\d+) of 64: the tree as it stood", text.strip())
            assert stopped and int(stopped.group(1)) >= 2, text
            assert "Error" not in text and page.evaluate(STEPS_DONE) == 0  # no progress bar left
            tree = page.evaluate(TREE)
            assert f"stopped by you at step {stopped.group(1)} of 64" in tree["title"], tree
            assert tree["points"] > 16, tree  # the prompt, every kept beam of each step run so far
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, (out + err)[-2000:]


# The drawn tree: its title, and how many marks its traces draw.
TREE = """() => {
  const gd = document.querySelector('#beam-plot .js-plotly-plot');
  return {title: gd.layout.title.text, points: gd.data.reduce((n, t) => n + (t.x || []).length, 0)};
}"""

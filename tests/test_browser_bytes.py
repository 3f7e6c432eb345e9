"""A CJK answer in a real headless Chromium: the token view shows its characters, and each byte
token keeps its own card ("byte 1 of 3 of 美"); a Step candidate that is a character's first bytes
says which characters it becomes. (This machine's Chromium has no CJK font: the tests read the
DOM's text, not the glyphs.)"""

from __future__ import annotations

import re

import pytest
from browser import BROWSER_TESTS, browser_page, missing_glyphs, new_tab, overflowing

pytestmark = BROWSER_TESTS


@pytest.fixture(scope="module")
def cjk_page(launched_app):
    """The Chat tab after a greedy answer to a Chinese request (9 tokens: 美 丽 的 花)."""
    with browser_page(launched_app, 1280, 720) as page:
        page.get_by_role("tab", name="Chat").click()
        page.get_by_label("Temperature").first.fill("0")
        page.get_by_label("Max new tokens").first.fill("9")
        page.locator("#chat-message textarea").fill("用中文说：美丽的花")
        page.locator("#chat-send").click()
        page.wait_for_function("document.querySelector('#chat-status')?.innerText.includes('stopped')")
        page.wait_for_function("document.querySelectorAll('#chat-tokens .tok-group').length >= 3")
        yield page


def test_the_chat_token_view_shows_the_characters_not_replacement_marks(cjk_page):
    view = cjk_page.locator("#chat-tokens .answer-tokens")
    glyphs = view.locator(".tok-glyph").all_inner_texts()
    assert glyphs[:3] == ["美", "丽", "花"]
    # what a reader sees: the glyphs and the single-token 的, no U+FFFD anywhere on screen
    shown = view.evaluate(
        "el => [...el.querySelectorAll(':scope > .tok-group > .tok-glyph, :scope > .tok')]"
        ".map(e => e.firstChild.textContent).join('')"
    )
    assert shown.startswith("美丽的花") and "\ufffd" not in view.inner_text()
    box = view.locator(".tok-group").first.bounding_box()
    glyph = view.locator(".tok-glyph").first.bounding_box()
    cells = view.locator(".tok-group").first.locator(".tok-bytes").bounding_box()
    assert glyph["y"] + glyph["height"] <= cells["y"] + 1 and box["width"] >= cells["width"]  # bytes under


def test_hovering_a_byte_token_shows_which_byte_of_which_character(cjk_page):
    first = cjk_page.locator("#chat-tokens .tok-group").first
    cells = first.locator(".tok-bytes > .tok")
    assert cells.count() == 3 and cells.all_inner_texts()[:1] != [""]
    seen = []
    for i in range(3):
        cell, card = cells.nth(i), cells.nth(i).locator(".tok-card")
        assert not card.is_visible()
        cell.hover()
        card.wait_for(state="visible")
        text = card.inner_text()
        assert f"byte {i + 1} of 3 of 美" in text and "probability" in text and "rank" in text
        seen.append(next(line for line in text.splitlines() if line.startswith("probability")))
    assert len(set(seen)) == 3  # each byte token its own probability


def test_clicking_a_byte_token_pins_its_card_with_named_alternatives(cjk_page):
    cell = cjk_page.locator("#chat-tokens .tok-group").nth(1).locator(".tok-bytes > .tok").first
    cell.click()
    card = cell.locator(".tok-card")
    card.wait_for(state="visible")
    assert "bytes 1–2 of 3 of 丽" in card.inner_text()
    box, window = card.bounding_box(), cjk_page.viewport_size
    assert box["x"] >= 0 and box["x"] + box["width"] <= window["width"]
    alternatives = card.locator(".tok-alt").all_inner_texts()
    assert len(alternatives) == 5 and all("\ufffd" not in a for a in alternatives)
    cjk_page.keyboard.press("Escape")


def test_the_answer_footer_shows_no_glyph_the_font_lacks(cjk_page):
    footer = cjk_page.locator("#chat-bot .message.bot sub").last
    assert "stopped:" in footer.inner_text()
    assert missing_glyphs(footer) == []  # a stopwatch emoji was drawn as a box ("▯") here


CANDIDATES = "#step-candidates .step-cand"
# a byte candidate: its bytes, its own numbers, then the characters it goes on to, each with its share
BECOMES = re.compile(r"^(\[\d\] )?<0x[0-9A-F]{2}>.*\d+\.\d% · .* · becomes [\u4e00-\u9fff] (\d+%|<1%)")


def test_step_candidates_in_chinese_are_whole_and_a_byte_says_what_it_becomes(cjk_page, launched_app):
    """At 1280x720, at the desk and on stage: every candidate row is whole (it wraps), and a lone
    byte (<0xE7>: the first byte of a character SmolLM2 has no token for) lists the characters the
    model goes on to make of it, keeping its own probability (issue 33, items 5 and 6)."""
    page = new_tab(cjk_page.context, launched_app)  # a second tab of the same browser, 1280x720
    try:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")  # the default prompt's session
        page.locator("#step-prompt textarea").fill("今天天气很好，")
        page.get_by_role("button", name="Start", exact=True).click()
        page.wait_for_function("document.querySelector('#step-cand-1')?.innerText.includes('becomes')")
        for presenter in (False, True):
            if presenter:
                page.locator("#presenter-toggle").click()
                page.wait_for_function("document.body.classList.contains('presenter')")
            rows = [r for r in page.locator(CANDIDATES).all() if r.is_visible()]
            assert len(rows) == (5 if presenter else 10)
            assert overflowing(page, CANDIDATES) == [], presenter
            texts = [r.inner_text() for r in rows]
            assert all(re.search(r"(after sampling|removed by sampling)($| · becomes )", t) for t in texts), (
                texts
            )
            assert any(BECOMES.match(t) for t in texts), texts
    finally:
        page.close()


# The beam tree's text labels as drawn: each one's text and box, and every pair whose boxes overlap.
TREE_LABELS = """() => {
  const gd = document.querySelector('#beam-plot .js-plotly-plot');
  const boxes = [...gd.querySelectorAll('.textpoint text')].filter((t) => t.textContent.trim()).map((t) => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, l: r.left, t: r.top, r: r.right, b: r.bottom};
  });
  const overlaps = [];
  for (const [i, a] of boxes.entries()) {
    for (const b of boxes.slice(i + 1)) {
      if (a.l < b.r - 1 && b.l < a.r - 1 && a.t < b.b - 1 && b.t < a.b - 1) overlaps.push([a.text, b.text]);
    }
  }
  return {labels: boxes.map((b) => b.text), overlaps};
}"""


def test_a_cjk_beam_search_reads_in_characters_in_its_summary_and_its_tree(cjk_page):
    """A beam cut inside a character ends in "…" (not "�"); a character's first bytes are named by
    it in the tree ('天 (bytes 1–2/3)', not '<0xE5><0xA4> (bytes 1–2/3)'); no two labels overlap."""
    page = cjk_page
    page.get_by_role("tab", name="Beam search").click()
    page.locator("#beam-prompt textarea").fill("用中文说：今天天气很好")
    page.get_by_label("Chat template").check()
    page.get_by_label("Beams").first.fill("4")
    page.get_by_label("Steps").first.fill("8")
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Run beam search").click()
    page.wait_for_function("document.querySelector('#beam-status')?.innerText.includes('length limit')")
    page.wait_for_timeout(1500)  # the tree redrawn for the plot's size (static/beam.js)
    status = page.locator("#beam-status").inner_text().splitlines()
    best = next(line for line in status if "Best beam" in line)
    assert best.endswith("今天天…") and "\ufffd" not in best, best  # the 8th token is 气's first byte
    tree = page.evaluate(TREE_LABELS)
    named = [label for label in tree["labels"] if re.fullmatch(r"\S \(bytes? 1(–\d)?/3\)", label)]
    assert {"今 (bytes 1–2/3)", "天 (bytes 1–2/3)", "气 (byte 1/3)"} <= set(named), tree["labels"]
    assert not any("\ufffd" in label for label in tree["labels"]) and not tree["overlaps"], tree

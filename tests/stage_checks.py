"""What "fits on stage" means, measured in the browser: boxes inside the window, plot parts that do
not cover each other, token cards whose buttons take their own clicks (tests/test_stage.py)."""

from __future__ import annotations

# Every visible plotly figure: its legend must not cover an axis title, nor Gradio's label of the
# plot cover the legend or the figure's title; titles stay inside the figure; the plot area has room.
PLOT_PROBLEMS_JS = """() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 ? r : null; };
  const hit = (a, b) => a && b && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1
    && b.top < a.bottom - 1;
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1
    && a.bottom <= b.bottom + 1;
  const problems = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!gd.offsetParent || !gd._fullLayout) continue;
    const block = gd.closest('.block');
    const label = block?.querySelector(':scope > label[data-testid="block-label"]');
    const name = label?.innerText.trim() || block?.id || 'plot';
    const legend = gd.querySelector('.legend') ? box(gd.querySelector('.legend')) : null;
    const titles = [...gd.querySelectorAll('.xtitle, .ytitle, .gtitle')].map((t) => [t.classList[0], box(t)]);
    const figure = box(gd);
    for (const [kind, title] of titles) {
      if (!title) continue;
      if (hit(legend, title)) problems.push(`${name}: the legend covers the ${kind}`);
      if (!inside(title, figure)) problems.push(`${name}: the ${kind} is clipped`);
      if (label && hit(box(label), title)) problems.push(`${name}: the label covers the ${kind}`);
    }
    if (label && hit(box(label), legend)) problems.push(`${name}: the label covers the legend`);
    const size = gd._fullLayout._size;
    if (size.w < 240 || size.h < 80) problems.push(`${name}: plot area ${size.w}x${size.h} px`);
  }
  return problems;
}"""

# A token's open card: its box, its font size, and for each of its buttons whether a click at the
# button's centre reaches the button (and not something drawn over it).
CARD_JS = """tok => {
  const card = tok.querySelector(':scope > .tok-card');
  const r = card.getBoundingClientRect();
  const buttons = [...card.querySelectorAll('button')].map((b) => {
    const c = card.getBoundingClientRect();  // a card taller than its room scrolls: bring the button in
    let q = b.getBoundingClientRect();
    if (q.bottom > c.bottom) card.scrollTop += q.bottom - c.bottom;
    if (q.top < c.top) card.scrollTop -= c.top - q.top;
    q = b.getBoundingClientRect();
    const top = document.elementFromPoint(q.left + q.width / 2, q.top + q.height / 2);
    return {text: b.innerText.trim(), reached: b.contains(top)};
  });
  const fontSize = parseFloat(getComputedStyle(card.querySelector('td') || card).fontSize);
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, shown: r.height > 0,
          fontSize, buttons};
}"""


def window_box(page, selector: str) -> dict:
    """The element's box in the page's coordinates as if unscrolled, and the window's size."""
    return page.evaluate(
        "sel => { const r = document.querySelector(sel).getBoundingClientRect();"
        " return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right,"
        " width: innerWidth, height: innerHeight}; }",
        selector,
    )


def assert_fits(page, selector: str) -> None:
    """The element is fully in the window without scrolling."""
    r = window_box(page, selector)
    assert r["top"] >= 0 and r["bottom"] <= r["height"], (selector, r)
    assert r["left"] >= 0 and r["right"] <= r["width"], (selector, r)


def open_card(page, token) -> dict:
    """Click a token (which pins its card) and measure the card in the window as it is now."""
    token.click()
    page.wait_for_timeout(150)  # placed on the next frame (static/cards.js)
    report = token.evaluate(CARD_JS)
    size = page.viewport_size
    assert report["shown"], report
    assert report["top"] >= 0 and report["bottom"] <= size["height"], report
    assert report["left"] >= 0 and report["right"] <= size["width"], report
    assert all(b["reached"] for b in report["buttons"]), report
    return report


def assert_plots_clear(page) -> None:
    problems = page.evaluate(PLOT_PROBLEMS_JS)
    assert not problems, problems


def watch_errors(context) -> list[str]:
    """Every uncaught error and console error of the context's pages, from now on (plotly's "Something
    went wrong with axis scaling" is one: a figure drawn with no room for its plot area)."""
    errors: list[str] = []
    context.on("weberror", lambda error: errors.append(str(error.error)))
    context.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors

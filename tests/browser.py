"""Headless Debian Chromium driven by Playwright (its own browser download is not used)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


NO_CHROMIUM = "Debian chromium not installed (scripts/install_browser.sh)"
needs_chromium = pytest.mark.skipif(chromium_path() is None, reason=NO_CHROMIUM)
BROWSER_TESTS = [pytest.mark.browser, needs_chromium]  # a browser test file's pytestmark


@contextmanager
def browser_context(width: int = 1400, height: int = 1000, locale: str | None = None) -> Iterator[object]:
    """A Playwright browser context in a fresh profile (each of its pages is a tab), in the browser's
    language `locale` (e.g. "zh-CN"; None: Chromium's own); closed on exit."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium_path(),
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": width, "height": height},
            locale=locale,
        )
        try:
            yield context
        finally:
            context.close()


def new_tab(context: object, url: str) -> object:
    """A new tab of context on url, once the app has drawn its header (tabs of one context share
    storage, as a person's tabs do)."""
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#header")
    return page


@contextmanager
def page_in(browser: object, url: str, locale: str) -> Iterator[object]:
    """A page at 1280x720 of a browser whose language is `locale` (navigator.language and
    Accept-Language)."""
    context = browser.new_context(viewport={"width": 1280, "height": 720}, locale=locale)
    try:
        yield new_tab(context, url)
    finally:
        context.close()


@contextmanager
def browser_page(
    url: str, width: int = 1400, height: int = 1000, locale: str | None = None
) -> Iterator[object]:
    """A Playwright page on `url`, in a fresh profile (in the browser's language `locale`); closed on exit."""
    with browser_context(width, height, locale) as context:
        yield new_tab(context, url)


@contextmanager
def chromium_browser() -> Iterator[object]:
    """One headless Chromium for many pages (Playwright's sync API allows one instance at a time)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def open_page(browser: object, url: str, width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A page on `url` in its own fresh context (no shared storage), closed on exit."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = new_tab(context, url)
    try:
        yield page
    finally:
        context.close()


# The characters of an element's text that its font (and every fallback) lacks: each is drawn on a
# canvas in the element's font and compared with a private-use code point no font has (the box a
# missing glyph shows as: "▯").
MISSING_GLYPHS_JS = """el => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 96;
  const pen = canvas.getContext('2d');
  const draw = ch => {
    pen.clearRect(0, 0, 96, 96);
    pen.font = getComputedStyle(el).font;
    pen.fillText(ch, 8, 64);
    return pen.getImageData(0, 0, 96, 96).data.join();
  };
  const box = draw('\\u{10FFFD}');
  return [...new Set(el.innerText)].filter(ch => ch.trim() && draw(ch) === box);
}"""


def missing_glyphs(locator: object) -> list[str]:
    """The characters of the element's text drawn as a box (no font has them)."""
    return locator.evaluate(MISSING_GLYPHS_JS)


# Elements inside the selector whose content runs past their own box (cut off or ended in "…").
OVERFLOWING_JS = """sel => [...document.querySelectorAll(sel)].filter(e => e.offsetParent)
  .filter(e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1
    || e.getBoundingClientRect().right > innerWidth + 0.5)
  .map(e => `${e.tagName}#${e.id}.${e.className}: ${e.innerText.slice(0, 60)}`)"""


def overflowing(page: object, selector: str) -> list[str]:
    """Elements matching selector (visible ones) whose text is cut at their edge or the window's."""
    return page.evaluate(OVERFLOWING_JS, selector)

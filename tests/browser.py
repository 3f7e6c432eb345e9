"""Headless Debian Chromium driven by Playwright (its own browser download is not used)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def browser_context(width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A Playwright browser context in a fresh profile (each of its pages is a tab); closed on exit."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium_path(),
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": width, "height": height},
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
def browser_page(url: str, width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A Playwright page on `url`, in a fresh profile; closed on exit."""
    with browser_context(width, height) as context:
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

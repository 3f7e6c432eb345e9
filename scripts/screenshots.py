"""Take the README screenshots of every tab, presenter mode, dark mode and Chinese:
.venv/bin/python scripts/screenshots.py            (all of them)
.venv/bin/python scripts/screenshots.py compare    (only docs/compare.png: two models side by side)
.venv/bin/python scripts/screenshots.py zh         (only docs/zh.png: the app in Chinese)"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]


def main(only: list[str]) -> None:
    if not set(only) <= set(TARGETS):
        sys.exit(f"screenshots.py takes no argument (every screenshot) or some of {list(TARGETS)}: {only}")
    from playground import load_model
    from playground.settings import load_settings
    from playground.ui.app import build_demo, launch_local, launch_options

    demo = build_demo(load_model(), load_settings())
    url = launch_local(demo, **launch_options())  # a free port; retried when a busy machine answers late
    docs = REPO / "docs"
    if not only:
        _tab_shots(url, docs)
        _stage_shots(url, docs)
    for target in only or TARGETS:
        TARGETS[target](url, docs)
    demo.close()


def _tab_shots(url: str, docs: Path) -> None:
    """Each tab at a desk's 1400x1000."""
    from browser import browser_page

    with browser_page(url, width=1400, height=1000) as page:
        page.locator("#chat-message textarea").fill("What is the capital of France?")
        page.locator("#chat-send").click()
        page.wait_for_function("document.querySelector('.chat-stats')?.innerText.includes('stopped')")
        page.locator(".token-stream .tok").nth(5).hover()
        page.screenshot(path=docs / "chat.png")
        page.get_by_role("tab", name="Beam search").click()
        page.get_by_role("button", name="Run beam search").click()
        page.wait_for_timeout(15000)
        page.screenshot(path=docs / "beam.png", full_page=True)
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        for _ in range(4):  # a few picks, so the ledger and its plot have something to show
            page.locator("body").click(position={"x": 5, "y": 5})
            page.keyboard.press("1")
            page.wait_for_timeout(1500)
        page.screenshot(path=docs / "step.png", full_page=True)
        page.get_by_role("tab", name="KV cache").click()
        page.wait_for_timeout(2000)
        page.screenshot(path=docs / "kv.png", full_page=True)
        page.get_by_role("tab", name="Under the hood").click()
        page.locator("#hood-views").get_by_role("tab", name="What a token costs", exact=True).click()
        page.locator("#hood-kv-run").click()
        page.wait_for_function("document.querySelector('#hood-kv-status')?.innerText.includes('Done')")
        page.screenshot(path=docs / "hood.png", full_page=True)


def _stage_shots(url: str, docs: Path) -> None:
    """Presenter mode at a projector's 1280x720, and dark mode (the Step tab, whose plots follow it)."""
    from browser import browser_page

    with browser_page(f"{url}?presenter=1", width=1280, height=720) as page:
        page.get_by_label("Temperature").first.fill("0")  # greedy: the answer the Step and Beam tabs give
        page.locator("#chat-message textarea").fill("What is the capital of France?")
        page.locator("#chat-send").click()
        page.wait_for_function("document.querySelector('.chat-stats')?.innerText.includes('stopped')")
        page.screenshot(path=docs / "presenter.png")
    with browser_page(f"{url}?__theme=dark", width=1400, height=1000) as page:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("1")
        page.wait_for_timeout(1500)
        page.screenshot(path=docs / "dark.png", full_page=True)


def _compare_shot(url: str, docs: Path) -> None:
    """Compare: SmolLM2 and Gemma 3 270M answer one question side by side, where they part marked."""
    from browser import browser_page

    with browser_page(url, width=1400, height=1000) as page:
        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-message textarea").fill("What is the capital of France?")
        page.locator("#compare-send").click()
        for side in "ab":
            page.wait_for_function(
                "x => document.querySelector(`#compare-chat-${x}-stats`)?.innerText.includes('stopped')",
                arg=side,
                timeout=300_000,
            )
        page.screenshot(path=docs / "compare.png", full_page=True)


def _chinese_shot(url: str, docs: Path) -> None:
    """The app in Chinese (a zh-CN browser, ?lang=zh) on a projector's 1280x720, presenter mode: Under
    the hood, the Tokens lesson on 今天天气很好, which SmolLM2 reads as byte tokens (each character over
    its own); the window down to the lesson's text box."""
    from browser import browser_page

    from playground.ui.i18n import LANGUAGES

    zh = LANGUAGES["zh"].strings
    with browser_page(f"{url}?lang=zh&presenter=1", width=1280, height=720, locale="zh-CN") as page:
        page.get_by_role("tab", name=zh["tab.hood"]).click()  # waits for the page to turn Chinese
        views = page.locator("#hood-views")
        views.get_by_role("tab", name=zh["hood.group.tokens"], exact=True).click()
        views.get_by_role("tab", name=zh["hood.tok.label"], exact=True).click()
        page.locator("#hood-tok-preset").get_by_label(CHINESE_PRESET).check()
        page.wait_for_function(
            "text => document.querySelector('#hood-tok-text textarea').value === text", arg=CHINESE_PRESET
        )
        page.locator("#hood-tok-run").click()
        page.wait_for_function(
            "done => document.querySelector('#hood-tok-status')?.innerText.includes(done)",
            arg=zh["hood.status.done"].split("：")[0],
            timeout=300_000,
        )
        page.evaluate("window.scrollTo(0, 0)")
        box = page.locator("#hood-tok-text").bounding_box()  # the window, less the half-shown row below
        page.screenshot(
            path=docs / "zh.png",
            clip={"x": 0, "y": 0, "width": 1280, "height": box["y"] + box["height"] + 4},
        )


CHINESE_PRESET = "今天天气很好"  # the chain-rule example of the texts, a preset of the Tokens lesson
TARGETS = {"compare": _compare_shot, "zh": _chinese_shot}  # the screenshots one can take alone


if __name__ == "__main__":
    main(sys.argv[1:])

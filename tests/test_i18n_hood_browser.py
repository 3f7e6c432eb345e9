"""Under the hood in Chinese, in headless Chromium at 1280x720 with locale zh-CN: every group, lesson,
label, button and explanation is Chinese (model output and numbers aside) and no label is wrapped
letter by letter; every lesson runs on stage (presenter mode, dark) with its status, summary and
figures in Chinese and its main visual in the window; a bad input is told in Chinese; the header's
switch turns the tab and its tables' headers Chinese live; the replay app reads Chinese."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import BROWSER_TESTS, chromium_browser, page_in

from playground.ui.hood import VIEWS, LessonView
from playground.ui.hood.base import GROUPS
from playground.ui.i18n import ENGLISH, LANGUAGES

pytestmark = BROWSER_TESTS
ZH = LANGUAGES["zh"].strings
RUN_TIMEOUT = 300_000  # ms: a shared 2-core CPU
CJK = re.compile(r"[\u4e00-\u9fff]")
GALLERY = Path(__file__).resolve().parents[1] / "docs" / "traces"

# Text elements of the tab whose words a person reads, with how many lines they take and the most
# characters on one line: a label squeezed into a column one character wide reads 1 per line.
TEXT_BOXES_JS = """sel => {
  const root = document.querySelector(sel);
  const found = [];
  const kinds = 'button, [role=tab], label, [data-testid="block-info"], [data-testid="block-label"], th';
  for (const el of root.querySelectorAll(kinds)) {
    if (!el.offsetParent) continue;
    const text = el.innerText.trim();
    if ([...text].length < 3) continue;
    const tops = [];  // the top of every line box of the element's own text
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      tops.push(...[...range.getClientRects()].filter(r => r.width > 0).map(r => r.top));
    }
    const half = parseFloat(getComputedStyle(el).fontSize) / 2;
    const lines = tops.sort((a, b) => a - b).filter((top, i) => i === 0 || top - tops[i - 1] > half).length;
    found.push({text, lines: Math.max(lines, 1)});
  }
  return found;
}"""


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def open_hood(page, lang: str) -> None:
    strings = LANGUAGES[lang].strings
    page.wait_for_function(
        "t => [...document.querySelectorAll('#main-tabs [role=tab]')].some(e => e.innerText.trim() === t)",
        arg=strings["tab.hood"],
    )
    page.get_by_role("tab", name=strings["tab.hood"]).click()
    page.locator("#hood-views").wait_for()


def open_view(page, view: LessonView, lang: str) -> None:
    strings = LANGUAGES[lang].strings
    views = page.locator("#hood-views")
    views.get_by_role("tab", name=strings[GROUPS[view.group]], exact=True).click()
    views.get_by_role("tab", name=strings[view.label], exact=True).click()
    page.locator(f"#hood-{view.key}-run").wait_for()


def lesson_text(page, view: LessonView) -> str:
    """What the open lesson shows (its sub-tab's panel)."""
    return page.locator(f"#{view.tab_id}").inner_text()


def english_left(text: str) -> list[str]:
    """Static English of the tab (keys hood.*, no values) still in `text` where Chinese differs."""
    static = [k for k, v in ENGLISH.items() if k.startswith("hood.") and "{" not in v and ZH.get(k) != v]
    words = [ENGLISH[k] for k in static if len(ENGLISH[k]) > 3]
    text = text.replace("（token）", "")  # the term, named once where the lesson on tokens introduces it
    return [w for w in words if re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text)]


def squeezed(page, selector: str) -> list[dict]:
    """Text boxes of selector wrapped to at most one character per line."""
    boxes = page.evaluate(TEXT_BOXES_JS, selector)
    return [box for box in boxes if box["lines"] >= 3 and len(box["text"]) / box["lines"] < 2]


def test_every_lesson_reads_chinese_on_a_chinese_page(browser, launched_app):
    with page_in(browser, launched_app, "zh-CN") as page:
        open_hood(page, "zh")
        for key in GROUPS.values():
            assert page.locator("#hood-views").get_by_role("tab", name=ZH[key], exact=True).count() == 1
        for view in VIEWS:
            open_view(page, view, "zh")
            text = lesson_text(page, view)
            assert ZH[view.explain].split("**")[1] in text, view.key  # the texts' term, first
            assert ZH[view.run_label] in text and ZH["hood.save"] in text and ZH["hood.stop"] in text
            assert english_left(text) == [], (view.key, english_left(text))
            assert squeezed(page, "#tab-hood") == [], (view.key, squeezed(page, "#tab-hood"))


@pytest.fixture(scope="module")
def stage(browser, launched_app):
    """A speaker's page in Chinese: presenter mode, dark, a 1280x720 projector."""
    with page_in(browser, f"{launched_app}/?presenter=1&__theme=dark", "zh-CN") as page:
        open_hood(page, "zh")
        yield page


@pytest.fixture(scope="module")
def widgets(embedded_lm):
    import gradio as gr

    from playground.ui.hood import build_hood_tab
    from playground.ui.state import TabStates
    from playground.workspace import Workspaces

    with gr.Blocks():
        built, _ = build_hood_tab(embedded_lm, Workspaces(embedded_lm), TabStates(), VIEWS)
    return built


@pytest.mark.parametrize("view", VIEWS, ids=lambda view: view.key)
def test_every_lesson_runs_in_chinese_on_stage(stage, widgets, view: LessonView):
    """Each lesson with its quick settings on a Chinese speaker's page: its status and summary are
    Chinese, its figures' axes too, no label is squeezed, and its main visual fits the window."""
    from test_hood_browser import set_value

    open_view(stage, view, "zh")
    for name, value in view.quick.items():
        set_value(stage, widgets[name], value)
    stage.locator(f"#hood-{view.key}-run").click()
    status = stage.locator(f"#hood-{view.key}-status")
    stage.wait_for_function(
        "el => /^(完成|失败|已由你停止)/.test(el.innerText)", arg=status.element_handle(), timeout=RUN_TIMEOUT
    )
    assert status.inner_text().startswith("完成："), status.inner_text()
    summary = stage.locator(f"#hood-{view.key}-summary").inner_text()
    assert CJK.search(summary), summary
    main = f"#{widgets[view.main].elem_id}"
    stage.evaluate("window.scrollTo(0, 0)")
    stage.wait_for_timeout(300)  # the presenter restyle (static/theme.js) settles
    box = stage.locator(main).bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 721, box
    for plot in stage.locator(f"{main} .js-plotly-plot").all():
        titles = plot.evaluate(
            "gd => [...gd.querySelectorAll('.xtitle, .ytitle, .legendtext, .annotation-text')]"
            ".map(e => e.textContent)"
        )
        assert any(CJK.search(title) for title in titles), titles
    assert squeezed(stage, "#tab-hood") == []
    assert english_left(lesson_text(stage, view)) == []
    assert stage.evaluate("document.documentElement.scrollWidth") <= 1280


def test_a_bad_input_is_told_in_chinese(browser, launched_app):
    with page_in(browser, launched_app, "zh-CN") as page:
        open_hood(page, "zh")
        view = next(view for view in VIEWS if view.key == "spec")
        open_view(page, view, "zh")
        page.locator("#hood-spec-method").get_by_label(ZH["hood.spec.method.draft"]).check()
        page.locator("#hood-spec-run").click()
        told = "没有加载草稿模型：请用 --draft-model NAME 启动本应用"
        page.locator(".toast-body").filter(has_text=told).first.wait_for()
        status = page.locator("#hood-spec-status [data-testid=markdown]")  # beside Gradio's 错误 badge
        page.wait_for_function("el => el.innerText.startsWith('失败：')", arg=status.element_handle())
        assert told in status.inner_text()


def test_the_switch_turns_the_tab_chinese_live_with_its_tables_headers(browser, launched_app):
    with page_in(browser, launched_app, "en-US") as page:
        open_hood(page, "en")
        view = next(view for view in VIEWS if view.key == "pd")
        open_view(page, view, "en")
        assert ENGLISH["hood.pd.col.tokens"] in page.locator("#hood-pd-table thead").inner_text()
        page.locator("#language-switch").get_by_text("中文").click()
        page.wait_for_function(
            "t => document.querySelector('#hood-pd-table thead')?.innerText.includes(t)",
            arg=ZH["hood.pd.col.tokens"],
        )
        text = lesson_text(page, view)
        assert ZH[view.run_label] in text and ZH["hood.pd.lengths"] in text
        assert english_left(text) == [], english_left(text)
        groups = page.locator("#hood-views").inner_text()
        assert ZH[GROUPS["cost"]] in groups


@pytest.fixture(scope="module")
def replay_app():
    from playground.traces import load_traces
    from playground.ui.app import launch_local, launch_options
    from playground.ui.replay import build_replay_demo

    demo = build_replay_demo(load_traces(GALLERY))
    url = launch_local(demo, **launch_options())
    yield url.rstrip("/")
    demo.close()


def test_the_replay_app_reads_chinese(browser, replay_app):
    with page_in(browser, replay_app, "zh-CN") as page:
        header = page.locator("#header")
        page.wait_for_function("el => el.innerText.includes('回放')", arg=header.element_handle())
        assert "条录制的记录" in header.inner_text() and "● 录制" in header.inner_text()
        page.get_by_role("tab", name=ZH["tab.hood"]).click()
        page.wait_for_function("document.querySelector('#replay-hood-plot-0 .js-plotly-plot')")
        picker = page.locator("#replay-hood")
        assert ZH["replay.picker"] in picker.inner_text()
        page.locator("#replay-hood input").click()
        options = page.locator("[role=option]").all_inner_texts()
        titles = [ZH[f"hood.{view.lesson.name}.title"] for view in VIEWS]
        shown = [o.removeprefix("✓").strip() for o in options]  # Gradio marks the selected one
        assert shown and all(any(o.startswith(title) for title in titles) for o in shown), options
        page.keyboard.press("Escape")
        assert page.locator(".recorded").filter(has_text="录制自").count() >= 1

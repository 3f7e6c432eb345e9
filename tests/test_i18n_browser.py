"""The page's language in headless Chromium at 1280x720: a zh-CN browser gets the header, the tab
names and the KV tab in Chinese, an en-US one English, ?lang=zh switches it, the header's switch
changes it live without losing what was typed (and "Copy link" keeps it), a KV error is told in
Chinese. This Chromium has no CJK font: the assertions read the DOM's text, not glyphs."""

from __future__ import annotations

import json
import re
import urllib.request
from contextlib import suppress

import pytest
from browser import BROWSER_TESTS, chromium_browser, page_in
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from playground.ui.i18n import ENGLISH, LANGUAGES

pytestmark = BROWSER_TESTS
ZH = LANGUAGES["zh"].strings
TABS = ["chat", "step", "beam", "kv", "hood", "compare"]
MAIN_TABS = ", ".join(f"#main-tabs [role=tab][data-tab-id={tab}]" for tab in TABS)  # not the rows inside
TAB_NAMES = f"() => [...document.querySelectorAll({MAIN_TABS!r})].map(tab => tab.innerText.trim())"


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def names_in(lang: str) -> list[str]:
    return [LANGUAGES[lang].strings[f"tab.{tab}"] for tab in TABS]


def wait_for_language(page, lang: str) -> None:
    """The tab names and the header (built on the server) are in `lang`, and the KV summary (built
    on the server too) when the KV tab has been opened."""
    page.wait_for_function(f"({TAB_NAMES})().join('|') === {'|'.join(names_in(lang))!r}")
    title = LANGUAGES[lang].strings["app.title"]
    page.wait_for_function("t => document.querySelector('#header')?.innerText.startsWith(t)", arg=title)
    summary = "KV 缓存：" if lang == "zh" else "KV cache:"
    page.wait_for_function(
        "t => !document.querySelector('#kv-summary') || "
        "document.querySelector('#kv-summary').innerText.trim().startsWith(t)",  # trim: hidden
        arg=summary,
    )


def open_kv(page, lang: str) -> object:
    """The KV tab, opened (its components are drawn when it first shows), its summary in `lang`."""
    page.get_by_role("tab", name=LANGUAGES[lang].strings["tab.kv"]).click()
    tab = page.locator("#tab-kv")
    tab.get_by_role("button", name=LANGUAGES[lang].strings["kv.calculate"]).wait_for()
    wait_for_language(page, lang)
    return tab


def english_left(text: str) -> list[str]:
    """The KV tab's English labels (static text of en.py whose Chinese differs) still in `text`."""
    static = [k for k, v in ENGLISH.items() if k.startswith("kv.") and "{" not in v and ZH[k] != v]
    return [ENGLISH[k] for k in static if re.search(rf"(?<![\w.]){re.escape(ENGLISH[k])}(?![\w])", text)]


def test_a_chinese_browser_gets_the_header_tabs_and_kv_tab_in_chinese(browser, launched_app):
    with page_in(browser, launched_app, "zh-CN") as page:
        wait_for_language(page, "zh")
        assert page.evaluate("() => document.documentElement.lang") == "zh-CN"
        toolbar = page.locator("#toolbar-buttons").inner_text()
        assert all(ZH[k] in toolbar for k in ("app.presenter", "app.keys", "app.copy_link")), toolbar
        assert page.locator("#language-switch input:checked").get_attribute("value") == "zh"
        assert "**模型：**" not in (header := page.locator("#header").inner_text()) and "模型：" in header
        tab = open_kv(page, "zh")
        for label in ("kv.preset", "kv.seq_len", "kv.batch", "kv.gpu", "kv.weights_dtype"):
            assert tab.get_by_label(ZH[label], exact=True).count() >= 1, label  # the inputs' names
        assert page.locator("#kv-layers thead").inner_text().split()[:3] == ["层", "类型", "KV"]
        plot = page.locator("#kv-curves .xtitle").text_content()
        assert plot == ZH["kv.plot.context"] and "2（K 和 V）×" in page.locator("#kv-formula").inner_text()
        text = tab.inner_text()
        assert english_left(text) == [] and "KV 缓存：" in text and "计算" in text


def test_an_english_browser_gets_english(browser, launched_app):
    with page_in(browser, launched_app, "en-US") as page:
        wait_for_language(page, "en")
        assert page.locator("#language-switch input:checked").get_attribute("value") == "en"
        tab = open_kv(page, "en")
        assert tab.get_by_label("Sequence length (tokens)", exact=True).count() == 1
        assert page.locator("#kv-curves .xtitle").text_content() == "context length (tokens)"
        text = tab.inner_text()
        assert not re.search(r"[\u4e00-\u9fff]", text)  # no Chinese in the tab
        assert len(english_left(text)) > 20  # the check the Chinese pages pass can fail


def test_lang_zh_in_the_address_switches_an_english_browser(browser, launched_app):
    with page_in(browser, f"{launched_app}/?lang=zh", "en-US") as page:
        wait_for_language(page, "zh")
        assert page.locator("#language-switch input:checked").get_attribute("value") == "zh"
        assert english_left(open_kv(page, "zh").inner_text()) == []


def test_the_header_switch_changes_the_language_and_keeps_what_was_typed(browser, launched_app):
    with page_in(browser, launched_app, "en-US") as page:
        wait_for_language(page, "en")
        message = page.locator("#chat-message textarea")
        message.fill("a question typed before the switch")
        tab = open_kv(page, "en")
        path = page.locator("#kv-config-path textarea, #kv-config-path input").first
        tab.get_by_text("config.json: view, edit, paste or load").click()
        path.fill("some/typed-path")
        page.locator("#language-switch").get_by_text("中文").click()
        wait_for_language(page, "zh")
        assert "lang=zh" in page.url and english_left(tab.inner_text()) == []
        assert path.input_value() == "some/typed-path"
        page.get_by_role("tab", name=ZH["tab.chat"]).click()
        assert message.input_value() == "a question typed before the switch"
        page.get_by_role("tab", name=ZH["tab.kv"]).click()
        page.locator("#copy-link").click()  # a link to this view keeps the language
        link = page.locator("#share-link textarea")
        page.wait_for_function("el => el.value.includes('tab=kv')", arg=link.element_handle())
        assert link.input_value().endswith("lang=zh")
        page.locator("#language-switch").get_by_text("English").click()
        wait_for_language(page, "en")
        assert "lang=en" in page.url and message.input_value() == "a question typed before the switch"


def test_a_kv_error_is_told_in_chinese(browser, launched_app):
    with page_in(browser, launched_app, "zh-CN") as page:
        wait_for_language(page, "zh")
        open_kv(page, "zh")
        box = page.get_by_label(ZH["kv.gpu"], exact=True)
        box.click()
        box.fill("lots")
        page.keyboard.press("Enter")
        said = "GPU 显存 必须是以 GB 计的正数"
        toast = page.locator(".toast-body").filter(has_text=said).first
        toast.wait_for()
        title = toast.locator(".toast-title")  # Gradio titles it by its type, in English: static/i18n.js
        page.wait_for_function("el => el.innerText.trim() === '警告'", arg=title.element_handle())
        assert "Warning" not in toast.inner_text()
        summary = page.locator("#kv-summary")
        page.wait_for_function("el => el.innerText.startsWith('无法计算')", arg=summary.element_handle())
        assert said in summary.inner_text() and "'lots'" in summary.inner_text()


def test_chinese_fits_the_toolbar_on_stage_and_in_the_dark(browser, launched_app):
    """Presenter mode and dark mode: the toolbar's Chinese buttons stay on one line each."""
    with page_in(browser, f"{launched_app}/?presenter=1&__theme=dark", "zh-CN") as page:
        wait_for_language(page, "zh")
        boxes = [button.bounding_box() for button in page.locator("#toolbar-buttons button").all()]
        switch = page.locator("#language-switch").bounding_box()
        assert len(boxes) == 3 and all(box["height"] < 48 for box in [*boxes, switch]), boxes
        assert max(box["y"] for box in boxes) - min(box["y"] for box in boxes) < 4  # one row


# Every tab button of the page: its tab's id (Gradio's data-tab-id) and the text it shows, with
# the buttons of a row that did not fit (Gradio's "More tabs" menu, no id: "?").
TAB_BUTTONS = """() => [...document.querySelectorAll('[role=tab], .overflow-dropdown button')]
  .filter(b => b.offsetParent).map(b => [b.dataset.tabId || '?', b.innerText.trim()])"""


def tab_keys(url: str) -> dict[str, str]:
    """Every tab of the app (the config the page starts from), by id: the key of its name."""
    with urllib.request.urlopen(f"{url}/config", timeout=30) as response:
        config = json.load(response)
    keys = {}
    for component in config["components"]:
        if component["type"] == "tabitem":
            label = component["props"]["label"]
            keys[component["props"]["id"]] = json.loads(label.removeprefix("__i18n__"))["key"]
    return keys


def visit_every_tab_row(page, keys: dict[str, str], lang: str) -> None:
    """Open each main tab, and each group of Under the hood, so that every row of tabs is drawn; each
    time, every tab button shown says its name in `lang`. Every tab of the app is seen."""
    strings = LANGUAGES[lang].strings
    expected = {tab: strings.get(key, ENGLISH[key]) for tab, key in keys.items()}
    seen: dict[str, str] = {}
    groups = [tab for tab in keys if tab.startswith("hood-group-")]
    for tab in [*TABS[: TABS.index("hood") + 1], *groups, *TABS[TABS.index("hood") + 1 :]]:
        page.locator(f"[role=tab][data-tab-id={tab!r}]").click()
        page.locator(f"[role=tab][data-tab-id={tab!r}][aria-selected=true]").wait_for()
        with suppress(PlaywrightTimeout):  # server-built names come after the page: wait a little
            page.wait_for_function(
                f"want => ({TAB_BUTTONS})().every(([id, text]) => want[id] === text)",
                arg=expected,
                timeout=10_000,
            )
        shown = page.evaluate(TAB_BUTTONS)
        wrong = [(tab, text) for tab, text in shown if expected.get(tab) != text]
        assert wrong == [], (lang, tab, wrong)
        seen.update(shown)
    assert set(seen) == set(keys)


def test_every_tab_name_follows_lang_zh_and_the_switch(browser, launched_app):
    """An en-US browser with ?lang=zh: every tab button of every row (main tabs, the groups and
    lessons of Under the hood, Compare's views), selected or not, says its name in Chinese; the
    header's switch turns them all English, and Chinese again."""
    keys = tab_keys(launched_app)
    assert len(keys) > len(TABS) + 10 and all(ZH[key] != ENGLISH[key] for key in keys.values())
    with page_in(browser, f"{launched_app}/?lang=zh", "en-US") as page:
        wait_for_language(page, "zh")
        visit_every_tab_row(page, keys, "zh")
        page.locator("#language-switch").get_by_text("English").click()
        wait_for_language(page, "en")
        visit_every_tab_row(page, keys, "en")
    with page_in(browser, launched_app, "en-US") as page:  # tabs never drawn, named anew live
        wait_for_language(page, "en")
        page.locator("#language-switch").get_by_text("中文").click()
        wait_for_language(page, "zh")
        visit_every_tab_row(page, keys, "zh")


# The model picker's box: the text it shows, the room it has, and where its text ends and the list's
# arrow starts; the toolbar's tools and the header; the window's width.
PICKER_JS = """() => {
  const input = document.querySelector('#model-picker input');
  const box = el => el.getBoundingClientRect();
  const textEnd = box(input).right - parseFloat(getComputedStyle(input).paddingRight);
  const tools = [...document.querySelectorAll('#toolbar-buttons > *')].filter(el => el.offsetParent);
  return {value: input.value, scroll: input.scrollWidth, client: input.clientWidth, textEnd,
    arrow: box(document.querySelector('#model-picker .icon-wrap')).left, picker: box(input).toJSON(),
    toolTops: tools.map(el => Math.round(box(el).top)),
    header: box(document.querySelector('#header')).toJSON(),
    lastTab: box(document.querySelector('#main-tabs [role=tab][data-tab-id=compare]')).right,
    width: innerWidth};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("presenter", [False, True])
def test_the_model_picker_shows_its_whole_choice(browser, launched_app, lang, presenter):
    """The picker's text (the model and its state, in the page's language) is whole: not cut by its
    box nor under the list's arrow, at the desk (the header and the tools still one row at 1280 px)
    and on stage (on the tab bar, clear of the tabs, inside the window); its tooltip says it too."""
    with page_in(browser, f"{launched_app}/?lang={lang}&presenter={int(presenter)}", "en-US") as page:
        wait_for_language(page, lang)
        loaded = LANGUAGES[lang].strings["picker.kind.loaded"]
        page.wait_for_function(
            "t => document.querySelector('#model-picker input').value.endsWith(' · ' + t)", arg=loaded
        )
        shown = page.evaluate(PICKER_JS)
        assert shown["value"] == f"smollm2-135m-instruct · {loaded}"
        assert shown["scroll"] <= shown["client"] and shown["textEnd"] <= shown["arrow"] + 1, shown
        if presenter:  # the free end of the tab bar
            assert shown["lastTab"] < shown["picker"]["left"] and shown["picker"]["right"] <= shown["width"]
            assert len(set(shown["toolTops"][1:])) == 1, shown  # the other tools: one row
        else:  # the tools in one row, beside the header (not under it)
            assert len(set(shown["toolTops"])) == 1 and shown["toolTops"][0] < shown["header"]["bottom"], (
                shown
            )
        page.locator("#model-picker input").hover()
        assert page.locator("#model-picker input").get_attribute("title") == shown["value"]

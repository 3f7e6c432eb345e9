"""Several models in a real headless Chromium at 1280x720, in presenter mode and in dark mode: the
toolbar's picker loads Gemma with its estimate first and then its progress, and the tab then chats on
it; Compare chat with the two models side by side (each side equal to its solo run, the parting
marked); the Tokens view under both tokenizers; a link that reopens a comparison. The app starts with
SmolLM2 alone, as ./run.sh does."""

from __future__ import annotations

import re

import pytest
from browser import BROWSER_TESTS, chromium_browser, open_page

from playground.chat import NO_TEMPLATE_NOTE, ChatRequest, run_chat
from playground.engine.sampling import SamplingSettings
from playground.models import ModelRegistry
from playground.settings import load_settings
from playground.ui.app import build_demo, launch_local, launch_options

pytestmark = BROWSER_TESTS
SMOL, GEMMA = "smollm2-135m-instruct", "gemma-3-270m"
QUESTION = "What is the capital of France?"
WAIT = 240_000  # ms: a load or a run on a shared 2-core CPU
STAGE = "?presenter=1"
DARK = "?__theme=dark"
DARK_STAGE = "?presenter=1&__theme=dark"
# The token ids of an answer as its token cards say them ("(id 504)"), in order.
CARD_IDS = (
    "sel => [...document.querySelectorAll(sel + ' .tok-card')]"
    ".map(c => c.innerText.match(/\\(id (\\d+)\\)/)[1])"
)


@pytest.fixture(scope="module")
def app(embedded_lm):
    """The app on SmolLM2, with a registry that may load more models (as ./run.sh starts it)."""
    settings = load_settings()
    registry = ModelRegistry(settings)
    demo = build_demo(embedded_lm, settings, registry=registry)
    url = launch_local(demo, **launch_options())
    yield url, registry
    demo.close()


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def pick(page, name: str) -> None:
    """Choose a model in the toolbar's list."""
    page.locator("#model-picker input").click()
    page.get_by_role("option", name=re.compile(f"^{re.escape(name)} ")).click()


def status_log(page) -> None:
    """Keep every text the picker's status line shows (window.statusLog)."""
    page.evaluate(
        """() => {
        window.statusLog = [];
        const box = document.querySelector('#model-status');
        new MutationObserver(() => window.statusLog.push(box.innerText)).observe(
          box, {childList: true, subtree: true, characterData: true});
      }"""
    )


def test_the_picker_loads_gemma_with_its_estimate_then_progress(browser, app):
    url, registry = app
    if GEMMA in registry.loaded():
        pytest.skip("Gemma is loaded already in this app: its loading can't be watched again")
    with open_page(browser, f"{url}/{DARK_STAGE}", width=1280, height=720) as page:
        picker, tabs = (page.locator(sel).bounding_box() for sel in ("#model-picker", "#main-tabs"))
        assert picker["x"] + picker["width"] <= 1280 and abs(picker["y"] - tabs["y"]) < 20  # on the tab bar
        status_log(page)
        pick(page, GEMMA)
        page.wait_for_function(
            f"() => document.querySelector('#model-status').innerText.includes('This tab uses {GEMMA}')",
            timeout=WAIT,
        )
        log = [text for text in page.evaluate("() => window.statusLog") if text.strip()]
        loading = [text for text in log if text.startswith(f"Loading {GEMMA}")]
        assert loading and "Memory estimate: gemma-3-270m: 268.1 M parameters × 4 B (float32)" in loading[0]
        assert any("from its cache" in text or "Converting" in text for text in loading)  # progress
        page.wait_for_function("() => document.querySelector('#header').innerText.includes('Gemma 3 270M')")
        header = page.locator("#header").bounding_box()
        assert header["x"] + header["width"] <= 1280 and header["height"] < 50  # one line on stage
        # Step by step starts afresh on Gemma: its own first candidate after the default prompt
        page.get_by_role("tab", name="Step by step").click()
        first = "() => document.querySelector('#step-cand-1')?.innerText.includes('the')"
        page.wait_for_function(first, timeout=WAIT)
        assert "Paris" not in page.locator("#step-cand-1").inner_text()  # SmolLM2's first candidate
    with open_page(browser, f"{url}/{DARK}", width=1280, height=720) as other:  # another tab: SmolLM2
        assert "SmolLM2-135M-Instruct" in other.locator("#header").inner_text()


def test_compare_chat_with_the_two_models_side_by_side_on_stage(browser, app, embedded_lm, gemma_lm):
    url, _ = app
    with open_page(browser, f"{url}/{STAGE}", width=1280, height=720) as page:
        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-message textarea").fill(QUESTION)
        page.locator("#compare-send").click()
        done = "x => document.querySelector(`#compare-chat-${x}-stats`)?.innerText.includes('stopped')"
        for side in "ab":
            page.wait_for_function(done, arg=side, timeout=WAIT)
        greedy = ChatRequest(
            [{"role": "user", "content": QUESTION}],
            settings=SamplingSettings(temperature=0),
            max_new_tokens=32,
        )
        for side, lm in (("a", embedded_lm), ("b", gemma_lm)):
            alone = run_chat(lm, greedy)
            assert page.evaluate(CARD_IDS, f"#compare-chat-{side}") == [
                str(t.id) for t in alone.tokens if not t.special
            ]
        assert page.locator("#compare-parting").inner_text().startswith("The answers part at character")
        assert page.locator("#compare-answers .tok-parting").count() == 2
        a, b = (page.locator(f"#compare-chat-{side}").bounding_box() for side in "ab")
        assert a["x"] + a["width"] <= b["x"] and b["x"] + b["width"] <= 1280  # side by side, in the window
        assert a["y"] < 720 and b["y"] < 720  # the answers start on the first screen of the stage
        assert NO_TEMPLATE_NOTE in page.locator("#compare-chat-b-stats").inner_text()


@pytest.mark.parametrize("mode", [STAGE, DARK])
def test_the_tokens_view_shows_both_tokenizers(browser, app, embedded_lm, gemma_lm, mode):
    url, _ = app
    text = "unbelievable 今天天气很好"
    with open_page(browser, f"{url}/{mode}", width=1280, height=720) as page:
        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-views").get_by_role("tab", name="Tokens").click()
        page.locator("#compare-tokens-text textarea").fill(text)
        page.locator("#compare-tokens-run").click()
        page.wait_for_function(
            "() => document.querySelector('#compare-tokens-ratio')?.innerText.includes('needs')", timeout=WAIT
        )
        for side, lm in (("a", embedded_lm), ("b", gemma_lm)):
            ids = lm.tokenizer(text, add_special_tokens=False).input_ids
            shown = page.locator(f"#compare-tokens-{side}-view").inner_text()
            assert f"{len(ids)} ids:" in shown and " ".join(map(str, ids)) in shown
            assert (
                page.locator(f"#compare-tokens-{side}-summary").inner_text().startswith(f"{len(ids)} tokens")
            )
            assert (
                page.locator(f"#compare-tokens-{side}-view").bounding_box()["width"] < 640
            )  # one column each


def test_a_link_reopens_a_comparison(browser, app):
    url, _ = app
    link = f"{url}/?tab=compare&view=tokens&a={SMOL}&b={GEMMA}&text=unbelievable"
    with open_page(browser, link, width=1280, height=720) as page:
        page.wait_for_function(
            "() => document.querySelector('#compare-tokens-ratio')?.innerText.includes('needs')", timeout=WAIT
        )
        assert page.locator("#compare-tokens-text textarea").input_value() == "unbelievable"
        assert (
            page.locator("#compare-tokens-a-summary").inner_text().startswith("3 tokens")
        )  # un | belie | vable


# Each entry of the toolbar picker's open list: its box, its lines, and whether points across it (left,
# middle, right) hit the entry itself (not a label drawn over it).
PICKER_ENTRIES = """() => [...document.querySelectorAll('#model-picker [role=option]')].map((li) => {
  const box = li.getBoundingClientRect(), style = getComputedStyle(li);
  const hit = (f) => document.elementFromPoint(box.left + f * box.width, box.top + box.height / 2);
  const inner = box.height - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
  return {
    text: li.innerText.trim(), left: box.left, right: box.right,
    lines: Math.round(inner / (parseFloat(style.lineHeight) || 20)),
    on: [0.1, 0.5, 0.9].every((f) => hit(f)?.closest('[role=option]') === li),
  };
})"""


@pytest.mark.parametrize("mode", [STAGE, DARK_STAGE])
def test_the_toolbar_pickers_open_list_is_on_top_of_compare_and_reads_whole(browser, app, mode):
    """On stage the picker sits at the tab bar's end, over Compare's side B: its open list was drawn
    behind side B's labels (Temperature, Seed) and wrapped each entry onto two lines."""
    url, _ = app
    with open_page(browser, f"{url}/{mode}", width=1280, height=720) as page:
        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-temperature-b").wait_for(state="visible")
        page.locator("#model-picker input").click()
        page.get_by_role("option", name=re.compile(f"^{GEMMA} ")).wait_for()
        page.wait_for_timeout(300)  # the list widened (static/app.js)
        entries = page.evaluate(PICKER_ENTRIES)
        assert len(entries) >= 2, entries
        for entry in entries:
            assert entry["on"] and entry["lines"] == 1, entry
            assert entry["left"] >= 0 and entry["right"] <= 1280, entry


TEXT_OF = "sel => document.querySelector(sel)?.innerText.trim() ?? ''"


def test_a_views_error_stays_with_its_view_and_its_next_run_clears_it(browser, app):
    """An empty Tokens text said "Error: The text is empty…" on side A's status line, and it stayed
    there through later errors of the Chat view."""
    url, _ = app
    with open_page(browser, f"{url}/", width=1280, height=720) as page:
        page.get_by_role("tab", name="Compare").click()
        views = page.locator("#compare-views")
        views.get_by_role("tab", name="Tokens").click()
        page.locator("#compare-tokens-text textarea").fill("")
        page.locator("#compare-tokens-run").click()
        shows = "([sel, text]) => document.querySelector(sel)?.innerText.includes(text)"
        page.wait_for_function(shows, arg=["#compare-tokens-ratio", "The text is empty"], timeout=WAIT)
        views.get_by_role("tab", name="Chat").click()
        page.locator("#compare-message textarea").fill("")
        page.locator("#compare-send").click()
        page.wait_for_function(shows, arg=["#compare-parting", "Empty question"], timeout=WAIT)
        for side in "ab":  # a side's line says how its model loads, nothing else
            assert page.evaluate(TEXT_OF, f"#compare-status-{side}") == ""
        views.get_by_role("tab", name="Tokens").click()
        assert "The text is empty" in page.evaluate(TEXT_OF, "#compare-tokens-ratio")  # still its own
        page.locator("#compare-tokens-text textarea").fill("unbelievable")
        page.locator("#compare-tokens-run").click()
        page.wait_for_function(shows, arg=["#compare-tokens-ratio", "needs"], timeout=WAIT)
        assert "empty" not in page.evaluate(TEXT_OF, "#compare-tokens-ratio")


def test_a_model_switch_does_not_toast_an_old_kv_refusal_again(browser, app):
    """A refused sequence length is told once; the recalculation a model switch makes (the Loaded
    model preset is the new model) marks the KV summary again, with no toast over another tab."""
    url, _ = app
    with open_page(browser, f"{url}/", width=1280, height=720) as page:
        page.get_by_role("tab", name="KV cache").click()
        box = page.get_by_label("Sequence length (tokens)")
        box.fill("-5")
        box.press("Enter")
        refused = page.locator(".toast-body").filter(has_text="Sequence length")
        refused.first.wait_for()
        page.locator(".toast-body button").first.click()  # close it
        page.wait_for_function("() => document.querySelectorAll('.toast-body').length === 0")
        page.get_by_role("tab", name="Chat").click()
        pick(page, GEMMA)
        page.wait_for_function(
            "() => document.querySelector('#header').innerText.includes('Gemma 3 270M')", timeout=WAIT
        )
        page.wait_for_timeout(3000)  # the KV tab's recalculation (no model queue) and its toast, if any
        assert refused.count() == 0
        assert "Sequence length must be a positive whole number" in page.locator("#kv-summary").inner_text()


# Each side list's text: its whole width fits in the box, before the list's arrow.
SIDE_LISTS = """() => ['model-a', 'quantize-a', 'model-b', 'quantize-b'].map((name) => {
  const input = document.querySelector(`#compare-${name} input`);
  const arrow = document.querySelector(`#compare-${name} .icon-wrap`)?.getBoundingClientRect();
  const box = input.getBoundingClientRect(), style = getComputedStyle(input);
  return {
    value: input.value, whole: input.scrollWidth <= input.clientWidth,
    clear: !!arrow && box.right - parseFloat(style.paddingRight) <= arrow.left + 1,
  };
})"""


@pytest.mark.parametrize("mode", ["", "?lang=zh", STAGE, "?lang=zh&presenter=1"])
def test_the_sides_lists_show_their_whole_choice(browser, app, mode):
    """'smollm2-135m-instruct · loaded' was cut to '…· loade▾' and 'none' touched its arrow."""
    url, _ = app
    with open_page(browser, f"{url}/{mode}", width=1280, height=720) as page:
        page.get_by_role("tab", name=re.compile("^(Compare|对比)$")).click()
        page.locator("#compare-temperature-b").wait_for(state="visible")
        page.wait_for_function(
            "() => document.querySelector('#compare-model-a input')?.value.includes(' · ')"
        )
        lists = page.evaluate(SIDE_LISTS)
        assert len(lists) == 4 and all(entry["whole"] and entry["clear"] for entry in lists), lists

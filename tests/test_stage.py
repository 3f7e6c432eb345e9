"""On stage: presenter mode at 1280x720, dark mode, shareable links, errors that leave the inputs
usable, keyboard control, and the same greedy answer in every tab. Headless Chromium."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from browser import BROWSER_TESTS, chromium_browser, missing_glyphs, open_page, overflowing
from playwright.sync_api import Error as PlaywrightError
from stage_checks import assert_plots_clear, open_card

from playground.errors import PlaygroundError
from playground.ui.i18n import ENGLISH
from playground.ui.links import make_query, read_link
from playground.ui.step_render import LEDGER_COLUMNS

pytestmark = BROWSER_TESTS
VIEWPORT = {"width": 1280, "height": 720}
CAPITAL = "What is the capital of France?"
SELECTED_STEP_TAB = (
    "() => document.querySelector('[role=tab][aria-selected=true]')?.innerText.includes('Step by step')"
)


def box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def assert_in_viewport(page, selector: str) -> None:
    """The element is fully on screen without scrolling."""
    rect = page.evaluate(
        "sel => { const r = document.querySelector(sel).getBoundingClientRect();"
        " return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right}; }",
        selector,
    )
    assert rect["top"] >= 0 and rect["bottom"] <= VIEWPORT["height"], (selector, rect)
    assert rect["left"] >= 0 and rect["right"] <= VIEWPORT["width"], (selector, rect)


def wait_for_status(page, selector: str, text: str, timeout: int = 240_000) -> None:
    page.wait_for_function(
        "([sel, text]) => document.querySelector(sel)?.innerText.includes(text)",
        arg=[selector, text],
        timeout=timeout,
    )


# --- links: pure functions first ----------------------------------------------------------------------


def test_a_link_round_trips_and_bad_values_are_named():
    values = {
        "prompt": "Hi",
        "chat": True,
        "temperature": 0.7,
        "top_k": 5.0,
        "path": [12, 7],
        "order": ["top_p"],
    }
    query = make_query("step", values)
    link = read_link({key: value[0] for key, value in parse_qs(query).items()})
    assert link.tab == "step" and link.runs
    assert link.values == {
        "prompt": "Hi",
        "chat": True,
        "temperature": 0.7,
        "top_k": 5,
        "path": [12, 7],
        "order": ["top_p"],
    }
    assert read_link({}) is None
    for query, message in [
        ({"tab": "nowhere"}, "tab='nowhere' is not a tab"),
        ({"tab": "step", "t": "hot"}, "t='hot' is not allowed: temperature must be a number"),
        ({"tab": "step", "path": "1,x"}, "path='1,x'"),
        ({"tab": "step", "order": "top_p,magic"}, "order='top_p,magic'"),
        ({"tab": "chat", "t": "inf"}, "t='inf'"),
    ]:
        with pytest.raises(PlaygroundError, match=message):
            read_link(query)


# --- the browser ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    with chromium_browser() as browser:
        yield browser


def test_presenter_mode_fits_each_tabs_main_visual_and_controls_in_1280x720(browser, launched_app):
    with open_page(browser, f"{launched_app}/?presenter=1", **VIEWPORT) as page:
        check_presenter_layout(page)


def test_on_stage_a_long_step_path_shows_its_newest_lines_and_the_chart_stays_in_view(browser, launched_app):
    with open_page(browser, f"{launched_app}/?tab=step", **VIEWPORT) as page:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        page.get_by_label("force text").fill(
            "\n\n1. A robot may not injure a human being.\n2. A robot must obey\n3."
        )
        page.get_by_role("button", name="Force", exact=True).click()
        page.wait_for_function("document.querySelector('#step-text').innerText.includes('must obey')")
        page.locator("#step-status").click()  # no text box has the focus: keys work
        page.keyboard.press("p")
        page.wait_for_function("document.body.classList.contains('presenter')")
        before = page.locator("#step-status").inner_text()
        page.keyboard.press("n")  # a greedy step re-renders the text on stage
        page.wait_for_function(
            "text => document.querySelector('#step-status').innerText !== text", arg=before
        )
        page.wait_for_timeout(800)  # the chart fits itself to the room left
        for selector in ("#step-chart", "#step-greedy", "#step-cand-1", "#step-text"):
            assert_in_viewport(page, selector)
        scroll = page.evaluate(
            "(() => { const s = document.querySelector('#step-text .token-stream');"
            " return [s.scrollTop, s.scrollHeight, s.clientHeight]; })()"
        )
        assert scroll[1] > scroll[2] and scroll[0] + scroll[2] >= scroll[1] - 2, scroll  # at its end


# On stage, the chat answer's box and its last token, and the conversation box and its last question.
CHAT_ON_STAGE_JS = """() => {
  const stream = document.querySelector('#chat-tokens .answer-tokens');
  const box = stream.getBoundingClientRect(), last = [...stream.querySelectorAll('.tok')].at(-1);
  const bot = document.querySelector('#chat-bot .bubble-wrap').getBoundingClientRect();
  const question = [...document.querySelectorAll('#chat-bot .user-row')].at(-1).getBoundingClientRect();
  return {box: box.bottom, last: last.getBoundingClientRect().bottom,
          scrolls: stream.scrollHeight > stream.clientHeight, bot: [bot.top, bot.bottom],
          question: [question.top, question.bottom]};
}"""


def test_on_stage_a_chat_answer_keeps_its_newest_line_and_its_question_in_view(browser, launched_app):
    """A long answer on stage: its box ends above the window's bottom with the newest line in it (the
    status line above grows when the answer ends), and the short conversation box shows the question."""
    question = "Tell me about the history of the printing press."
    query = make_query("chat", {"message": question, "temperature": 0.0, "max_new_tokens": 120})
    with open_page(browser, f"{launched_app}/?presenter=1&{query}", **VIEWPORT) as page:
        wait_for_status(page, "#chat-status", "stopped")
        page.wait_for_timeout(1000)  # the footer lands in the conversation, the box refits
        shown = page.evaluate(CHAT_ON_STAGE_JS)
        assert shown["scrolls"] and shown["box"] <= VIEWPORT["height"], shown
        assert shown["last"] <= shown["box"] + 1, shown  # the newest line is not cut off
        (top, bottom), (q_top, q_bottom) = shown["bot"], shown["question"]
        assert top - 1 <= q_top and q_bottom <= bottom + 1, shown  # the question, whole, in its box
        assert question in page.locator("#chat-bot").inner_text()


def test_token_cards_stay_in_the_window_and_take_their_own_clicks(browser, launched_app):
    """At the desk a card near the right edge opens over the sidebar and keeps its clicks; on stage a
    long answer scrolls in its box and a card at its end opens inside the window: its fifth
    alternative forks the answer with a real click."""
    query = make_query(
        "chat",
        {"message": "Write two long sentences about the sea.", "temperature": 0.0, "max_new_tokens": 48},
    )
    with open_page(browser, f"{launched_app}/?{query}", **VIEWPORT) as page:
        wait_for_status(page, "#chat-status", "stopped")
        tokens = page.locator("#chat-tokens .answer-tokens > .tok")
        rights = tokens.evaluate_all(  # of the tokens on one line
            "ts => ts.map(t => t.getClientRects().length === 1 ? t.getBoundingClientRect().right : 0)"
        )
        rightmost = tokens.nth(rights.index(max(rights)))
        view = box(page, "#chat-tokens")
        assert open_card(page, rightmost)["right"] > view["x"] + view["width"]  # over the sidebar
        page.keyboard.press("Escape")

        page.locator("#presenter-toggle").click()
        page.wait_for_function("document.body.classList.contains('presenter')")
        page.wait_for_timeout(500)
        assert_in_viewport(page, "#chat-tokens .answer-tokens")  # a scrolling box down to the bottom
        last = tokens.last
        card = open_card(page, last)
        assert card["fontSize"] >= 18 and len(card["buttons"]) == 6, card
        fifth = last.locator(".tok-alt").nth(4)
        chosen = fifth.inner_text().split()[1]
        spot = fifth.bounding_box()
        page.mouse.click(spot["x"] + spot["width"] / 2, spot["y"] + spot["height"] / 2)
        wait_for_status(page, "#chat-status", "given tokens first · stopped")
        assert chosen.replace("␣", "") in page.locator("#chat-tokens .answer-tokens").inner_text()


def test_copy_link_floats_over_the_page_and_closes(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        assert overflowing(page, "#header .model-info") == []  # a long header line wraps, never cut
        toggle = page.locator("#presenter-toggle")
        assert toggle.get_attribute("aria-pressed") == "false"
        assert toggle.evaluate("b => b.scrollWidth <= b.clientWidth")  # its label fits its button
        tabs_top = box(page, "[role=tablist]")["y"]
        link = page.locator("#share-link textarea, #share-link input").first
        page.locator("#copy-link").click()
        page.wait_for_function(
            "() => (document.querySelector('#share-link textarea, #share-link input')?.value || '')"
            ".includes('tab=chat')"
        )
        assert link.is_visible() and box(page, "[role=tablist]")["y"] == tabs_top  # nothing moved
        page.locator("#chat-message textarea").click()  # a click elsewhere closes it
        link.wait_for(state="hidden")
        page.locator("#copy-link").click()
        link.wait_for(state="visible")
        page.mouse.move(5, 5)
        link.wait_for(state="hidden", timeout=15_000)  # and so do a few seconds without the pointer
        toggle.click()
        assert toggle.get_attribute("aria-pressed") == "true"
        assert toggle.evaluate("b => b.scrollWidth <= b.clientWidth")  # stage-sized, still inside


def test_on_stage_a_40_token_path_keeps_a_label_on_every_chart_row(browser, launched_app, embedded_lm):
    text = " the old lighthouse keeper climbed the stairs every night, counting each step aloud as"
    text += " the storm rolled in from the grey sea and the gulls went quiet over the harbour wall,"
    text += " and the town below slept on."
    ids = embedded_lm.tokenizer(text, add_special_tokens=False).input_ids[:40]
    assert len(ids) == 40
    query = make_query("step", {"prompt": "Once upon a time,", "path": ids})
    with open_page(browser, f"{launched_app}/?{query}&presenter=1", **VIEWPORT) as page:
        page.wait_for_function(SELECTED_STEP_TAB)
        page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 40")
        page.wait_for_timeout(1000)  # the chart fits itself to the room left
        assert_in_viewport(page, "#step-chart")
        wait_for_ranks(page, "1,2,3,4,5")  # the five the buttons show, best on top, each labelled
        page.locator("#step-status").click()
        page.keyboard.press("p")  # at the desk: all ten rows again
        wait_for_ranks(page, "1,2,3,4,5,6,7,8,9,10")


# The chart's row labels top to bottom, as ranks ("1. ␣Paris" -> 1).
CHART_RANKS_JS = """() => [...document.querySelectorAll('#step-chart .ytick text')]
  .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)
  .map(t => parseInt(t.textContent))"""


def wait_for_ranks(page, ranks: str) -> None:
    try:
        page.wait_for_function(f"({CHART_RANKS_JS})().join() === '{ranks}'", timeout=30_000)
    except PlaywrightError:
        raise AssertionError(f"chart rows {page.evaluate(CHART_RANKS_JS)}, wanted {ranks}") from None


def test_plots_at_the_desk_have_room_and_clear_legends(browser, launched_app):
    for width, height in ((1280, 720), (1920, 1080)):
        with open_page(browser, f"{launched_app}/?tab=kv", width=width, height=height) as page:
            page.get_by_role("tab", name="KV cache").click()
            page.locator("#kv-curves .js-plotly-plot").wait_for()
            page.wait_for_timeout(800)
            area = page.evaluate("document.querySelector('#kv-curves .js-plotly-plot')._fullLayout._size")
            assert area["w"] >= 400 and area["h"] >= 250, area  # was about 160 x 110 px
            assert_plots_clear(page)
            page.get_by_role("tab", name="Step by step").click()
            # the page load's step session waits its turn in the model queue (a full suite's shared
            # app may still be busy with an earlier test's work): say what the tab shows if it never opens
            try:
                page.locator("#step-cand-1").wait_for(state="visible", timeout=180_000)
            except PlaywrightError:
                raise AssertionError(
                    f"no step session: {page.locator('#step-status').inner_text()!r}"
                ) from None
            page.locator("#step-greedy").click()
            page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 1")
            page.wait_for_timeout(800)
            assert_plots_clear(page)


def check_presenter_layout(page) -> None:
    page.wait_for_function("document.body.classList.contains('presenter')")  # the app's script ran
    check_stage_header(page)
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#step-cand-1").wait_for(state="visible")
    page.locator("#step-status").click()  # no text box has the focus: keys work
    page.keyboard.press("n")  # one token: its card
    page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 1")
    page.wait_for_timeout(800)  # the chart fits itself to the room left
    for selector in (
        "#step-chart",
        "#step-cand-1",
        "#step-greedy",
        "#step-undo",
        "#step-sample",
        "#step-text",
    ):
        assert_in_viewport(page, selector)
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('#step-text .token-stream')).fontSize)"
    )
    assert size >= 24
    assert_plots_clear(page)
    assert open_card(page, page.locator("#step-text .step-text .tok").first)["fontSize"] >= 18
    page.keyboard.press("Escape")

    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-message textarea").fill(CAPITAL)
    page.get_by_label("Temperature").first.fill("0")
    page.locator("#chat-send").click()
    wait_for_status(page, "#chat-status", "stopped")
    for selector in ("#chat-tokens .answer-tokens", "#chat-send", "#chat-message", "#chat-stop"):
        assert_in_viewport(page, selector)
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('#chat-tokens .answer-tokens .tok')).fontSize)"
    )
    assert size >= 24
    for token in (
        page.locator("#chat-tokens .answer-tokens > .tok").first,
        page.locator("#chat-tokens .answer-tokens > .tok").last,
    ):
        card = open_card(page, token)  # inside the window, each of its 6 buttons reachable
        assert card["fontSize"] >= 18 and len(card["buttons"]) == 6, card
        page.keyboard.press("Escape")

    page.get_by_role("tab", name="Beam search").click()
    page.get_by_role("button", name="Run beam search").click()
    wait_for_status(page, "#beam-status", "stopped:")
    # The tree is drawn again for the room on stage once the browser has told its size (beam.js).
    page.wait_for_function(
        "document.querySelector('#beam-plot .js-plotly-plot')?.layout?.meta?.beam_view?.room > 0",
        timeout=60_000,
    )
    page.wait_for_timeout(800)
    for selector in ("#beam-plot", "#beam-prompt"):
        assert_in_viewport(page, selector)
    assert_plots_clear(page)

    page.get_by_role("tab", name="KV cache").click()
    page.locator("#kv-summary").wait_for()
    page.wait_for_timeout(800)  # the curves fit themselves to the room left, once their tab shows
    for selector in ("#kv-summary", "#kv-curves"):
        assert_in_viewport(page, selector)
    assert_plots_clear(page)  # titles whole, legends clear of the axis titles and of the labels
    assert page.locator("#presenter-toggle").get_attribute("aria-pressed") == "true"
    page.keyboard.press("p")  # the p key leaves presenter mode
    assert not page.evaluate("document.body.classList.contains('presenter')")
    assert "presenter" not in page.url
    assert page.locator("#presenter-toggle").get_attribute("aria-pressed") == "false"


def check_stage_header(page) -> None:
    """On stage the header is one line of text that reads from the back (18 px or more)."""
    header = page.evaluate(
        "(() => { const h = document.querySelector('#header .md'); const i = h.querySelector('.model-info');"
        " return {height: h.getBoundingClientRect().height, size: parseFloat(getComputedStyle(i).fontSize),"
        " line: parseFloat(getComputedStyle(i).lineHeight) || 1.5 * parseFloat(getComputedStyle(i).fontSize),"
        " title: h.querySelector('h2').getBoundingClientRect().top,"
        " info: i.getBoundingClientRect().top}; })()"
    )
    assert header["size"] >= 18 and abs(header["title"] - header["info"]) < header["line"], header
    assert header["height"] < 2 * header["line"], header  # one line


def test_the_header_is_whole_at_1280_at_the_desk_and_on_stage(browser, launched_app):
    """Issue 33, item 8: the model line wraps at the desk; on stage it is the model's name, the rest in
    its tooltip; nothing is cut at the edge, and no character shows as a box."""
    for presenter in (False, True):
        with open_page(browser, f"{launched_app}/?presenter={int(presenter)}", **VIEWPORT) as page:
            page.wait_for_function(
                f"document.body.classList.contains('presenter') === {str(presenter).lower()}"
            )
            assert overflowing(page, "#header .md, #header .md *") == [], presenter
            line = page.locator("#header .model-info").first
            tooltip = line.get_attribute("title")
            assert all(
                part in tooltip for part in ("Model: SmolLM2", "M parameters", "loaded in", "context 8,192")
            )
            shown = page.locator("#header").inner_text()
            if presenter:
                assert "SmolLM2" in shown and "parameters" not in shown  # the details are in the tooltip
            else:
                assert "loaded in" in shown and "context 8,192 tokens" in shown  # the whole line, wrapped
            assert missing_glyphs(page.locator("#header")) == []


def test_dark_mode_plots_and_token_colours(browser, launched_app):
    with open_page(browser, f"{launched_app}/?__theme=dark", **VIEWPORT) as page:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        page.locator("#step-greedy").click()
        page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 1")
        page.wait_for_timeout(800)
        backgrounds = page.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent)"
            ".map(g => getComputedStyle(g.querySelector('.main-svg')).backgroundColor"
            " + '|' + g._fullLayout.paper_bgcolor)"
        )
        assert backgrounds and not any("255, 255, 255" in b for b in backgrounds), backgrounds
        contrast = page.evaluate(CONTRAST_JS, "#step-text .tok, .tok-legend .tok")
        assert contrast and min(contrast) >= 4.5, contrast  # WCAG AA for normal text


CONTRAST_JS = """sel => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const linear = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = c => { const [r, g, b] = c.map(linear); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  return [...document.querySelectorAll(sel)].filter(e => e.offsetParent).map(e => {
    const s = getComputedStyle(e); const a = lum(rgb(s.color)), b = lum(rgb(s.backgroundColor));
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  });
}"""


def test_light_mode_token_colours_keep_their_contrast(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        contrast = page.evaluate(CONTRAST_JS, ".tok-legend .tok")
        assert len(contrast) == 5 and min(contrast) >= 4.5, contrast


def test_a_shared_link_reopens_the_same_step_session(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        for key in ("2", "n", "n"):
            before = page.locator("#step-text .step-text .tok").count()
            page.keyboard.press(key)
            page.wait_for_function(
                "n => document.querySelectorAll('#step-text .step-text .tok').length === n + 1", arg=before
            )
        text = page.locator("#step-text").inner_text()
        page.locator("#copy-link").click()
        link_box = page.locator("#share-link textarea, #share-link input").first
        link_box.wait_for()
        page.wait_for_function(
            "() => (document.querySelector('#share-link textarea, #share-link input')?.value || '')"
            ".includes('tab=step')"
        )
        link = link_box.input_value()
    assert urlparse(link).query.startswith("tab=step") and "path=" in link
    with open_page(browser, link, **VIEWPORT) as page:
        page.wait_for_function(SELECTED_STEP_TAB)
        page.wait_for_function("document.querySelectorAll('#step-text .step-text .tok').length === 3")
        assert page.locator("#step-text").inner_text() == text


def test_a_shared_link_reopens_the_same_seeded_chat_answer(browser, launched_app):
    query = make_query(
        "chat", {"message": "Write one word.", "temperature": 1.0, "seed": "77", "max_new_tokens": 12}
    )
    answers = []
    for _ in range(2):
        with open_page(browser, f"{launched_app}/?{query}", **VIEWPORT) as page:
            wait_for_status(page, "#chat-status", "stopped")
            assert "seed 77" in page.locator("#chat-status").inner_text()
            answers.append(page.locator("#chat-tokens .answer-tokens").inner_text())
    assert answers[0] == answers[1] and answers[0]


def test_an_error_leaves_the_input_clickable_and_says_why(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        page.locator("#chat-message textarea").fill("")
        page.locator("#chat-send").click()
        page.get_by_text("Empty message: type something to send.").first.wait_for()
        box_ = page.locator("#chat-message")
        assert box_.locator(".error").count() == 0  # no error pill over the input
        page.locator("#chat-message textarea").click()  # would fail if something covered it
        page.locator("#chat-message textarea").fill("Still usable")
        assert page.locator("#chat-message textarea").input_value() == "Still usable"
        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        page.get_by_role("button", name="Pick", exact=True).click()  # no token id typed
        page.get_by_text("Type a token id to pick").first.wait_for()
        assert page.locator("#step-prompt .error").count() == 0
        page.locator("#step-prompt textarea").fill("Usable again")
        assert page.locator("#step-prompt textarea").input_value() == "Usable again"


def test_keyboard_help_overlay_opens_and_closes(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("?")
        help_box = page.locator("#keys-help")
        help_box.wait_for(state="visible")
        assert "next token" in help_box.inner_text() and "presenter mode" in help_box.inner_text()
        page.keyboard.press("Escape")
        help_box.wait_for(state="hidden")
        page.keyboard.press("]")  # next tab
        page.wait_for_function(SELECTED_STEP_TAB)


def test_chat_step_and_beam_all_answer_paris_greedily_with_their_defaults(browser, launched_app):
    with open_page(browser, launched_app, **VIEWPORT) as page:
        page.locator("#chat-message textarea").fill(CAPITAL)
        page.get_by_label("Temperature").first.fill("0")
        page.locator("#chat-send").click()
        wait_for_status(page, "#chat-status", "stopped")
        assert "Paris" in page.locator("#chat-tokens .answer-tokens").inner_text()

        page.get_by_role("tab", name="Step by step").click()
        page.locator("#step-cand-1").wait_for(state="visible")
        page.locator("#step-prompt textarea").fill(CAPITAL)
        page.get_by_label(ENGLISH["step.chat"], exact=True).check()
        page.get_by_role("button", name="Start").click()
        page.wait_for_function("document.querySelector('#step-status')?.innerText.startsWith('Prompt:')")
        page.wait_for_timeout(500)
        for done in range(1, 8):
            page.locator("#step-greedy").click()
            page.wait_for_function(
                "n => document.querySelectorAll('#step-text .step-text .tok').length === n", arg=done
            )
        assert "Paris" in page.locator("#step-text .step-text").inner_text()

        page.get_by_role("tab", name="Beam search").click()
        page.locator("#beam-prompt textarea").fill(CAPITAL)
        page.get_by_label("Chat template").check()
        page.get_by_role("button", name="Run beam search").click()
        wait_for_status(page, "#beam-status", "stopped:")
        assert "Paris" in page.locator("#beam-status").inner_text()


assert json  # traces below use it


def test_replay_on_stage_fits_the_chat_tokens_and_the_ledger_has_its_headers(browser, replay_app):
    with open_page(browser, f"{replay_app}/?presenter=1", **VIEWPORT) as page:
        page.wait_for_function("document.querySelector('#chat-tokens .answer-tokens .tok')")
        page.wait_for_timeout(500)
        check_stage_header(page)
        assert_in_viewport(page, "#chat-tokens .answer-tokens")
        open_card(page, page.locator("#chat-tokens .answer-tokens > .tok").last)
        page.get_by_role("tab", name="Step by step").click()
        page.wait_for_function("document.querySelector('#step-text .step-text .tok')")
        headers = page.evaluate(
            "[...document.querySelectorAll('.table-wrap thead th, table thead th')]"
            ".map(th => th.innerText.trim()).filter(Boolean)"
        )
        assert headers[: len(LEDGER_COLUMNS)] == LEDGER_COLUMNS, headers  # not "1 2 3 … 10"

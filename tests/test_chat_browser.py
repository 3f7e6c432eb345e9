"""The Chat tab in a real headless Chromium: after Undo nothing brings back an undone turn, a
message that gets no answer goes back in the box, user text shows as typed, nothing covers the
conversation, and a value typed outside a slider's range is named."""

from __future__ import annotations

import pytest
from browser import BROWSER_TESTS, browser_page

pytestmark = BROWSER_TESTS

FRANCE, ITALY = "What is the capital of France?", "What is the capital of Italy?"
TOKENS = "#chat-tokens .answer-tokens"


@pytest.fixture(scope="module")
def page(launched_app):
    with browser_page(launched_app, 1280, 720) as page:
        page.get_by_role("tab", name="Chat").click()
        set_slider(page, "Temperature", "0")
        set_slider(page, "Max new tokens", "12")
        yield page


def set_slider(page, label: str, value: str) -> None:
    page.get_by_label(label).first.fill(value)
    page.keyboard.press("Tab")


def wait_status(page, test: str, arg=None) -> None:
    """Wait until the chat's status line passes test (a JS expression on s, its text, and arg)."""
    page.wait_for_function(
        f"arg => {{ const s = document.querySelector('#chat-status')?.innerText || ''; return {test}; }}",
        arg=arg,
        timeout=180_000,
    )


def idle(page) -> None:
    """Wait until the tab's last event has ended (a Send while one runs is ignored: trigger "once")."""
    page.wait_for_function(
        "() => { const w = document.querySelector('#chat-status .wrap');"
        " return !w || !['generating', 'pending'].some(c => w.classList.contains(c)); }",
        timeout=180_000,
    )


def page_idle(page) -> None:
    """Wait until no event of the page runs (a Stop's own event may outlast the stream it stopped)."""
    page.wait_for_function(
        "() => !document.querySelector('.wrap.generating, .wrap.pending')", timeout=180_000
    )


def send(page, message: str) -> None:
    """Send a message and wait for this answer's own statistics, its footer, and the event's end."""
    idle(page)
    before = page.locator("#chat-status").inner_text()
    page.locator("#chat-message textarea").fill(message)
    page.locator("#chat-send").click()
    wait_status(page, "s !== arg && s.includes('stopped')", before)
    page.wait_for_function(  # the chat paints the message and the answer's footer after the status
        "text => { const m = [...document.querySelectorAll('#chat-bot .message:is(.user, .bot)')];"
        " return m.length > 1 && m.at(-1).innerText.includes('stopped:')"
        " && m.at(-2).innerText.trim() === text; }",
        arg=message,
        timeout=60_000,
    )
    idle(page)


def clear(page) -> None:
    """Clear the chat and wait until it is empty (so its reply cannot empty a box filled later)."""
    page.locator("#chat-clear").click()
    page.wait_for_function(
        "() => !document.querySelector('#chat-bot .message')"
        " && !document.querySelector('#chat-status').innerText"
    )


def chat_text(page) -> str:
    return page.locator("#chat-bot").inner_text()


def test_after_undo_no_fork_template_or_branch_brings_back_the_undone_turn(page):
    clear(page)
    send(page, FRANCE)
    france = page.locator(TOKENS).inner_text()
    send(page, ITALY)
    assert "Rome" in chat_text(page)
    page.locator("#chat-undo").click()
    page.wait_for_function(  # the France answer is the last again: its tokens are shown
        "text => document.querySelector('#chat-tokens .answer-tokens')?.innerText === text", arg=france
    )
    assert page.locator("#chat-message textarea").input_value() == ITALY
    assert "Italy" not in chat_text(page)

    page.get_by_label("Show templated token stream").check()  # on and off: still the France turn
    page.wait_for_function("() => !!document.querySelector('#chat-tokens .tok-prompt')")
    templated = page.locator("#chat-tokens").inner_text()
    assert "France" in templated and "Italy" not in templated and "Rome" not in templated
    page.get_by_label("Show templated token stream").uncheck()
    page.wait_for_function(
        "text => document.querySelector('#chat-tokens .answer-tokens')?.innerText === text", arg=france
    )

    token = page.locator(f"{TOKENS} > .tok").nth(2)
    token.click()  # pins its card: the alternatives are buttons
    token.locator(".tok-alt").nth(1).click()
    wait_status(page, "s.includes('given tokens first · stopped')")
    assert "prompt 37 tokens" in page.locator("#chat-status").inner_text()  # not the undone 62
    shown = chat_text(page)
    assert FRANCE in shown and "Italy" not in shown and "Rome" not in shown
    assert page.locator("#chat-bot .message.user").count() == 1

    page.locator("#chat-branch input").click()
    page.get_by_role("option").first.click()  # the original France answer
    page.wait_for_function(
        "text => document.querySelector('#chat-tokens .answer-tokens')?.innerText === text", arg=france
    )
    assert "Italy" not in chat_text(page)

    before = page.locator("#chat-status").inner_text()
    page.locator("#chat-retry").click()  # greedy: the same France answer, and still no Italy
    wait_status(page, "s !== arg && s.includes('stopped') && !s.includes('given')", before)
    assert page.locator("#chat-bot .message.user").count() == 1 and "Italy" not in chat_text(page)


def test_undo_clear_or_stop_while_an_answer_streams_never_leaves_a_stale_answer(page):
    """Gradio may still deliver a stopped stream's last update: it must never land after the
    button's own result (an undone answer painted back, a Stop mark overwritten)."""
    set_slider(page, "Max new tokens", "200")
    story = "Write a long story about a cat."
    for button in ("#chat-undo", "#chat-clear", "#chat-stop"):
        clear(page)
        idle(page)
        page.locator("#chat-message textarea").fill(story)
        page.locator("#chat-send").click()
        wait_status(page, "(m => m && +m[1] >= 5)(s.match(/generated (\\d+) tokens/))")  # streaming
        page.locator(button).click()
        idle(page)
        page.wait_for_timeout(1500)  # a stale update would have landed by now
        messages = page.locator("#chat-bot .message:is(.user, .bot)").count()
        status = page.locator("#chat-status").inner_text()
        assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").all_inner_texts()
        if button == "#chat-stop":  # the cut-off answer as the tab kept it, marked
            assert (
                messages == 2 and status.endswith("stopped: by you") and "stopped: by you" in chat_text(page)
            )
            generated = int(status.split("generated ")[1].split(" token")[0])
            assert page.locator(f"{TOKENS} > .tok").count() == generated
        else:
            assert messages == 0 and status == ""
            box = page.locator("#chat-message textarea").input_value()
            assert box == (story if button == "#chat-undo" else "")
    set_slider(page, "Max new tokens", "12")


def test_a_message_that_gets_no_answer_goes_back_in_the_box_and_the_status_says_why(page):
    too_long = "word " * 9000
    clear(page)
    page.locator("#chat-message textarea").fill(too_long)
    page_idle(page)  # after the last test's Stop: a Send while its event runs would be ignored
    page.locator("#chat-send").click()
    wait_status(page, "s.startsWith('Not answered: Prompt too long')")
    assert page.get_by_text("Prompt too long").first.is_visible()  # the toast
    assert page.locator("#chat-message textarea").input_value() == too_long
    assert page.locator("#chat-bot .message").count() == 0

    long_prompt = "Summarize: " + "the cat sat on the mat. " * 500  # 3,500 tokens: several chunks
    page.locator("#chat-message textarea").fill(long_prompt)
    idle(page)  # the refused Send has ended
    page.locator("#chat-send").click()
    wait_status(page, "s.startsWith('Reading the prompt')")
    assert page.locator("#chat-message textarea").input_value() == ""  # it moved into the chat
    page.locator("#chat-stop").click()
    wait_status(page, "s === 'Stopped before the first token: your message is back in the box.'")
    assert page.locator("#chat-message textarea").input_value() == long_prompt
    assert page.locator("#chat-bot .message").count() == 0


def test_user_text_is_shown_as_typed_and_nothing_covers_the_conversation(page):
    typed = "**bold** <img src=x onerror=alert(1)> $$x^2$$"
    clear(page)
    send(page, typed)
    user = page.locator("#chat-bot .message.user").first
    assert user.inner_text().strip() == typed
    assert user.locator("strong, img, .katex").count() == 0
    first = page.locator("#chat-bot .message").first.bounding_box()
    for label in page.locator("#chat-bot label, #chat-bot [data-testid=block-label]").all():
        box = label.bounding_box()
        assert box is None or box["y"] + box["height"] <= first["y"], "a label lies over the conversation"


def test_a_value_typed_outside_a_sliders_range_is_named(page):
    set_slider(page, "Temperature", "5")
    page.get_by_text("Temperature 5 is outside its range 0–2: set to 2.").first.wait_for()
    assert page.get_by_label("Temperature").first.input_value() == "2"
    set_slider(page, "Temperature", "0")


def test_retry_and_undo_keep_what_was_typed_in_the_box_since(page):
    clear(page)
    send(page, FRANCE)
    page.locator("#chat-message textarea").fill("typed since")
    before = page.locator("#chat-status").inner_text()
    page.locator("#chat-retry").click()  # the France answer again; the box is not touched
    wait_status(page, "s !== arg && s.includes('stopped')", before)
    idle(page)
    assert page.locator("#chat-message textarea").input_value() == "typed since"
    page.locator("#chat-undo").click()  # the undone message goes back, before what was typed
    page.wait_for_function("() => !document.querySelector('#chat-bot .message')")
    assert page.locator("#chat-message textarea").input_value() == f"{FRANCE}\ntyped since"


def test_retry_keeps_the_answer_branches_in_their_list(page):
    """An answer forked at a token, then retried: the branch list stays, with the first answer and
    its fork (greedy: the retry is the first answer again, its branch chosen)."""
    clear(page)
    send(page, FRANCE)
    token = page.locator(f"{TOKENS} > .tok").nth(2)
    token.click()
    token.locator(".tok-alt").nth(1).click()
    wait_status(page, "s.includes('given tokens first · stopped')")
    idle(page)
    assert branch_choices(page) == 2
    before = page.locator("#chat-status").inner_text()
    page.locator("#chat-retry").click()
    wait_status(page, "s !== arg && s.includes('stopped') && !s.includes('given')", before)
    idle(page)
    assert page.locator("#chat-branch").is_visible() and branch_choices(page) == 2
    assert page.locator("#chat-bot .message.user").count() == 1


def branch_choices(page) -> int:
    """How many answers the branch list offers (opened, counted, closed)."""
    page.locator("#chat-branch input").click()
    count = page.get_by_role("option").count()
    page.keyboard.press("Escape")
    return count


def test_an_answer_cut_inside_a_code_block_keeps_its_statistics_below_the_block(page):
    """Cut by max new tokens inside a ``` block: the block is closed, the statistics line is a line of
    its own under it (not raw "<sub>— …" text inside the code)."""
    clear(page)
    send(page, "Write a Python function that adds two numbers.")  # 12 tokens: "```python\ndef add…"
    answer = page.locator("#chat-bot .message.bot").last
    code = answer.locator("pre").first
    inside = code.inner_text()
    assert "def add" in inside and "— prompt" not in inside and "<sub>" not in inside
    footer = answer.locator("sub").last
    assert footer.inner_text().startswith("— prompt") and "stopped: max new tokens" in footer.inner_text()
    assert footer.bounding_box()["y"] >= code.bounding_box()["y"] + code.bounding_box()["height"] - 1

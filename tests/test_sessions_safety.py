"""Sessions never step on each other: a chat answer at a time per tab, Stop and a closed tab
cancel the model's work, a fork never copies a cache in use, a released key stays released, and
remembered rows are counted at their own size."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from playground.chat import ChatRequest, ChatSession
from playground.engine.kv_store import REMEMBERED_LOGITS, CacheEntry, KVStore
from playground.engine.sampling import SamplingSettings
from playground.errors import Cancelled, PlaygroundError
from playground.settings import load_settings
from playground.step import StepSession
from playground.ui.chat_tab import ChatHandlers
from playground.workspace import Workspaces

GREEDY = SamplingSettings(temperature=0)


def ask(text: str, tokens: int = 8) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], settings=GREEDY, max_new_tokens=tokens)


def test_a_second_answer_in_the_same_tab_is_refused_while_one_runs(tiny_lm):
    session = ChatSession(tiny_lm)
    first = session.answer(ask("Hello there", 20), 64)
    next(first)  # running
    with pytest.raises(PlaygroundError, match="still being written"):
        next(session.answer(ask("Hi"), 64))
    with pytest.raises(PlaygroundError, match="still being written"):
        next(session.fork(0, 5, 64))
    for _ in first:  # the first answer is unharmed and ends
        pass
    assert [b.length for b in session.branches()] == [20]
    assert list(session.answer(ask("Hi"), 64))[-1].finished  # free again


def test_stop_cancels_a_long_prefill_within_a_second_and_frees_the_tab(embedded_lm):
    session = ChatSession(embedded_lm)
    long_text = "Summarize: " + "the cat sat on the mat. " * 600
    progressed, outcome, chunk_times = threading.Event(), [], []

    def user() -> None:
        try:
            for update in session.answer(ask(long_text, 4), 64):
                if update.progress is not None:
                    chunk_times.append(time.perf_counter())
                    if len(chunk_times) >= 2:
                        progressed.set()
        except Cancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=user)
    thread.start()
    assert progressed.wait(120), "the long prefill never reported progress"
    stopped = time.perf_counter()
    session.stop()  # what the Stop button does (ChatHandlers.chat_stopped)
    thread.join(30)
    assert not thread.is_alive() and len(outcome) == 1
    chunk = chunk_times[1] - chunk_times[0]  # one prefill chunk's time on this machine, now
    assert time.perf_counter() - stopped < max(1.5, 1.5 * chunk)  # within about one chunk
    assert list(session.answer(ask("Hi", 2), 64))[-1].finished  # the tab is free at once


def test_a_stopped_generator_never_blocks_the_next_answer(tiny_lm):
    """Gradio may abandon a stopped answer's generator without closing it: Stop still frees the tab."""
    handlers = ChatHandlers(tiny_lm, load_settings(), Workspaces(tiny_lm))
    tab = SimpleNamespace(session_hash="stop-tab")
    session = handlers.workspaces.get("stop-tab").chat
    abandoned = session.answer(ask("Hello there", 30), 64)
    next(abandoned)
    handlers.chat_stopped([], "Reading", request=tab)
    assert list(session.answer(ask("Hi", 2), 64))[-1].finished
    abandoned.close()  # its late end does not overwrite the newer answer's tree
    assert [b.current for b in session.branches()] == [True]


def test_a_fork_never_copies_a_cache_that_is_in_use(tiny_lm):
    session = StepSession(tiny_lm, "The capital of France is")
    session.greedy(3)
    with tiny_lm._checked_out(session.key) as entry:  # another call is working on it
        tiny_lm.fork(session.key, "twin")
        assert entry.cache is not None
    assert tiny_lm.kv_store.peek("twin") is None  # computed from its ids when used, never stale
    assert tiny_lm.sequence_ids(session.key) == session.ids  # the working entry came back
    tiny_lm.release("twin")


def test_a_key_released_while_in_use_is_not_given_back():
    store = KVStore(10**9)
    store.put("tab", CacheEntry(SimpleNamespace(layers=[]), ids=[1, 2]))
    entry, ticket = store.check_out("tab")
    store.drop("tab")  # the tab closed while its request ran
    store.check_in("tab", entry, ticket)
    assert store.peek("tab") is None and store.keys() == []
    store.put(
        "tab", CacheEntry(SimpleNamespace(layers=[]), ids=[3])
    )  # a later sequence with the same key is kept
    assert store.peek("tab").ids == [3]


def test_remembered_rows_are_counted_at_their_own_size(embedded_lm):
    session = StepSession(embedded_lm, "The capital of France is")
    before = embedded_lm.kv_store.total_bytes
    session.force(" Paris, and it is known for the Eiffel Tower and its museums" * 4)
    entry = embedded_lm.kv_store.peek(session.key)
    row_bytes = embedded_lm.vocab_size * 4  # float32 scores
    remembered = sum(t.untyped_storage().nbytes() for t in entry.logits.values())
    assert len(entry.logits) <= REMEMBERED_LOGITS and remembered == len(entry.logits) * row_bytes
    assert embedded_lm.kv_store.total_bytes - before < 64 * 2**20  # not 16 views of every row
    session.release()

"""A crowd on one app: many tabs at once get exactly the answers they would get alone, every model
event can show its queue position, and a closed tab gives back its workspace, its KV caches and
Gradio's state for it. The load test runs the workload of bench/bench_crowd.py at a small scale."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from conftest import make_tiny_llama
from gradio_client import Client

from bench.crowd_sessions import GREEDY_CHAT, launched, run_tab, same_but_last_digits
from playground.chat import normalize_history, with_footer
from playground.engine.base import DecodePlan
from playground.engine.kv_store import CacheEntry, KVStore
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.settings import load_settings
from playground.ui.app import build_demo, launch_options
from playground.ui.common import MODEL_QUEUE
from playground.ui.crowd import QUEUE_STATUS_CLASS
from playground.workspace import Workspaces

HEARTBEAT_SECONDS = "0.5"  # how soon the server notices a closed client (Gradio's default: 15 s)


@pytest.fixture(scope="module")
def crowd_app(embedded_lm):
    """The whole app over a tiny random model (fast), with its workspaces at hand."""
    settings = load_settings(model_concurrency=2, max_workspaces=64)
    with launched(
        make_tiny_llama(embedded_lm.tokenizer), settings, heartbeat_seconds=HEARTBEAT_SECONDS
    ) as app:
        yield app


def session(url: str, i: int, tabs: int = 4) -> tuple[list, float]:
    """Run session i in a fresh tab, then close the tab; returns what it saw and the seconds its
    requests took."""
    seen, requests = run_tab(url, i, tabs)
    return seen, sum(r.seconds for r in requests)


def crowd(url: str, ids: list[int], tabs: int) -> tuple[dict[int, list], list[str], float, float]:
    """Sessions `ids` all at once: what each saw, the errors, the wall time and the sum of request times."""

    def one(i: int) -> tuple[int, list | None, float, str | None]:
        try:
            seen, seconds = session(url, i, tabs)
            return i, seen, seconds, None
        except Exception as exc:  # every failure is counted, none stops the others
            return i, None, 0.0, f"session {i}: {type(exc).__name__}: {exc}"

    started = time.perf_counter()
    with ThreadPoolExecutor(len(ids)) as pool:
        results = list(pool.map(one, ids))
    wall = time.perf_counter() - started
    errors = [error for *_, error in results if error]
    return {i: seen for i, seen, _, _ in results}, errors, wall, sum(s for _, _, s, _ in results)


def wait_until(condition: Callable[[], bool], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_a_crowd_gets_the_answers_it_would_get_alone(crowd_app):
    """8 tabs at once, each using chat, step by step, beam search, the KV calculator and a measured
    cache (and the moves between tabs): 0 errors, and every answer equal to the same session alone."""
    alone = {i: session(crowd_app.url, i)[0] for i in range(4)}  # each starts at another tab
    ids = [i + 12 * copy for copy in range(2) for i in range(4)]  # sessions i + 12 repeat session i
    seen, errors, wall, busy = crowd(crowd_app.url, ids, tabs=4)
    assert errors == []
    assert wall < busy / 2, "the sessions should have run at the same time"
    for i in ids:
        assert seen[i] == alone[i % 12], f"session {i} saw other answers in the crowd than alone"
    everything_released(crowd_app)


def everything_released(app: SimpleNamespace) -> None:
    """Once its tabs are closed, the app holds nothing for them."""
    assert wait_until(lambda: len(app.workspaces) == 0), f"{len(app.workspaces)} workspaces left"
    # A tab's workspace leaves the store before its caches are released: wait for those too.
    assert wait_until(lambda: app.engine.kv_store.keys() == []), app.engine.kv_store.keys()
    assert app.engine.kv_store.total_bytes == 0
    assert wait_until(lambda: len(app.demo.state_holder.session_data) == 0), "Gradio kept tab states"


def test_closed_tabs_give_back_workspace_kv_caches_and_gradio_state(crowd_app):
    clients = [Client(crowd_app.url, verbose=False) for _ in range(5)]
    for client in clients:
        client.predict("The capital of France is", False, api_name="/step_start")
        client.submit("Hi", [], "", *GREEDY_CHAT, api_name="/chat").result()
    assert len(crowd_app.workspaces) == 5
    assert len(crowd_app.engine.kv_store.keys()) == 10  # a step session and a conversation per tab
    assert len(crowd_app.demo.state_holder.session_data) == 5
    for client in clients[:2]:
        client.close()
    assert wait_until(lambda: len(crowd_app.workspaces) == 3)
    # A tab's workspace leaves the store before its caches are released: wait for those too.
    # The open tabs' caches stay: 6, and still 6 a moment later (not 6 on the way to fewer).
    assert wait_until(lambda: len(crowd_app.engine.kv_store.keys()) == 6), crowd_app.engine.kv_store.keys()
    time.sleep(0.5)
    assert len(crowd_app.engine.kv_store.keys()) == 6
    for client in clients[2:]:
        client.close()
    everything_released(crowd_app)


def test_a_real_model_crowd_gets_the_answers_it_would_get_alone(launched_app):
    """The embedded model: 8 tabs at once (two per tab kind, beyond the model's 2 at a time)."""
    alone = {i: session(launched_app, i, tabs=1)[0] for i in range(4)}
    seen, errors, _, _ = crowd(launched_app, [*range(4), *range(12, 16)], tabs=1)
    assert errors == []
    for i, answer in seen.items():  # in one batch, rows round differently: the last printed digit
        assert same_but_last_digits(answer, alone[i % 12]), f"session {i} saw other answers in the crowd"
    assert "Paris" in str(alone[0])  # the greedy chat answer of a real model


def test_a_cache_released_while_in_use_is_not_stored_again(tiny_lm):
    """A tab closed in the middle of an answer: its conversation's cache is checked out by the
    running stream when the tab's workspace releases it; it must not come back afterwards."""
    plan = DecodePlan(SamplingSettings(temperature=0.0), max_new_tokens=8, seed=0)
    prompt = tiny_lm.tokenizer.encode("The capital of France is")
    for release in (False, True):
        stream = tiny_lm.stream(prompt, plan, key=f"closing-{release}")
        next(stream), next(stream)
        if release:
            tiny_lm.release("closing-True")
        stream.close()  # what Gradio does with the answer of a tab that went away
    stored = tiny_lm.kv_store.keys()
    assert "closing-False" in stored and "closing-True" not in stored
    tiny_lm.release("closing-False")


def test_timings_of_an_answer_never_reach_the_next_prompt():
    """Found by the crowd test: an answer of only whitespace comes back stripped, footer first, and
    its timings (which depend on the load) went into the next turn's prompt."""
    stripped = with_footer("\n", "prefill 94 ms · decode 44.6 tok/s").strip()
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": stripped}]
    assert normalize_history(history)[1]["content"] == ""
    kept = [{"role": "assistant", "content": with_footer("Paris.\n", "decode 17.8 tok/s")}]
    assert normalize_history(kept)[0]["content"] == "Paris.\n"


def test_kv_store_check_in_respects_drops_made_while_checked_out():
    computed = SimpleNamespace(layers=[])  # a cache (no tensors: 0 bytes)
    store = KVStore(10**6)
    entry, ticket = store.check_out("a")
    assert entry is None
    store.check_in("a", CacheEntry(computed, ids=[1]), ticket)
    assert store.keys() == ["a"]
    entry, ticket = store.check_out("a")
    assert entry.ids == [1] and store.keys() == []
    store.drop("a")  # the tab closed while its cache was being worked on
    store.check_in("a", entry, ticket)
    assert store.keys() == []
    store.drop("b")  # a drop while nothing is checked out does not affect later check-outs
    entry, ticket = store.check_out("b")
    store.check_in("b", CacheEntry(computed), ticket)
    assert store.keys() == ["b"]
    entry, ticket = store.check_out("c")
    store.check_in("c", CacheEntry(), ticket)  # nothing computed: nothing kept
    assert store.keys() == ["b"]


def test_workspaces_are_bounded_least_recently_used_first(tiny_lm):
    workspaces = Workspaces(tiny_lm, 2)
    first = workspaces.get("tab-1")
    workspaces.get("tab-2"), workspaces.get("tab-1"), workspaces.get("tab-3")
    assert len(workspaces) == 2 and workspaces.get("tab-1") is first  # tab-2 was the least recent
    with pytest.raises(PlaygroundError, match="at least 1 tab, got 0"):
        Workspaces(tiny_lm, 0)


def test_crowd_bounds_come_from_settings(monkeypatch, tiny_lm):
    monkeypatch.setenv("PLAYGROUND_MAX_WORKSPACES", "7")
    monkeypatch.setenv("PLAYGROUND_QUEUE_FIRST_ESTIMATE_S", "2.5")
    settings = load_settings()
    assert settings.max_workspaces == 7 and settings.queue_first_estimate_s == 2.5
    assert launch_options(settings)["state_session_capacity"] == 7  # Gradio's per-tab state: same bound
    monkeypatch.setenv("PLAYGROUND_QUEUE_FIRST_ESTIMATE_S", "soon")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_QUEUE_FIRST_ESTIMATE_S must be a number"):
        load_settings()


def test_every_model_event_shows_its_queue_position_and_a_first_estimate(tiny_lm):
    """Every event that waits for the model reports to a status line marked for the queue display,
    and has an estimate before it ever ran, which its first measured run replaces."""
    demo = build_demo(tiny_lm, load_settings(queue_first_estimate_s=3.0))
    times = demo._queue.process_time_per_fn
    model_events = [fn for fn in demo.fns.values() if fn.concurrency_id == MODEL_QUEUE]
    assert len(model_events) > 20
    for fn in model_events:
        assert fn.show_progress != "hidden" and fn.show_progress_on, f"{fn.name} waits without a display"
        for component in fn.show_progress_on:
            assert QUEUE_STATUS_CLASS in component.elem_classes, f"{fn.name}: status line not marked"
        assert times[fn].avg_time == 3.0
    assert all(fn.concurrency_id != MODEL_QUEUE for fn in times if fn not in model_events)
    times[model_events[0]].add(0.25)
    assert times[model_events[0]].avg_time == 0.25


def test_crowd_bench_helps_and_judges_levelling_off():
    """bench/bench_crowd.py: --help needs no server; RSS that keeps growing is not called level."""
    import subprocess
    import sys
    from pathlib import Path

    from bench.bench_crowd import levelled_off, percentile

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "bench/bench_crowd.py", "--help"], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0 and "--sessions" in done.stdout and "RSS" in done.stdout
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0 and percentile([1.0, 9.0], 0.95) == 9.0
    assert levelled_off(1000.0, [1200.0, 1250.0, 1255.0, 1258.0])[0]
    assert not levelled_off(1000.0, [1100.0, 1200.0, 1300.0, 1400.0])[0]
    assert not levelled_off(1000.0, [1100.0])[0]  # too few samples to say


def test_answers_compare_equal_up_to_float_noise_only() -> None:
    """The crowd's comparison: the same text and ids; numbers up to one unit of their last digit or
    1e-5 (a batched row's float noise), no more."""
    alone = {"text": "Paris", "p": "0.193299", "rank": 3, "score": "-1.25"}
    assert same_but_last_digits({**alone, "p": "0.193302"}, alone)  # 3e-6: float noise
    assert same_but_last_digits({**alone, "score": "-1.26"}, alone)  # one unit of its last digit
    assert not same_but_last_digits({**alone, "p": "0.193320"}, alone)  # 2.1e-5
    assert not same_but_last_digits({**alone, "score": "-1.27"}, alone)
    assert not same_but_last_digits({**alone, "rank": 4}, alone)
    assert not same_but_last_digits({**alone, "text": "Lyon"}, alone)


def test_the_queue_has_the_running_batchs_places(tiny_lm):
    """With continuous batching the model queue lets as many events run as the batch has places
    (PLAYGROUND_BATCH_SIZE), so a waiting tab's place and estimate count batch places; with
    batching off, PLAYGROUND_MODEL_CONCURRENCY events at once."""
    from playground.engine.batcher import BatchConfig
    from playground.engine.local import LocalEngine

    lm = tiny_lm
    batched = LocalEngine(
        lm.model, lm.tokenizer, lm.device, lm.dtype, lm.name, batching=BatchConfig("continuous", 5)
    )
    for engine, places in ((batched, 5), (tiny_lm, 3)):
        demo = build_demo(engine, load_settings(model_concurrency=3))
        limits = {fn.concurrency_limit for fn in demo.fns.values() if fn.concurrency_id == MODEL_QUEUE}
        assert limits == {places}

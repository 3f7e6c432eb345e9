"""Continuous batching on the real model: concurrent streams (greedy and seeded, mixed settings,
staggered arrivals, one cancelled) each equal the same request alone, the schedule really batched
them, a long prompt never stalls the others, out of memory refuses only the newest request."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import playground.engine.batcher as batcher_module
import playground.engine.decode_step as decode_step_module
import playground.engine.schedule as schedule_module
from playground.chat import ChatRequest, run_chat
from playground.engine import Control, DecodePlan, TokenRecord
from playground.engine.batcher import BatchConfig, Batcher
from playground.engine.cache import new_cache
from playground.engine.kv_store import CacheEntry
from playground.engine.local import LocalEngine
from playground.engine.sampling import SamplingSettings
from playground.errors import Cancelled, PlaygroundError
from playground.hood import continuous_batching as continuous_batching_lesson
from playground.hood.continuous_batching import Arrival
from playground.step import StepSession
from playground.ui.hood.continuous_batching import crowd

GREEDY = SamplingSettings(temperature=0)
MIXED = [
    (GREEDY, "Name three colours."),
    (SamplingSettings(temperature=0.8, top_k=40), "Write a haiku about the sea."),
    (SamplingSettings(temperature=1.0, top_p=0.9, repetition_penalty=1.2), "Say hi in French."),
    (GREEDY, "What is 12 times 12?"),
    (SamplingSettings(temperature=0.7, min_p=0.05), "Who wrote Hamlet?"),
]


@pytest.fixture(scope="module")
def unbatched(embedded_lm) -> LocalEngine:
    """The same model, one forward per request (PLAYGROUND_BATCHING=off)."""
    lm = embedded_lm
    return LocalEngine(lm.model, lm.tokenizer, lm.device, lm.dtype, lm.name, batching=BatchConfig("off"))


def requests() -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": text}], settings=s, max_new_tokens=20, seed=11 + i)
        for i, (s, text) in enumerate(MIXED)
    ]


def test_the_app_engine_batches_and_says_so(embedded_lm):
    assert embedded_lm.batcher is not None and embedded_lm.concurrency == 32
    line = "Batching: continuous (up to 32 requests, 128 tokens per iteration while any decodes, 256 alone)"
    assert line in embedded_lm.describe_decode()


def test_concurrent_streams_equal_the_same_request_alone(embedded_lm, unbatched):
    alone = [run_chat(unbatched, r) for r in requests()]
    before = embedded_lm.batcher.iterations
    results: dict[int, object] = {}
    control = Control()  # the last request is cancelled after its third token

    def user(i: int, request: ChatRequest) -> None:
        time.sleep(0.2 * i)  # staggered arrivals
        try:
            if i == len(MIXED) - 1:
                results[i] = _cancelled_after(embedded_lm, request, control, 3)
            else:
                results[i] = run_chat(embedded_lm, request)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=user, args=(i, r)) for i, r in enumerate(requests())]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for i in range(len(MIXED) - 1):
        assert results[i].answer_ids == alone[i].answer_ids, i  # greedy and seeded, token for token
        probs = [t.prob for t in results[i].tokens]
        assert probs == pytest.approx([t.prob for t in alone[i].tokens], abs=1e-5)
        assert [t.top[0].id for t in results[i].tokens] == [t.top[0].id for t in alone[i].tokens]
    assert results[len(MIXED) - 1] == alone[-1].answer_ids[:3]  # stopped: its first 3 tokens were its own
    log = [it for it in embedded_lm.batcher.log if it.index >= before]
    together = max(len(it.jobs) for it in log)
    tokens = sum(job.tokens for it in log for job in it.jobs)
    assert together >= 3 and len(log) < tokens  # really batched: fewer forwards than tokens forwarded


def _cancelled_after(lm, request: ChatRequest, control: Control, n: int) -> list[int]:
    from playground.chat import stream_chat

    made: list[int] = []
    with pytest.raises(Cancelled):
        for update in stream_chat(lm, request, control=control):
            made = list(update.answer_ids)
            if len(made) >= n:
                control.cancel()
    return made


def test_a_long_prompt_is_read_in_chunks_beside_the_others_decodes(embedded_lm):
    """While a 1,000-token prompt is read, a short chat keeps making a token in every one of those
    iterations, and an iteration with a decode holds the decoding budget at most (128 on a CPU; any
    iteration, 256)."""
    long_ids = embedded_lm.tokenizer("The cat sat on the mat. " * 160).input_ids[:1000]
    short = ChatRequest([{"role": "user", "content": "Count to ten."}], settings=GREEDY, max_new_tokens=24)
    started = embedded_lm.batcher.iterations
    done = threading.Event()
    thread = threading.Thread(target=lambda: (run_chat(embedded_lm, short), done.set()))
    thread.start()
    time.sleep(1.0)
    list(embedded_lm.stream(long_ids, DecodePlan(GREEDY, 1, seed=0)))
    thread.join(600)
    log = [it for it in embedded_lm.batcher.log if it.index >= started]
    mixed = [it for it in log if {j.kind for j in it.jobs} == {"prefill", "decode"}]
    assert mixed, "no iteration read a prompt chunk beside a decode"
    budget = embedded_lm.batcher.decoding_budget
    assert budget == 128 and all(sum(j.tokens for j in it.jobs) <= budget for it in mixed)
    assert all(sum(j.tokens for j in it.jobs) <= 256 for it in log)  # the token budget holds


def test_a_read_that_a_decode_follows_goes_first_and_a_passed_over_read_goes_next(embedded_lm):
    """One stream decoding (budget 16 while any job takes one token, 64 alone): a stream's 100-token
    prompt that arrived after a plain 200-token read takes the 15 spare tokens; after 4 iterations
    without a token the older plain read goes first; with nothing decoding it reads 64 at a time."""
    lm = embedded_lm
    b = Batcher(
        lm.batcher.model,
        lm.forwarder,
        lm.tokenizer,
        budget=64,
        decoding_budget=16,
        max_jobs=8,
        threaded=False,
    )
    plan = DecodePlan(GREEDY, 8, seed=0)

    def stream(prompt: list[int], name: str):
        return b.stream_job(CacheEntry(new_cache(lm.config)), prompt, plan, lm.eos_token_ids, 8192, name)

    def last() -> list[tuple[str, str, int]]:
        return [(j.name, j.kind, j.tokens) for j in b.log[-1].jobs]

    ids = lm.tokenizer("The capital of France is").input_ids
    stream(ids, "first")
    b.step()  # nothing takes one token yet: the whole prompt in one iteration
    assert last() == [("first", "prefill", len(ids))]
    read = schedule_module.Job("read", CacheEntry(new_cache(lm.config)), list(range(1000, 1200)), 1, None)
    b._submit(read)
    second = stream(list(range(2000, 2100)), "second")
    for _ in range(schedule_module.PASSED_OVER):
        b.step()
        assert last() == [("first", "decode", 1), ("second", "prefill", 15)]
    b.step()
    assert last() == [("first", "decode", 1), ("read", "prefill", 15)]
    shapes = []
    while b.step():
        shapes.append(last())
    assert [("read", "prefill", 64)] in shapes  # nothing decoding: the whole budget
    assert read.gone.is_set() and read.read == 200
    assert len([m for m in _messages(second) if isinstance(m, TokenRecord)]) == 8


def test_a_step_session_joins_the_batch(embedded_lm, unbatched):
    session = StepSession(embedded_lm, "The capital of France is")
    reference = StepSession(unbatched, "The capital of France is")
    assert [c.token_id for c in session.candidates(5)] == [c.token_id for c in reference.candidates(5)]
    assert (
        session.pick(session.candidates(1)[0].token_id).token.id
        == reference.pick(reference.candidates(1)[0].token_id).token.id
    )


def test_a_beam_search_rides_in_the_batch_beside_its_greedy_overlay(embedded_lm, unbatched):
    """With batching, the beams' rows are sequences of the running batch (one iteration per step,
    every row in it) and the greedy overlay decodes in the same iterations; the tree equals the
    unbatched one, which tests/test_beam.py holds equal to generate."""
    from playground.beam import beam_search
    from playground.engine.beams import BeamRows

    rows = embedded_lm.beam_start([1, 2, 3], 3)[0]
    assert isinstance(rows, BeamRows) and rows.rows == 3 and rows.entry.cache.layers[0].keys.shape[0] == 3
    before = embedded_lm.batcher.iterations
    tree = beam_search(embedded_lm, "The capital of France is", 3, 8, include_greedy=True)
    reference = beam_search(unbatched, "The capital of France is", 3, 8, include_greedy=True)
    assert tree.sequences == reference.sequences
    assert tree.scores == pytest.approx(reference.scores, abs=1e-4)
    assert [g.token.id for g in tree.greedy] == [g.token.id for g in reference.greedy]
    log = [it for it in embedded_lm.batcher.log if it.index >= before]
    beam_steps = [it for it in log if any(j.name == "beam step" and j.tokens == 3 for j in it.jobs)]
    assert len(beam_steps) >= 7  # every step's three rows in one iteration, as one job of three rows
    assert any(any(j.kind == "decode" for j in it.jobs) for it in beam_steps), "the overlay waited"


def test_stop_ends_a_batched_beam_search_and_its_overlay(embedded_lm):
    """Stop while the rows of a step wait in the batch: the search ends with its tree so far
    (marked stopped), its rows leave, and its greedy overlay stops long before its 40 tokens."""
    from playground.beam import beam_search

    control = Control()
    before = embedded_lm.batcher.iterations

    def stop_after_two_beam_steps() -> None:
        # Cancel on the batch's own clock, not the wall's: a fast machine ends 40 steps in 1.5 s.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = [it for it in list(embedded_lm.batcher.log) if it.index >= before]
            if sum(any(j.name == "beam step" for j in it.jobs) for it in log) >= 2:
                break
            time.sleep(0.001)
        control.cancel()

    threading.Thread(target=stop_after_two_beam_steps, daemon=True).start()
    tree = beam_search(embedded_lm, "Once upon a time", 3, 40, include_greedy=True, control=control)
    assert tree.stopped and 2 <= tree.steps_run < 40, tree.steps_run
    batcher, deadline = embedded_lm.batcher, time.monotonic() + 30
    while (batcher.running or batcher.waiting) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not batcher.running and not batcher.waiting, "a stopped search left work in the batch"
    log = [it for it in batcher.log if it.index >= before]
    overlay_tokens = sum(j.kind == "decode" for it in log for j in it.jobs)
    beam_steps = sum(any(j.name == "beam step" for j in it.jobs) for it in log)
    assert 0 < beam_steps < 40 and overlay_tokens < 39, (beam_steps, overlay_tokens)


def test_a_measured_cache_is_read_in_the_batch_with_the_same_bytes(embedded_lm, unbatched):
    before = embedded_lm.batcher.iterations
    assert embedded_lm.measure_cache(40) == unbatched.measure_cache(40)
    assert any(
        j.name == "KV measure" for it in embedded_lm.batcher.log if it.index >= before for j in it.jobs
    )


def test_bad_settings_are_refused_before_joining(embedded_lm):
    before = embedded_lm.batcher.iterations
    with pytest.raises(PlaygroundError, match="top-p"):
        list(embedded_lm.stream([1, 2, 3], DecodePlan(SamplingSettings(top_p=2.0), 4, seed=0)))
    assert embedded_lm.batcher.iterations == before


def test_out_of_memory_refuses_the_newest_request_and_the_others_go_on(embedded_lm, monkeypatch):
    """An unthreaded batcher over the engine's batch twin: the iteration that holds both requests
    runs out of memory once, in layer 5 (layers 0-4 already wrote its keys into both caches); the
    newest is refused, and the first goes on exactly as it does alone, record for record."""
    lm = embedded_lm
    plan = DecodePlan(GREEDY, 6, seed=0)
    ids = lm.tokenizer("The capital of France is").input_ids

    def batcher() -> Batcher:
        return Batcher(lm.batcher.model, lm.forwarder, lm.tokenizer, budget=64, max_jobs=4, threaded=False)

    def stream(b: Batcher, name: str):
        return b.stream_job(CacheEntry(new_cache(lm.config)), ids, plan, lm.eos_token_ids, 8192, name)

    solo_batcher = batcher()
    solo = stream(solo_batcher, "solo")
    while solo_batcher.step():
        pass
    alone = [m for m in _messages(solo) if isinstance(m, TokenRecord)]

    b = batcher()
    first = stream(b, "first")
    b.step()
    second = stream(b, "second")
    layer = b.model.model.layers[5]
    real, failed = layer.forward, []

    def once(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise torch.OutOfMemoryError("simulated")
        return real(*args, **kwargs)

    monkeypatch.setattr(layer, "forward", once)
    while b.step():
        pass
    assert failed
    error = _messages(second)[-1]
    assert isinstance(error, PlaygroundError) and "Out of memory" in str(error)
    records = [m for m in _messages(first) if isinstance(m, TokenRecord)]
    assert [r.id for r in records] == [r.id for r in alone] and records[0].id == 7042  # ' Paris'
    assert [r.prob for r in records] == [r.prob for r in alone]  # the same batch as alone: exact
    assert [len(layer.keys[0, 0]) for layer in first.entry.cache.layers] == [len(first.entry.ids)] * 30


def test_one_requests_failing_step_ends_it_alone_and_the_other_goes_on_as_alone(embedded_lm, monkeypatch):
    """Two requests in one batch; choosing a token for one of them fails (a bug, NaN scores): that
    request gets the error, the other gets every token it gets alone."""
    lm = embedded_lm
    ids = lm.tokenizer("The capital of France is").input_ids

    def stream(b: Batcher, plan: DecodePlan, name: str):
        return b.stream_job(CacheEntry(new_cache(lm.config)), ids, plan, lm.eos_token_ids, 8192, name)

    solo = Batcher(lm.batcher.model, lm.forwarder, lm.tokenizer, budget=64, max_jobs=4, threaded=False)
    alone_job = stream(solo, DecodePlan(GREEDY, 6, seed=0), "alone")
    while solo.step():
        pass
    alone = [m.id for m in _messages(alone_job) if isinstance(m, TokenRecord)]
    real = batcher_module.decode_step

    def failing_for_seed_13(tokenizer, decoding, *args):
        if decoding.plan.seed == 13:
            raise RuntimeError("scores were NaN")
        return real(tokenizer, decoding, *args)

    monkeypatch.setattr(batcher_module, "decode_step", failing_for_seed_13)
    b = Batcher(lm.batcher.model, lm.forwarder, lm.tokenizer, budget=64, max_jobs=4, threaded=False)
    good, bad = (
        stream(b, DecodePlan(GREEDY, 6, seed=0), "good"),
        stream(b, DecodePlan(GREEDY, 6, seed=13), "bad"),
    )
    while b.step():
        pass
    assert isinstance(_messages(bad)[-1], RuntimeError)
    assert [m.id for m in _messages(good) if isinstance(m, TokenRecord)] == alone


def test_an_unexpected_error_in_the_loop_reaches_the_caller_and_the_loop_goes_on(embedded_lm, monkeypatch):
    """A bug while choosing a token (outside the forward) must not end the batch's thread with every
    caller left waiting: the caller gets the error, and the next request is served."""
    lm = embedded_lm
    b = Batcher(lm.batcher.model, lm.forwarder, lm.tokenizer, budget=64, max_jobs=4, threaded=True)
    ids = lm.tokenizer("Hi").input_ids
    real = decode_step_module.final_scores
    monkeypatch.setattr(decode_step_module, "final_scores", lambda *a: 1 / 0)

    def stream():
        plan = DecodePlan(GREEDY, 2, seed=0)
        return b.stream_job(CacheEntry(new_cache(lm.config)), ids, plan, (), 8192, "x")

    assert isinstance(stream().out.get(timeout=60), ZeroDivisionError)
    monkeypatch.setattr(decode_step_module, "final_scores", real)
    assert isinstance(stream().out.get(timeout=60), TokenRecord)


def test_the_crowd_button_sends_requests_at_a_rate_and_draws_ttft_and_tpot(embedded_lm, monkeypatch):
    views = list(crowd(embedded_lm, rate=4.0, count=4))
    assert len(views) >= 2, "redrawn while it runs"
    last = views[-1]
    assert (
        last["crowd_status"].startswith("Done: 4 of 4 requests answered")
        and "failed" not in last["crowd_status"]
    )
    assert (
        "TTFT p50 **" in last["crowd_status"]
        and "within TTFT <= 2 s and TPOT <= 300 ms" in last["crowd_status"]
    )
    assert last["crowd_gantt"].data  # the schedule drawn
    ttft, tpot = last["crowd_latency"].data[:2]
    assert len(ttft.x) == 4 and all(y > 0 for y in ttft.y)  # every request's TTFT at its arrival
    assert all(y > 0 for y in tpot.y)  # the ones of more than one token: their TPOT (ms)
    real = embedded_lm.stream

    def second_fails(ids, plan, *, key, control):
        if key.endswith("-2"):
            raise PlaygroundError("simulated")
        return real(ids, plan, key=key, control=control)

    monkeypatch.setattr(embedded_lm, "stream", second_fails)
    status = list(crowd(embedded_lm, rate=4.0, count=3))[-1]["crowd_status"]
    assert (
        status.startswith("Done: 3 of 3 requests answered")
        and "**1 failed**: PlaygroundError: simulated" in status
    )


def _messages(job) -> list:
    out = []
    while not job.out.empty():
        out.append(job.out.get())
    return out


def test_the_lesson_is_identical_and_counts_its_padding_by_hand(embedded_lm):
    tok = embedded_lm.tokenizer
    prompts = [tok("The history of the printing press begins").input_ids, tok("Hi").input_ids]
    result = continuous_batching_lesson.run(
        embedded_lm, [Arrival(prompts[0], 5, 0), Arrival(prompts[1], 3, 2)], budget=4
    )
    assert result.identical and [len(t) for t in result.tokens] == [5, 3]
    width = max(len(p) for p in prompts)
    by_hand = (
        (width - len(prompts[0])) + (width - len(prompts[1])) + (5 - 3)
    )  # prompt pads + a done row's pads
    assert result.padding_tokens == by_hand
    first = result.schedule[0].jobs
    assert first[0].kind == "prefill" and first[0].tokens == 4  # the budget: 4 tokens per iteration
    assert all(sum(j.tokens for j in it.jobs) <= 4 for it in result.schedule)
    assert result.finished_at[1] > 2 and result.static_steps == [5, 3]
    assert result.phase == "2 requests, batched both ways and each alone"  # the status line's "Done: …"


def test_the_apps_engine_takes_the_batching_of_its_settings():
    """app.create_engine passes settings.batching on (a bench's or a Space's override, not only the
    environment variable)."""
    import app
    from playground.settings import load_settings

    assert app.create_engine(load_settings(batching="off")).batcher is None

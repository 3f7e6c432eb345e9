"""Serving measured the way the field measures it: arrivals, TTFT / TPOT / ITL / E2E, goodput and
capacity on hand-made timings, and an open-loop load on the real model's running batch whose answers
equal the same requests alone."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from playground.errors import PlaygroundError
from playground.serving.load import (
    alone_answers,
    arrival_times,
    mixed_requests,
    run_load,
    same_as_alone,
)
from playground.serving.metrics import LoadSummary, RequestTiming, Slo, capacity, percentile, summarize


def test_percentiles_are_numpys_linear_ones():
    values = [0.3, 1.7, 0.2, 5.0, 2.2, 0.9, 3.3]
    for q in (50, 95, 99):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) != percentile([], 50)  # NaN


@pytest.mark.parametrize("burstiness", [1.0, 0.5])
def test_arrivals_have_the_asked_rate_and_burstiness(burstiness):
    times = arrival_times(rate=2.0, count=6000, burstiness=burstiness, seed=1)
    gaps = np.diff(times)
    assert times[0] == 0 and gaps.min() > 0
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)  # mean gap 1 / rate
    # a gamma of shape b has a squared coefficient of variation 1 / b: 1 for Poisson, 2 when bursty
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.1)
    assert arrival_times(2.0, 5, burstiness, seed=1) == times[:5]  # seeded
    with pytest.raises(PlaygroundError, match="rate > 0"):
        arrival_times(0, 5)


def test_ttft_tpot_itl_e2e_and_goodput_by_hand():
    timings = [
        RequestTiming("chat", 0.0, [1.0, 1.2, 1.4, 1.6]),  # TTFT 1, TPOT 0.2, E2E 1.6: within
        RequestTiming("chat", 0.5, [3.0, 3.5, 4.0]),  # TTFT 2.5: late
        RequestTiming("step", 1.0, [1.5]),  # one token: TTFT only, within
        RequestTiming("chat", 2.0, [], error="refused"),
    ]
    first = timings[0]
    assert (first.ttft, first.e2e) == (1.0, 1.6) and first.tpot == pytest.approx(0.2)
    assert first.gaps == pytest.approx([0.2, 0.2, 0.2])
    summary = summarize(timings, rate=1.0, burstiness=1.0, slo=Slo())
    assert (summary.requests, summary.errors, summary.tokens) == (4, 1, 8)
    assert summary.seconds == 4.0 and summary.attained == 0.5 and summary.goodput == 0.5
    assert summary.latency["ttft"]["p50"] == 1.0  # the middle of 1.0, 2.5 and 0.5 (the step)
    assert summary.latency["tpot"]["p50"] == pytest.approx(0.35)  # of 0.2 and 0.5
    assert summary.latency["itl"]["p99"] == pytest.approx(0.5, abs=0.01)
    assert not summary.within(Slo())


def _summary(rate: float, attained: float, errors: int = 0) -> LoadSummary:
    return LoadSummary(rate, 1.0, 10, 10.0, errors, 0, 100, attained, attained, {})


def test_capacity_is_the_highest_rate_within_the_slo_before_the_first_that_is_not():
    sweep = [_summary(0.2, 1.0), _summary(0.4, 0.95), _summary(0.6, 0.7), _summary(0.8, 0.92)]
    assert capacity(sweep, Slo()) == 0.4
    assert capacity([_summary(0.2, 1.0, errors=1)], Slo()) == 0.0  # an error is never within
    assert capacity([], Slo()) == 0.0


def test_an_open_loop_load_on_the_running_batch_answers_as_alone(embedded_lm):
    requests = mixed_requests(embedded_lm.tokenizer, 6, seed=3, long_tokens=300, chat_tokens=24)
    assert {r.kind for r in requests} >= {"chat"}
    alone = alone_answers(embedded_lm, requests)
    answers: dict[int, list[int]] = {}
    timings = run_load(
        embedded_lm,
        requests,
        arrival_times(rate=4.0, count=6, seed=3),
        on_done=lambda i, timing, ids: answers.__setitem__(i, ids),
    )
    assert [t.error for t in timings] == [""] * 6
    assert all(same_as_alone(requests[i], answers[i], alone) for i in range(6))
    assert [len(t.token_times) for t in timings] == [len(answers[i]) for i in range(6)]
    overlapped = sum(t.sent < timings[i - 1].token_times[-1] for i, t in enumerate(timings) if i)
    assert overlapped >= 1, "arrivals came while others ran: an open loop"
    assert statistics.mean(t.ttft for t in timings) > 0


TAKES_GIL_BACK = (
    "pybind11::gil_scoped_release::~gil_scoped_release (libtorch_python.so)"  # after a torch call
)


def test_the_batch_threads_time_is_sorted_from_py_spys_native_stacks():
    from bench.serving_report import time_split

    step = "playground-batcher;Thread.run (threading.py:982);Batcher._serve (b.py:1);Batcher.step (b.py:2)"
    forward = f"{step};Batcher._forward (b.py:3);run_model (m.py:1);Linear.forward (l.py:1)"
    raw = "\n".join(
        [
            f"thread (0x1a): {forward};mkl_blas_sgemm (libtorch_cpu.so) 6",
            f"thread (0x1a): {forward};{TAKES_GIL_BACK};pthread_cond_wait (libc.so.6);0x7f (libc.so.6) 3",
            f"thread (0x1a): {forward};gomp_barrier (libgomp.so.1);pthread_cond_timedwait (libc.so.6) 1",
            f"thread (0x1a): {step};decode_step (d.py:1) 2",
            "thread (0x1a): playground-batcher;Batcher._serve (b.py:1);Condition.wait (threading.py:1) 8",
            "thread (0x2b): AnyIO worker;Thread.run (threading.py:982);handler (h.py:1) 5",
            "thread (0x2c): MainThread;Event.wait (threading.py:1);sleep 9",
        ]
    )
    split = time_split(raw)
    assert split["batch_thread_samples"] == 20 and split["other_threads_busy_samples"] == 5
    assert split["shares"] == {
        "idle (no request)": 0.4,
        "forward: running": 0.35,  # the OpenMP barrier is torch's own work, not the GIL
        "forward: waiting for the GIL": 0.15,
        "scheduling, tokens, records: running": 0.1,
    }


def test_the_crowd_status_is_said_in_the_session_language():
    from playground.serving.crowd import CrowdView
    from playground.serving.load import GREEDY, LoadRequest
    from playground.ui.hood.continuous_batching import crowd_status

    request = LoadRequest("chat", (1, 2), 4, GREEDY, 0, 0)
    timing = RequestTiming("chat", 0.0, [0.5, 0.6, 0.7, 0.8])
    view = CrowdView(2.0, 0.5, [request], [0.0], "crowd1", [timing], [True], elapsed=1.0, done=True)
    english, chinese = crowd_status(view), crowd_status(view, "zh")
    assert english.startswith("Done: 1 of 1 requests answered (1 arrived) at 2/s (bursty)")
    assert (
        "TTFT p50 **0.50 s**" in english and "TPOT p50 **100 ms**" in english and "**100%** within" in english
    )
    assert chinese.startswith("完成：1 个请求中已回答 1 个") and "TTFT p50 **0.50 秒**" in chinese


def test_each_load_lasts_its_seconds_and_a_mode_stops_once_its_capacity_is_known(monkeypatch):
    """bench_serving: a load is rate x seconds requests (at least --requests: a short burst above the
    sustained rate would drain and pass); a mode stops after two Poisson rates outside the SLO (an
    error counts as outside), and the bursty load still runs."""
    import argparse

    import bench.serving_report
    from bench import bench_serving

    args = argparse.Namespace(requests=16, seconds=30.0, profile=False, slo=Slo())
    assert [bench_serving.requests_per_load(args, rate) for rate in (0.2, 0.8, 1.6)] == [16, 24, 48]
    assert bench_serving.requests_per_load(argparse.Namespace(requests=16, seconds=0.0), 1.6) == 16
    attained = {0.2: (1.0, 0), 0.4: (0.95, 1), 0.8: (0.5, 0), 1.6: (1.0, 0), 3.2: (1.0, 0)}
    ran = []

    def one_load(target, requests, load, reference, index, slo):
        ran.append(load)
        share, errors = attained[load[0]]
        return _summary(load[0], share, errors)

    monkeypatch.setattr(bench_serving, "one_load", one_load)
    monkeypatch.setattr(bench.serving_report, "table", lambda mode, summaries: [])
    target = bench_serving.Target("continuous", None, None, 0, lambda: 1.0)
    loads = {(rate, 1.0): [] for rate in (0.2, 0.4, 0.8, 1.6)} | {(0.4, 0.5): []}
    bench_serving.run_mode(args, target, loads, {})
    assert ran == [(0.2, 1.0), (0.4, 1.0), (0.8, 1.0), (0.4, 0.5)]
    assert target.notes == ["rate 1.6 skipped: under the SLO at the 2 rates before it"]

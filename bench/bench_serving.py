"""Serving under open-loop load, measured as vLLM's and SGLang's `bench_serving` measure it (issue 32).

    python bench/bench_serving.py                  # both batching modes, through the app's own server
    python bench/bench_serving.py --rates 0.1,0.2,0.4 --seconds 60 --batching continuous --profile
    python bench/bench_serving.py --in-process --random-weights --device cuda --rates 2,4,8,16 \\
        --seconds 0 --requests 24  # a GPU lent for minutes: a fixed count a load

Requests arrive on their own clock (a Poisson process at each rate of the sweep, then gamma arrivals of
burstiness 0.5 at one rate), whatever the server is doing, for about --seconds a load (at least
--requests; a short burst above what the server sustains would drain and pass): chat turns of 16-128 new
tokens (greedy or seeded), one-token steps and long prompts (512 tokens). By default the app runs in a
subprocess as a Space runs it, once with PLAYGROUND_BATCHING=off and once continuous, and the load goes
through its OpenAI endpoint (chat and completions, streamed) and its own endpoints (`/chat`,
`/step_start`). `--in-process` sends the same load straight to an engine in this process
(`Engine.stream`): it needs only torch and transformers, for a bare GPU box (`--random-weights`: the
embedded architecture with random weights and the tokenizer in bench/tokenizer).

Prints per mode and rate TTFT, TPOT, ITL and E2E at p50/p95/p99, throughput, goodput, the share of
requests within the SLO (TTFT <= 2 s, TPOT <= 300 ms; --slo-ttft / --slo-tpot set another), errors
and answers that differ from the same request alone; each mode's capacity (the highest rate with
>= 90 % within the SLO) and the ratio; with --profile, where the batch thread's time went (py-spy);
writes the plot (HTML, and PNG with playwright) and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.memory import rss_mib  # noqa: E402
from playground.serving.load import LoadRequest, answer_key, arrival_times, mixed_requests, open_loop  # noqa: E402
from playground.serving.metrics import LoadSummary, RequestTiming, Slo, capacity, summarize  # noqa: E402

MISSES_TO_STOP = 2  # a mode under the SLO share at this many rates in a row stops there: capacity is known
GOAL_CPU, GOAL_GPU = 2.0, 10.0  # capacity, continuous / off
PROFILE_HZ = 25  # py-spy samples per second (each pauses the server briefly to read its native stacks)


@dataclass
class Target:
    """Where the load goes: send(i, request, timing, start) -> its answer (None: failed); same(seen,
    alone) -> equal; pid: the serving process (py-spy); close() when done."""

    mode: str
    send: Callable[[int, LoadRequest, RequestTiming, float], Any]
    same: Callable[[Any, Any], bool]
    pid: int
    rss_mib: Callable[[], float]
    notes: list[str] = field(default_factory=list)


def sweep_requests(args: argparse.Namespace, tokenizer: Any) -> dict[tuple[float, float], list[LoadRequest]]:
    """The requests of every load of the sweep, by (rate, burstiness): each its own seeded draw, as
    many as arrive in about args.seconds at its rate (at least args.requests)."""
    loads = [(rate, 1.0) for rate in args.rates] + [(args.bursty_rate, 0.5)]
    return {
        (rate, burst): mixed_requests(
            tokenizer, requests_per_load(args, rate), seed=i, chat_tokens=args.chat_tokens
        )
        for i, (rate, burst) in enumerate(loads)
    }


def requests_per_load(args: argparse.Namespace, rate: float) -> int:
    """Enough requests for a load to last about args.seconds: a load shorter than the time a backlog
    takes to grow would pass at a rate the server cannot sustain."""
    return max(args.requests, round(rate * args.seconds))


def alone(target: Target, loads: dict[tuple[float, float], list[LoadRequest]]) -> dict[tuple, Any]:
    """Every kind of request once, one at a time, at the longest max_tokens the sweep asks of it."""
    longest: dict[tuple, tuple[int, LoadRequest]] = {}
    for requests in loads.values():
        for i, r in enumerate(requests):
            key = (answer_key(r), _route(i, r))
            if key not in longest or r.max_tokens > longest[key][1].max_tokens:
                longest[key] = (i, r)
    answers = {}
    for key, (i, r) in longest.items():
        timing = RequestTiming(r.kind, 0.0)
        answers[key] = target.send(i, r, timing, time.perf_counter())
        if answers[key] is None:
            raise RuntimeError(f"a request alone failed: {timing.error}")
    return answers


def _route(i: int, request: LoadRequest) -> str:
    """Which endpoint request i takes (bench/serving_clients.py): the same one alone."""
    from bench.serving_clients import GRADIO_CHAT_EVERY

    return "gradio" if request.kind == "chat" and i % GRADIO_CHAT_EVERY == 0 else request.kind


def one_load(
    target: Target,
    requests: list[LoadRequest],
    load: tuple[float, float],
    reference: dict,
    seed: int,
    slo: Slo,
) -> LoadSummary:
    """The requests arriving at load's (rate, burstiness) (burstiness 1: Poisson); each answer checked
    against alone."""
    rate, burstiness = load
    arrivals = arrival_times(rate, len(requests), burstiness, seed)
    timings = [RequestTiming(r.kind, at) for r, at in zip(requests, arrivals, strict=True)]

    def send(i: int, timing: RequestTiming, start: float) -> None:
        answer = target.send(i, requests[i], timing, start)
        expected = reference.get((answer_key(requests[i]), _route(i, requests[i])))
        if answer is not None and expected is not None:
            timing.same = target.same(answer, expected)

    open_loop(len(requests), arrivals, send, timings)
    return summarize(timings, rate, burstiness, slo)


def run_mode(
    args: argparse.Namespace, target: Target, loads: dict, reference: dict
) -> tuple[list[LoadSummary], list[float], dict[str, Any] | None]:
    """The sweep on one mode: Poisson rates up (until under the SLO share at two rates in a row: the
    capacity is known), then the bursty load; the server's RSS after each; a py-spy profile of one
    load when asked."""
    from bench.serving_report import table

    summaries, rss, missed, profile = [], [], 0, None
    for i, ((rate, burst), requests) in enumerate(loads.items()):
        if burst == 1.0 and missed >= MISSES_TO_STOP:
            target.notes.append(
                f"rate {rate:g} skipped: under the SLO at the {MISSES_TO_STOP} rates before it"
            )
            continue
        with profiled(args, target, rate, burst, len(requests)) as found:
            summaries.append(one_load(target, requests, (rate, burst), reference, i, args.slo))
        profile = found.get("split", profile)
        rss.append(target.rss_mib())
        if burst == 1.0:
            missed = 0 if summaries[-1].within(args.slo) else missed + 1
        print("\n".join(table(target.mode, summaries[-1:])[2:]), flush=True)
    return summaries, rss, profile


@contextmanager
def profiled(args: argparse.Namespace, target: Target, rate: float, burst: float, n: int) -> Iterator[dict]:
    """py-spy on the serving process during the load at --profile-rate (continuous batching only)."""
    found: dict[str, Any] = {}
    wanted = args.profile and target.mode == "continuous" and burst == 1.0 and rate == args.profile_rate
    if not wanted:
        yield found
        return
    from bench.serving_report import time_split

    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as out:
        path = Path(out.name)
    seconds = max(5, int(n / rate))
    spy = [_py_spy(), "record", "--native", "--idle", "--threads", "--format", "raw"]  # native: the GIL
    spy += ["-r", str(PROFILE_HZ), "-d", str(seconds), "-o", str(path), "-p", str(target.pid)]
    process = subprocess.Popen(spy, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield found
    finally:
        _, err = process.communicate(timeout=seconds + 120)
        if path.exists() and path.stat().st_size:
            found["split"] = {"rate": rate, "seconds": seconds, **time_split(path.read_text())}
        else:
            target.notes.append(f"py-spy gave nothing: {err.strip()[-300:]}")
        path.unlink(missing_ok=True)


def _py_spy() -> str:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else "py-spy"


# --- targets ---------------------------------------------------------------------------------------


@contextmanager
def http_target(args: argparse.Namespace, mode: str) -> Iterator[Target]:
    """The app in a subprocess (bench/bench_crowd.py --serve: the whole app, as a Space runs it, with its
    OpenAI endpoint), batching `mode`; its clients."""
    import httpx

    from bench.bench_crowd import start_server
    from bench.serving_clients import AppClients, same_answer

    server_args = argparse.Namespace(
        device=args.device, decode=args.decode, batching=mode, random_weights=args.random_weights
    )
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as workdir:
        server = start_server(server_args, Path(workdir))
        try:
            model = httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"][0]["id"]
            clients = AppClients(server.url, model)
            yield Target(mode, clients.send, same_answer, server.process.pid, server.rss_mib)
            clients.close()
        finally:
            server.process.terminate()
            server.process.wait(30)


@contextmanager
def in_process_target(args: argparse.Namespace, mode: str) -> Iterator[Target]:
    """An engine in this process (the embedded model, or --random-weights), batching `mode`."""
    from bench.common import load_bench_model
    from playground.engine.control import Control
    from playground.serving.load import stream_one
    from playground.settings import load_settings

    os.environ["PLAYGROUND_BATCHING"] = mode  # read when the engine is made
    engine = load_bench_model(args.device, args.random_weights, decode=args.decode)
    control = Control()
    # as the app serves: a running batch takes every request (its own queue); without one, the model
    # answers PLAYGROUND_MODEL_CONCURRENCY requests at once and the others wait their turn
    places = threading.Semaphore(engine.concurrency or load_settings().model_concurrency)

    def send(i: int, request: LoadRequest, timing: RequestTiming, start: float) -> list[int] | None:
        with places:
            ids = stream_one(engine, request, timing, start, control, f"load-{time.perf_counter_ns()}-{i}")
        return None if timing.error else ids

    def same(seen: list[int], reference: list[int]) -> bool:
        return seen == reference or seen == reference[: len(seen)]

    yield Target(mode, send, same, os.getpid(), rss_mib)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- the run ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    from bench.common import TOKENIZER_DIR
    from bench.serving_report import as_json, plot

    started, load_start = time.perf_counter(), os.getloadavg()
    print(f"load average at start: {load_start}; {os.cpu_count()} CPUs", flush=True)
    loads = sweep_requests(args, AutoTokenizer.from_pretrained(str(TOKENIZER_DIR)))
    modes, figures, reference = {}, {}, None
    make = in_process_target if args.in_process else http_target
    for mode in ("off", "continuous") if args.batching == "both" else (args.batching,):
        print(f"\n=== batching {mode} ===", flush=True)
        with make(args, mode) as target:
            if reference is None:  # the answers alone, on the first mode's server (the same in both)
                reference = alone(target, loads)
                print(f"{len(reference)} kinds of request run alone: the reference answers", flush=True)
            summaries, rss, profile = run_mode(args, target, loads, reference)
        modes[mode] = summaries
        poisson = [s for s in summaries if s.burstiness == 1.0]
        figures[mode] = {
            "capacity_req_s": capacity(poisson, args.slo),
            "peak_goodput_req_s": round(max((s.goodput for s in poisson), default=0.0), 3),
            "loads": [as_json(s) for s in summaries],
            "rss_mib": [round(r) for r in rss],
            "notes": target.notes,
            **({"time_split": profile} if profile else {}),
        }
        _print_mode(mode, figures[mode])
    compared = _compare(figures, args)
    written = plot(modes, args.slo, Path(args.plot)) if args.plot and _has("plotly") else []
    load_end = os.getloadavg()
    print(f"plot: {', '.join(map(str, written)) or 'none'}; load average at end: {load_end}")
    print(f"whole run: {time.perf_counter() - started:.0f} s")
    _print_json(args, figures, compared, time.perf_counter() - started, (load_start[0], load_end[0]))


def _print_json(
    args: argparse.Namespace, figures: dict, compared: dict, seconds: float, load: tuple[float, float]
) -> None:
    from bench.common import print_json

    print_json(
        "serving",
        device=args.device,
        in_process=args.in_process,
        random_weights=args.random_weights,
        seconds_per_load=args.seconds,
        min_requests_per_load=args.requests,
        slo={"ttft_s": args.slo.ttft_s, "tpot_s": args.slo.tpot_s, "attained": args.slo.attained},
        cpu_count=os.cpu_count(),
        load_average=list(load),
        seconds=round(seconds, 1),
        modes=figures,
        **compared,
    )


def _print_mode(mode: str, figures: dict[str, Any]) -> None:
    rss = figures["rss_mib"]
    print(f"capacity ({mode}): {figures['capacity_req_s']:g} requests/s within the SLO; RSS {rss} MiB")
    for note in figures["notes"]:
        print(f"  note: {note}")
    split = figures.get("time_split")
    if split:
        shares = ", ".join(f"{part} {share:.0%}" for part, share in split["shares"].items())
        samples = split["batch_thread_samples"]
        print(
            f"where the batch thread's time went at {split['rate']:g}/s ({samples} py-spy samples): {shares}"
        )


def _compare(figures: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    if set(figures) != {"off", "continuous"}:
        return {}
    off, on = figures["off"]["capacity_req_s"], figures["continuous"]["capacity_req_s"]
    ratio = on / off if off else float("inf") if on else float("nan")
    goal = GOAL_GPU if args.device.startswith("cuda") else GOAL_CPU
    print(f"\ncapacity continuous / off: {on:g} / {off:g} = {ratio:.2f} (goal >= {goal:g})")
    best_on, best_off = (figures[m]["peak_goodput_req_s"] for m in ("continuous", "off"))
    peak = best_on / best_off if best_off else float("nan")
    print(f"peak goodput (Poisson) continuous / off: {best_on:g} / {best_off:g} requests/s = {peak:.2f}")
    return {
        "capacity_ratio": round(ratio, 3),
        "goal_capacity_ratio": goal,
        "goal_met": ratio >= goal,
        "peak_goodput_ratio": round(peak, 3),
    }


def main() -> None:
    title, _, *details = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        description=title, epilog="\n\n".join(details), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="0.2,0.4,0.8,1.6", help="Poisson arrival rates per second")
    parser.add_argument("--seconds", type=float, default=30, help="each load's arrivals last this long (30)")
    parser.add_argument("--requests", type=int, default=16, help="at least this many requests a load (16)")
    parser.add_argument(
        "--bursty-rate", type=float, default=None, help="gamma (0.5) load's rate (default: the 2nd)"
    )
    parser.add_argument("--chat-tokens", type=int, default=128, help="chat turns ask 16 to this many tokens")
    parser.add_argument("--batching", choices=("both", "continuous", "off"), default="both")
    parser.add_argument(
        "--in-process", action="store_true", help="straight to an engine here (torch + transformers)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--decode", choices=("auto", "static", "eager"), default="auto")
    parser.add_argument("--random-weights", action="store_true", help="the embedded shape, random weights")
    parser.add_argument("--profile", action="store_true", help="py-spy the batch thread at --profile-rate")
    parser.add_argument("--profile-rate", type=float, default=None, help="(default: the 3rd rate)")
    parser.add_argument("--slo-ttft", type=float, default=Slo.ttft_s, help="seconds to the first token (2)")
    parser.add_argument("--slo-tpot", type=float, default=Slo.tpot_s, help="seconds per token after it (0.3)")
    parser.add_argument(
        "--plot", default="bench_serving", help="PATH: writes PATH.html and PATH.png ('' none)"
    )
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    args.slo = Slo(args.slo_ttft, args.slo_tpot)
    if args.requests < 1 or not 0 <= args.seconds < math.inf or not args.rates or min(args.rates) <= 0:
        parser.error("--requests must be >= 1, --seconds >= 0 and every rate > 0")
    args.bursty_rate = args.bursty_rate or args.rates[min(1, len(args.rates) - 1)]
    args.profile_rate = args.profile_rate or args.rates[min(2, len(args.rates) - 1)]
    run(args)


if __name__ == "__main__":
    main()

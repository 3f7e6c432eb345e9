"""Open-loop load: requests arrive on their own clock (Poisson, or gamma for bursts), not when the
previous one is answered, and go straight to an engine (`Engine.stream`, the path every chat stream
takes). The "Serving many" lesson's crowd and `bench/bench_serving.py --in-process` use it.

    arrivals = arrival_times(rate=0.5, count=20, burstiness=1.0, seed=0)   # seconds after the start
    timings = run_load(engine, mixed_requests(engine.tokenizer, 20), arrivals)
    summarize(timings, 0.5, 1.0, Slo())

Arrival gaps have mean 1 / rate; burstiness 1 draws them from an exponential distribution (a
Poisson process), burstiness b from a gamma distribution of shape b (vLLM's `--burstiness`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from playground.engine.base import DecodePlan, Engine, Progress
from playground.engine.control import Control
from playground.engine.prompts import encode_conversation, encode_text
from playground.engine.sampling import SamplingSettings
from playground.errors import PlaygroundError
from playground.serving.metrics import RequestTiming

# Chat turns ask these (a user turn through the chat template), steps and long prompts read text.
CHAT_MESSAGES = (
    "Tell me one fact about the sea.",
    "Write a short poem about autumn.",
    "Explain what a compiler does.",
    "Give me three tips for learning to cook.",
)
STEP_PROMPTS = ("The capital of France is", "Once upon a time")
LONG_TEXT = (
    "The history of the printing press begins long before Gutenberg, in China and Korea, where "
    "woodblocks and then movable type carried whole books. "
)
GREEDY = SamplingSettings(temperature=0)
SEEDED = SamplingSettings(temperature=0.8, top_p=0.95)
# A long prompt's tokens: read alone in about 1.3 s on 2 CPU cores (about 390 tokens/s), within the
# 2-second TTFT of the SLO (1,024 tokens, 2.6 s alone, could never meet it there).
LONG_TOKENS = 512
# kind -> share of the requests (chat turns of 16-128 new tokens, one-token steps, long prompts)
MIX = (("chat", 0.75), ("step", 0.15), ("long prompt", 0.10))


@dataclass(frozen=True)
class LoadRequest:
    """One request of a load: what it reads and how it decodes (greedy or seeded: its answer alone is
    known in advance)."""

    kind: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    settings: SamplingSettings
    seed: int
    template: int  # requests of the same template and settings give the same answer (or a prefix of it)

    def plan(self) -> DecodePlan:
        return DecodePlan(self.settings, self.max_tokens, self.seed)


def arrival_times(rate: float, count: int, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """count arrival times (seconds after the start, the first at 0) with mean gap 1 / rate."""
    if not rate > 0 or not burstiness > 0 or count < 1:
        raise PlaygroundError(
            f"An arrival schedule needs a rate > 0, a burstiness > 0 and at least one request; got "
            f"{rate}, {burstiness}, {count}."
        )
    draw = random.Random(seed)
    scale = 1.0 / (rate * burstiness)  # gamma(shape b, scale 1/(rate b)) has mean 1 / rate
    times, now = [0.0], 0.0
    for _ in range(count - 1):
        now += draw.gammavariate(burstiness, scale)
        times.append(now)
    return times


def mixed_requests(
    tokenizer: object, count: int, seed: int = 0, long_tokens: int = LONG_TOKENS, chat_tokens: int = 128
) -> list[LoadRequest]:
    """count requests drawn from MIX: chat turns (16 to chat_tokens new tokens, greedy or seeded),
    one-token steps, long prompts (long_tokens tokens, 16 new)."""
    draw = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    out = []
    for _ in range(count):
        kind = draw.choices(kinds, weights)[0]
        out.append(_request(tokenizer, kind, draw, long_tokens, chat_tokens))
    return out


def _request(
    tokenizer: object, kind: str, draw: random.Random, long_tokens: int, chat_tokens: int
) -> LoadRequest:
    if kind == "chat":
        template = draw.randrange(len(CHAT_MESSAGES))
        message = [{"role": "user", "content": CHAT_MESSAGES[template]}]
        ids = encode_conversation(tokenizer, message)
        settings = GREEDY if template % 2 == 0 else SEEDED
        return LoadRequest(kind, tuple(ids), draw.randint(16, chat_tokens), settings, 7 + template, template)
    if kind == "step":
        template = draw.randrange(len(STEP_PROMPTS))
        return LoadRequest(
            kind, tuple(encode_text(tokenizer, STEP_PROMPTS[template])), 1, GREEDY, 0, template
        )
    ids = encode_text(tokenizer, LONG_TEXT * (long_tokens // 25))[:long_tokens]
    return LoadRequest(kind, tuple(ids), 16, GREEDY, 0, 0)


Sender = Callable[[int, RequestTiming, float], None]  # (request index, its timing, the load's start)


def open_loop(
    count: int,
    arrivals: Sequence[float],
    send: Sender,
    timings: list[RequestTiming],
    control: Control | None = None,
) -> list[RequestTiming]:
    """Start send(i, timings[i], start) at arrivals[i] seconds after now, each in its own thread,
    whatever the others are doing; wait for all. control: cancel stops the arrivals. Returns the
    timings of the requests sent."""
    control = control or Control()
    start, threads = time.perf_counter(), []
    for i in range(count):
        if control.cancelled or not _sleep_until(start + arrivals[i], control):
            break
        timings[i].sent = time.perf_counter() - start
        threads.append(threading.Thread(target=send, args=(i, timings[i], start), daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join()
    return timings[: len(threads)]


def run_load(
    engine: Engine,
    requests: Sequence[LoadRequest],
    arrivals: Sequence[float],
    control: Control | None = None,
    on_done: Callable[[int, RequestTiming, list[int]], None] | None = None,
    name: str = "load",
    timings: list[RequestTiming] | None = None,
) -> list[RequestTiming]:
    """The requests sent at their arrivals straight to the engine (`Engine.stream`), the stream named
    "<name>-<i>" in the running batch. Request i's timing (timings[i], made when not given) is filled as
    its tokens come; on_done(i, timing, token ids) once it ends. control: cancel also stops every running
    request at its next token."""
    control = control or Control()
    if timings is None:
        timings = [RequestTiming(r.kind, at) for r, at in zip(requests, arrivals, strict=True)]

    def send(i: int, timing: RequestTiming, start: float) -> None:
        ids = stream_one(engine, requests[i], timing, start, control, f"{name}-{i + 1}")
        if on_done is not None:
            on_done(i, timing, ids)

    return open_loop(len(requests), arrivals, send, timings, control)


def _sleep_until(when: float, control: Control) -> bool:
    while (left := when - time.perf_counter()) > 0:
        if control.cancelled:
            return False
        time.sleep(min(left, 0.1))
    return True


def stream_one(
    engine: Engine, request: LoadRequest, timing: RequestTiming, start: float, control: Control, key: str
) -> list[int]:
    """One request through the engine, its token times noted (seconds after start); its token ids. A
    failure is the request's error, never the load's."""
    ids: list[int] = []
    try:
        for event in engine.stream(list(request.prompt_ids), request.plan(), key=key, control=control):
            if not isinstance(event, Progress):
                timing.token_times.append(time.perf_counter() - start)
                ids.append(event.id)
    except Exception as exc:  # counted as this request's error; the others go on
        timing.error = f"{type(exc).__name__}: {exc}"
    finally:
        engine.release(key)
    return ids


def alone_answers(engine: Engine, requests: Sequence[LoadRequest]) -> dict[tuple, list[int]]:
    """Each template's answer alone, at the longest max_tokens asked of it: the reference that every
    answer of the load must start with."""
    longest: dict[tuple, LoadRequest] = {}
    for r in requests:
        key = answer_key(r)
        if key not in longest or r.max_tokens > longest[key].max_tokens:
            longest[key] = r
    answers = {}
    for key, r in longest.items():
        events = engine.stream(list(r.prompt_ids), r.plan())
        answers[key] = [e.id for e in events if not isinstance(e, Progress)]
    return answers


def answer_key(request: LoadRequest) -> tuple:
    return (request.kind, request.template, request.settings, request.seed)


def same_as_alone(request: LoadRequest, ids: Sequence[int], alone: dict[tuple, list[int]]) -> bool | None:
    """Whether ids are the alone answer's first tokens (None: no reference for this request)."""
    reference = alone.get(answer_key(request))
    if reference is None:
        return None
    return list(ids) == reference[: len(ids)] and (len(ids) == request.max_tokens or ids == reference)

"""What one browser tab of a crowd does, through gradio_client: a session that uses every tab.

A session is a short, fixed series of requests (chat turns, step-by-step actions, a beam search,
the KV calculator and a measured cache, moves between tabs). Its requests are greedy or seeded,
and each keeps only the part of its answer that must not depend on who else is using the app
(no timings), so a session run in a crowd can be compared with the same session run alone
(tests/test_crowd.py) and timed per kind of request (bench/bench_crowd.py).

Needs gradio_client (a client of the app); the app may run in this process (`launched`, which
needs gradio) or another.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens, seed, show_template
GREEDY_CHAT = (0, 50, 1.0, 0.0, 1.0, 12, "1", False)
SEEDED_CHAT = (1.0, 50, 0.95, 0.0, 1.0, 12, "7", False)
# The Step tab's API outputs, in order (its candidate buttons are not part of the API).
STEP_OUTPUTS = ("prompt", "chat", "text", "status", "chart", "stage", "ledger", "curve", "tree", "branch")
STREAMING = {"/chat"}  # endpoints that stream: their last output is the answer
PROMPTS = ("The capital of France is", "Once upon a time", "The best thing about beam search is")
MESSAGES = ("What is the capital of France?", "Name a colour.", "Say hello.")
PROFILES = 12  # sessions i and i + PROFILES send the same requests: 4 first tabs × 3 variants
TIMING = re.compile(r"\d[\d.,]*\s?(?:ms|tok/s|s)\b")  # "0.42 s", "12 ms", "17.8 tok/s"
WAITED = re.compile(r"waited [^·]* for the model · ")  # only when it had to wait


GENERATED = re.compile(r"generated (\d+) tokens?")  # a chat answer's stats line


@dataclass
class Request:
    kind: str  # chat, step, beam, kv_calculate, kv_measure, move
    api_name: str
    seconds: float
    tokens: int = 0  # tokens generated (chat answers)


@dataclass
class Recorder:
    """Sends one session's requests through its client, timing each."""

    client: Any
    requests: list[Request] = field(default_factory=list)
    on_request: Callable[[Request], None] | None = None  # told of each request once it is answered

    def __call__(self, kind: str, api_name: str, *args: Any) -> Any:
        started = time.perf_counter()
        if api_name in STREAMING:
            job = self.client.submit(*args, api_name=api_name)
            job.result()
            outputs = job.outputs()[-1]
        else:
            outputs = self.client.predict(*args, api_name=api_name)
        made = GENERATED.search(str(outputs[3])) if api_name in STREAMING else None
        tokens = int(made[1]) if made else 0
        self.requests.append(Request(kind, api_name, time.perf_counter() - started, tokens))
        if self.on_request is not None:
            self.on_request(self.requests[-1])
        return outputs


def untimed(text: str) -> str:
    """text without its timings, which differ from run to run."""
    return TIMING.sub("<time>", WAITED.sub("", text or ""))


def step_view(outputs: tuple) -> dict[str, Any]:
    if len(outputs) != len(STEP_OUTPUTS):
        raise AssertionError(f"the Step tab's API returns {len(outputs)} outputs, not {len(STEP_OUTPUTS)}")
    view = dict(zip(STEP_OUTPUTS, outputs, strict=True))
    return {
        "text": view["text"],
        "status": untimed(view["status"]),
        "ledger": view["ledger"]["data"],
        "tree": view["tree"],
    }


def answer(outputs: tuple) -> dict[str, Any]:
    """A chat answer: the conversation and the coloured tokens (with their probabilities)."""
    from playground.chat import normalize_history

    _, history, token_view, _, _ = outputs
    messages = [{**m, "content": untimed(m["content"])} for m in normalize_history(history)]
    return {"history": messages, "tokens": token_view}


def chat_part(r: Recorder, i: int) -> list[Any]:
    v = i % PROFILES // len(PARTS)
    settings = GREEDY_CHAT if v % 2 == 0 else SEEDED_CHAT
    first = r("chat", "/chat", MESSAGES[v % len(MESSAGES)], [], "", *settings)
    second = r("chat", "/chat", "Say it again, shorter.", first[1], "", *settings)
    opened = r("move", "/step_open_chat_token", 1)  # the answer's second token, in Step by step
    return [answer(first), answer(second), step_view(opened)]


def step_part(r: Recorder, i: int) -> list[Any]:
    v = i % PROFILES // len(PARTS)
    r("step", "/step_start", PROMPTS[v % len(PROMPTS)], False)
    r("step", "/step_pick_rank", 1)
    r("step", "/step_pick_rank", 3)
    r("step", "/step_greedy")
    r("step", "/step_sample", str(v))
    return [step_view(r("step", "/step_undo"))]


def beam_part(r: Recorder, i: int) -> list[Any]:
    v = i % PROFILES // len(PARTS)
    _, status, table, nodes, _, _ = r(
        "beam", "/beam_run", PROMPTS[v % len(PROMPTS)], False, 3, 6, 1.0, "off", 2, True, "png"
    )
    best = nodes["choices"][1][1]
    prefix = r("beam", "/beam_select_node", best)
    opened = r("move", "/step_open_beam_node")
    return [untimed(status), table["data"], prefix, step_view(opened)]


def kv_part(r: Recorder, i: int) -> list[Any]:
    v = i % PROFILES // len(PARTS)
    config = r("kv_calculate", "/kv_preset_config", "Llama-3.1-8B")
    summary, _, rows, _, _ = r(
        "kv_calculate",
        "/kv_calculate",
        "Llama-3.1-8B",
        config,
        1024 * (1 + v),
        1,
        "float16",
        "ideal",
        80,
        "bfloat16",
        None,
        10,
    )
    measured, table = r("kv_measure", "/kv_measure", 16 * (1 + v))
    return [untimed(summary), rows["data"], untimed(measured), table["data"]]


PARTS: tuple[Callable[[Recorder, int], list[Any]], ...] = (chat_part, step_part, beam_part, kv_part)


def run_session(
    client: Any, i: int, tabs: int = len(PARTS), on_request: Callable[[Request], None] | None = None
) -> tuple[list[Any], list[Request]]:
    """Session i: `tabs` tabs in turn, starting at tab i % 4, with prompts and settings chosen by
    i % PROFILES // 4 (the crowd mixes them); returns what it saw and its timed requests."""
    r = Recorder(client, on_request=on_request)
    start = i % len(PARTS)
    seen = [PARTS[(start + k) % len(PARTS)](r, i) for k in range(tabs)]
    return seen, r.requests


def run_tab(
    url: str, i: int, tabs: int = len(PARTS), on_request: Callable[[Request], None] | None = None
) -> tuple[list[Any], list[Request]]:
    """Open a tab (a fresh client: its own Gradio session), run session i in it, close the tab."""
    with browser(url) as tab:
        return run_session(tab, i, tabs, on_request)


@contextmanager
def browser(url: str) -> Iterator[Any]:
    """One person's browser: a client that reads the app's config once. `next_tab(client)` closes
    its tab and opens a new one (a new Gradio session: the old one's heartbeat ends, so the
    server releases it) without reading the config again, as a browser keeps it cached (a fresh
    Client per tab fetches the 0.5 MB config and API description again, on the server's cores)."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    try:
        yield client
    finally:
        client.close()


def next_tab(client: Any) -> None:
    """Close the client's tab and open a new one (see `browser`)."""
    client.reset_session()


@contextmanager
def launched(
    engine: Any, settings: Any, port: int | None = None, heartbeat_seconds: str | None = None
) -> Iterator[SimpleNamespace]:
    """The whole app over `engine` in this process, its workspaces bounded by settings, on `port`
    (a free one by default); heartbeat_seconds: how soon the server notices a closed tab (Gradio's
    default: 15 s). Yields its url, demo, engine and workspaces; closed on exit."""
    from playground.ui.app import build_demo, launch_local, launch_options
    from playground.workspace import Workspaces

    previous = os.environ.get("GRADIO_HEARTBEAT_INTERVAL")
    if heartbeat_seconds is not None:
        os.environ["GRADIO_HEARTBEAT_INTERVAL"] = heartbeat_seconds
    workspaces = Workspaces(engine, settings.max_workspaces)
    demo = build_demo(engine, settings, workspaces=workspaces)
    try:
        url = launch_local(demo, port, **launch_options(settings))
        yield SimpleNamespace(url=url, demo=demo, engine=engine, workspaces=workspaces)
    finally:
        demo.close()
        if heartbeat_seconds is not None and previous is None:
            os.environ.pop("GRADIO_HEARTBEAT_INTERVAL", None)
        elif heartbeat_seconds is not None:
            os.environ["GRADIO_HEARTBEAT_INTERVAL"] = previous


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


FLOAT_NOISE = 1e-5  # a number batched with other users' rows may differ from alone by this much


def same_but_last_digits(seen: object, alone: object) -> bool:
    """The same text, token for token, and the same numbers up to one unit of their last printed
    digit or FLOAT_NOISE: a forward batched with other users' rows sums in another order (float
    noise; up to 3e-6 in a probability seen with 32 users)."""
    a, b = repr(seen), repr(alone)
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    for x, y in zip(NUMBER.findall(a), NUMBER.findall(b), strict=True):
        decimals = len(x.partition(".")[2])
        if decimals == 0 and x != y:  # ids, counts, positions: exact
            return False
        allowed = max(1.01 * 10**-decimals, FLOAT_NOISE)
        if abs(float(x.replace(",", "")) - float(y.replace(",", ""))) > allowed:
            return False
    return True

"""How bench/bench_serving.py sends a load's requests to a running app, and what each answered.

- chat turns: the OpenAI endpoint (`/v1/chat/completions`, streamed), and every third one the app's own
  `/chat` (gradio_client, streamed as the Chat tab gets it);
- steps: the app's own `/step_start` (one forward: its time to first token is its whole time);
- long prompts: the OpenAI endpoint (`/v1/completions`, the prompt as token ids, streamed).

Each answer is kept as text (a step: its view without timings), to compare with the same request alone.
Needs httpx and gradio_client (a client of the app); the app runs in another process.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.crowd_sessions import GENERATED, step_view
from playground.serving.load import CHAT_MESSAGES, STEP_PROMPTS, LoadRequest
from playground.serving.metrics import RequestTiming

GRADIO_CHAT_EVERY = 3  # every third chat turn goes through the app's own /chat
TIMEOUT_S = 600.0


@dataclass
class Answer:
    """What a request got: its text (or a step's view), and whether it ran to max_tokens."""

    text: Any
    full: bool  # it stopped at max_tokens (so alone, the answer may go on)


class AppClients:
    """The app at url: one HTTP client for the OpenAI endpoint, a few gradio_client tabs for its own."""

    def __init__(self, url: str, model: str, tabs: int = 4) -> None:
        import httpx

        self.url, self.model = url, model
        self.http = httpx.Client(base_url=url, timeout=TIMEOUT_S)
        self.tabs: queue.Queue = queue.Queue()
        self.tab_count = tabs

    def close(self) -> None:
        self.http.close()
        while not self.tabs.empty():
            self.tabs.get().close()

    def send(self, i: int, request: LoadRequest, timing: RequestTiming, start: float) -> Answer | None:
        """Request i; its chunk times go into timing (seconds after start). None when it failed (its
        error is in timing)."""
        try:
            if request.kind == "step":
                return self.step(request, timing, start)
            if request.kind == "chat" and i % GRADIO_CHAT_EVERY == 0:
                return self.gradio_chat(request, timing, start)
            return self.openai(request, timing, start)
        except Exception as exc:  # counted as this request's error; the others go on
            timing.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return None

    def openai(self, request: LoadRequest, timing: RequestTiming, start: float) -> Answer:
        settings = request.settings
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": request.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.kind == "chat":
            body["messages"] = [{"role": "user", "content": CHAT_MESSAGES[request.template]}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = list(request.prompt_ids)
            path = "/v1/completions"
        text, reason = [], None
        with self.http.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.read().decode()[:200]}")
            for chunk in _events(response.iter_lines()):
                if chunk.get("usage"):
                    timing.tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices", []):
                    piece = choice.get("text") if "text" in choice else choice["delta"].get("content")
                    if piece:
                        timing.token_times.append(time.perf_counter() - start)
                        text.append(piece)
                    reason = choice.get("finish_reason") or reason
        return Answer("".join(text), reason == "length")

    @contextmanager
    def tab(self) -> Iterator[Any]:
        """One of the app's browser tabs (a gradio_client session), free for this request."""
        from gradio_client import Client

        try:
            client = self.tabs.get_nowait()
        except queue.Empty:
            client = Client(self.url, verbose=False)
        try:
            yield client
        finally:
            self.tabs.put(client)

    def gradio_chat(self, request: LoadRequest, timing: RequestTiming, start: float) -> Answer:
        from playground.chat_history import FOOTER_START

        settings = request.settings
        values = (
            settings.temperature,
            0,
            settings.top_p,
            0.0,
            1.0,
            request.max_tokens,
            str(request.seed),
            False,
        )
        shown, outputs = "", None
        with self.tab() as client:
            job = client.submit(CHAT_MESSAGES[request.template], [], "", *values, api_name="/chat")
            for outputs in job:
                answer = _last_answer(outputs[1]).split(FOOTER_START)[0]
                if len(answer) > len(shown):
                    timing.token_times.append(time.perf_counter() - start)
                    shown = answer
            outputs = job.outputs()[-1]
        made = GENERATED.search(str(outputs[3]))
        timing.tokens = int(made[1]) if made else 0
        final = _last_answer(outputs[1]).split(FOOTER_START)[0].rstrip()
        return Answer(final, timing.tokens == request.max_tokens)

    def step(self, request: LoadRequest, timing: RequestTiming, start: float) -> Answer:
        with self.tab() as client:
            outputs = client.predict(STEP_PROMPTS[request.template], False, api_name="/step_start")
        timing.token_times.append(time.perf_counter() - start)
        return Answer(step_view(outputs), False)


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream, to [DONE]; an error event raises."""
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[len("data: ") :]
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(event["error"]["message"])
        yield event


def _last_answer(history: list) -> str:
    from playground.chat import normalize_history

    messages = normalize_history(history)
    return messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""


def same_answer(seen: Answer, alone: Answer) -> bool:
    """seen is alone's answer, or its start when seen ran to its max_tokens."""
    if isinstance(seen.text, str) and isinstance(alone.text, str):
        return seen.text == alone.text or (seen.full and alone.text.startswith(seen.text))
    return seen.text == alone.text

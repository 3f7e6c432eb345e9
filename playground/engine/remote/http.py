"""HTTP to a serving engine: JSON requests and server-sent-event streams, every failure a clear message.

One `HttpClient` per engine (a pooled `httpx.Client`, safe to share between threads). Every call
has a connect timeout and a read timeout, so nothing waits forever: a down engine, a timeout, a
connection broken mid-stream, an HTTP error and a non-JSON answer each raise `EngineUnavailable`
naming the engine, the URL and what to do. A later call simply tries again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from playground.errors import EngineUnavailable
from playground.messages import Message

try:  # a full-vocabulary answer is megabytes of JSON: orjson (a Gradio dependency) reads it 3-5x faster
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - plain json works the same, slower
    _fast_loads = json.loads


def _loads(data: bytes | str) -> Any:
    """JSON, fast; NaN and (-)Infinity literals (which some servers send for log(0)) still parse."""
    try:
        return _fast_loads(data)
    except ValueError:
        return json.loads(data)


CONNECT_TIMEOUT = 5.0  # seconds to open a connection (a down engine fails fast)
DEFAULT_READ_TIMEOUT = 120.0  # seconds between bytes of an answer (a long prefill on CPU sends nothing)


class HttpClient:
    """JSON over HTTP to one engine; `what` names it in messages ("the llama.cpp server")."""

    def __init__(
        self,
        base_url: str,
        what: str,
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.what = what
        self.read_timeout = float(read_timeout)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(self.read_timeout, connect=CONNECT_TIMEOUT)
        self._client = httpx.Client(
            base_url=self.base_url, timeout=timeout, headers=headers, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        with self._errors(path):
            response = self._client.get(path, timeout=self._timeout(timeout))
            return self._json(path, response)

    def get_text(self, path: str, *, timeout: float | None = None) -> str:
        with self._errors(path):
            response = self._client.get(path, timeout=self._timeout(timeout))
            self._raise_for_status(path, response)
            return response.text

    def post_json(self, path: str, body: dict[str, Any], *, timeout: float | None = None) -> Any:
        with self._errors(path):
            response = self._client.post(path, json=body, timeout=self._timeout(timeout))
            return self._json(path, response)

    def stream_events(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST body and yield each server-sent event's JSON (`data: {...}` lines; `[DONE]` ends).
        Closing the generator closes the connection: the engine then stops generating."""
        with self._errors(path), self._client.stream("POST", path, json=body) as response:
            if response.status_code >= 400:
                response.read()
                self._raise_for_status(path, response)
            for line in response.iter_lines():
                event = _event(line)
                if event is _DONE:
                    return
                if event is not None:
                    if isinstance(event, dict) and "error" in event:
                        raise EngineUnavailable(
                            Message(
                                "remote.error.stopped",
                                "{where} stopped with an error: {why}",
                                where=self._where(path),
                                why=_message(event),
                            )
                        )
                    yield event

    # --- helpers ---------------------------------------------------------------------------

    def _timeout(self, timeout: float | None) -> httpx.Timeout:
        return httpx.Timeout(timeout or self.read_timeout, connect=CONNECT_TIMEOUT)

    def _where(self, path: str) -> Message:
        return Message("remote.where", "{what} at {url}", what=self.what, url=f"{self.base_url}{path}")

    def _json(self, path: str, response: httpx.Response) -> Any:
        self._raise_for_status(path, response)
        try:
            return _loads(response.content)
        except ValueError:
            raise EngineUnavailable(
                Message(
                    "remote.error.not_json",
                    "{where} answered something that is not JSON ({text!r}): is this URL really that engine?",
                    where=self._where(path),
                    text=response.text[:120],
                )
            ) from None

    def _raise_for_status(self, path: str, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            detail = _message(response.json())
        except ValueError:
            detail = response.text[:300] or response.reason_phrase
        raise EngineUnavailable(
            Message(
                "remote.error.http_refused",
                "{where} refused the request (HTTP {status}): {detail}",
                where=self._where(path),
                status=response.status_code,
                detail=detail,
            )
        )

    @contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Turn transport failures into EngineUnavailable with what happened and what to do."""
        where = self._where(path)
        try:
            yield
        except httpx.ConnectError as exc:
            raise EngineUnavailable(
                Message(
                    "remote.error.unreachable",
                    "Cannot reach {where} ({why}). Is it running? Start it (README: 'Bigger models') or fix "
                    "the engine URL, then retry.",
                    where=where,
                    why=_reason(exc),
                )
            ) from None
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise EngineUnavailable(
                    Message(
                        "remote.error.connect_timeout",
                        "{where} did not connect within {limit:g} s. It may be overloaded or stuck; retry, "
                        "or raise PLAYGROUND_ENGINE_TIMEOUT for very long prompts.",
                        where=where,
                        limit=CONNECT_TIMEOUT,
                    )
                ) from None
            raise EngineUnavailable(
                Message(
                    "remote.error.answer_timeout",
                    "{where} did not answer within {limit:g} s. It may be overloaded or stuck; retry, or "
                    "raise PLAYGROUND_ENGINE_TIMEOUT for very long prompts.",
                    where=where,
                    limit=self.read_timeout,
                )
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise EngineUnavailable(
                Message(
                    "remote.error.broke",
                    "The connection to {where} broke ({why}): the engine stopped or restarted. Retry.",
                    where=where,
                    why=_reason(exc),
                )
            ) from None
        except httpx.HTTPError as exc:
            raise EngineUnavailable(
                Message(
                    "remote.error.http",
                    "HTTP error talking to {where}: {why}. Retry.",
                    where=where,
                    why=_reason(exc),
                )
            ) from None


_DONE = object()


def _event(line: str) -> Any:
    """One SSE line: the decoded JSON of a `data:` line, _DONE for `[DONE]`, None for anything else."""
    if not line.startswith("data:"):
        return None  # comments (": ping"), event names, blank separators
    payload = line[5:].strip()
    if payload == "[DONE]":
        return _DONE
    if not payload:
        return None
    try:
        return _loads(payload)
    except ValueError:
        raise EngineUnavailable(
            Message(
                "remote.error.stream_not_json",
                "The engine streamed something that is not JSON: {payload!r}",
                payload=payload[:120],
            )
        ) from None


def _message(data: Any) -> str:
    """The human message inside an engine's error JSON (OpenAI, llama.cpp and SGLang shapes)."""
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("detail") or error)[:500]
        if isinstance(error, str):
            return error[:500]
        if "detail" in data:
            return str(data["detail"])[:500]
    return str(data)[:500]


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__

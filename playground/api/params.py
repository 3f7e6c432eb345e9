"""The OpenAI request bodies read and checked: every bad parameter is an `ApiError` (HTTP 400) whose
message names the parameter and the value, as OpenAI's own errors do. No web framework here.

Chat (`/v1/chat/completions`) and completions (`/v1/completions`) take the same sampling parameters:
`temperature` (0-2, 0 = greedy), `top_p`, `top_k` and `min_p` (vLLM's extras), `seed`, `max_tokens`
(chat also `max_completion_tokens`), `stop` (up to 4 strings), `stream` with `stream_options`, `n` (1),
and log-probs: chat's `logprobs` (bool) with `top_logprobs` (0-20), completions' `logprobs` (0-20).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from playground.engine.prompts import Message
from playground.engine.sampling import SamplingSettings

MAX_TOP_LOGPROBS = 20
MAX_STOP = 4
MAX_SEED = 2**63 - 1
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's legacy completions default
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SAMPLING_KEYS = {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "max_tokens", "stop"}
COMMON_KEYS = SAMPLING_KEYS | {"model", "stream", "stream_options", "n", "user"}
COMMON_KEYS |= {"presence_penalty", "frequency_penalty", "logit_bias"}  # accepted when they change nothing
CHAT_KEYS = COMMON_KEYS | {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}
COMPLETION_KEYS = COMMON_KEYS | {"prompt", "logprobs", "echo", "suffix", "best_of"}


class ApiError(Exception):
    """An OpenAI-style error: HTTP status, message, the parameter at fault and a code."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return {"error": error}


@dataclass(frozen=True)
class Params:
    """What one request asks for, checked."""

    model: str
    settings: SamplingSettings
    seed: int | None  # None: a random seed
    max_tokens: int | None  # None: as many as the context and the app's limit allow
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # alternatives per token (0..20); None: no log-probs
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the token counts


@dataclass(frozen=True)
class ChatBody:
    params: Params
    messages: list[Message]  # user and assistant turns, the last one the user's
    system_prompt: str  # "" : the model's own default


@dataclass(frozen=True)
class CompletionBody:
    params: Params
    prompt: str | list[int]  # text, or token ids


def chat_body(body: Any, max_tokens_limit: int) -> ChatBody:
    """A chat completions request read and checked (ApiError on the first bad parameter)."""
    body = _object(body, CHAT_KEYS)
    newer = _whole(body, "max_completion_tokens", 1, max_tokens_limit, default=None)
    if newer is not None:  # the newer name wins
        body = {**body, "max_tokens": newer}
    top = None
    if _boolean(body, "logprobs", False):
        top = _whole(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, default=0)
    elif body.get("top_logprobs") is not None:
        raise ApiError("top_logprobs needs logprobs: true.", param="top_logprobs")
    params = _params(body, top, None, max_tokens_limit)
    messages, system = _messages(body.get("messages"))
    return ChatBody(params, messages, system)


def completion_body(body: Any, max_tokens_limit: int) -> CompletionBody:
    """A (legacy) completions request read and checked."""
    body = _object(body, COMPLETION_KEYS)
    _only(body, "echo", (False, None), "echo is not supported")
    _only(body, "suffix", (None, ""), "suffix is not supported")
    _only(body, "best_of", (1, None), "best_of must be 1")
    top = _whole(body, "logprobs", 0, MAX_TOP_LOGPROBS, default=None)
    params = _params(body, top, COMPLETIONS_DEFAULT_MAX_TOKENS, max_tokens_limit)
    return CompletionBody(params, _prompt(body.get("prompt")))


def _object(body: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(body, Mapping):
        raise ApiError("The request body must be a JSON object.")
    unknown = sorted(set(body) - known)
    if unknown:
        raise ApiError(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    return dict(body)


def _params(body: dict[str, Any], top: int | None, default_max: int | None, limit: int) -> Params:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError("model is required: one of the names GET /v1/models lists.", param="model")
    _only(body, "n", (1, None), "n must be 1: one answer per request")
    for name in ("presence_penalty", "frequency_penalty"):
        _only(body, name, (0, None), f"{name} is not supported (only 0)")
    _only(body, "logit_bias", (None, {}), "logit_bias is not supported")
    stream = _boolean(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, Mapping)):
        raise ApiError(
            "stream_options is only allowed with stream: true, as an object.", param="stream_options"
        )
    return Params(
        model=model,
        settings=_settings(body),
        seed=_whole(body, "seed", 0, MAX_SEED, default=None),
        max_tokens=_whole(body, "max_tokens", 1, limit, default=default_max),
        stop=_stop(body.get("stop")),
        logprobs=top,
        stream=stream,
        include_usage=bool(options and _boolean(options, "include_usage", False)),
    )


def _settings(body: dict[str, Any]) -> SamplingSettings:
    top_k = _whole(body, "top_k", -1, 1 << 30, default=0)
    return SamplingSettings(
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        top_p=_number(body, "top_p", 0.0, 1.0, 1.0, open_low=True),
        top_k=max(top_k, 0),  # -1 (vLLM's "off") is 0 here
        min_p=_number(body, "min_p", 0.0, 1.0, 0.0),
        repetition_penalty=_number(body, "repetition_penalty", 0.0, 10.0, 1.0, open_low=True),
    )


def _number(
    body: Mapping[str, Any], name: str, low: float, high: float, default: float, open_low: bool = False
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(f"{name} must be a number, got {value!r}.", param=name)
    if value > high or value < low or (open_low and value == low):
        bracket = "(" if open_low else "["
        raise ApiError(f"{name} must be in {bracket}{low:g}, {high:g}], got {value!r}.", param=name)
    return float(value)


def _whole(body: Mapping[str, Any], name: str, low: int, high: int, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"{name} must be a whole number, got {value!r}.", param=name)
    if not low <= value <= high:
        raise ApiError(f"{name} must be between {low} and {high}, got {value}.", param=name)
    return value


def _boolean(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{name} must be true or false, got {value!r}.", param=name)
    return value


def _only(body: Mapping[str, Any], name: str, allowed: tuple[Any, ...], why: str) -> None:
    value = body.get(name)
    if value is None or any(
        value == ok and isinstance(value, bool) == isinstance(ok, bool) for ok in allowed
    ):
        return
    raise ApiError(f"{why}, got {value!r}.", param=name)


def _stop(value: Any) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(f"stop must be a string or a list of non-empty strings, got {value!r}.", param="stop")
    if len(stops) > MAX_STOP:
        raise ApiError(f"stop takes at most {MAX_STOP} strings, got {len(stops)}.", param="stop")
    return tuple(stops)


def _messages(value: Any) -> tuple[list[Message], str]:
    """The conversation without its system messages, and their text (the system prompt)."""
    if not isinstance(value, list) or not value:
        raise ApiError("messages must be a non-empty list of {role, content} objects.", param="messages")
    turns, system = [], []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping) or ROLES.get(message.get("role")) is None:
            raise ApiError(f"{where} needs a role (system, developer, user or assistant).", param=where)
        role, text = ROLES[message["role"]], _content(message.get("content"), where)
        if role == "system":
            system.append(text)
        else:
            turns.append({"role": role, "content": text})
    if not turns or turns[-1]["role"] != "user":
        raise ApiError("The last message must be the user's: there is nothing to answer.", param="messages")
    if not turns[-1]["content"].strip():
        raise ApiError("The last user message is empty.", param="messages")
    return turns, "\n\n".join(system)


def _content(content: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts (other parts are refused)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise ApiError(f"{where}.content must be text (a string or a list of text parts).", param=where)


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one
    if isinstance(value, str) and value:
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        return list(value)
    raise ApiError(
        "prompt must be a non-empty string or a list of token ids (one prompt per request).", param="prompt"
    )

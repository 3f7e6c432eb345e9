"""What every engine adapter answers, in engine-neutral terms (token ids, log-probs, timings).

An adapter speaks one engine's native HTTP API (llamacpp.py, vllm.py, sglang.py) and nothing
else: `RemoteEngine` (engine.py) builds every feature on these few calls. Alternatives are keyed
by token id, never by text, and every log-prob is of the raw distribution (temperature 1, no
filters, no penalties) unless a `StreamToken` says otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.engine.protocols import ServerKV
from playground.engine.remote.http import HttpClient
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable
from playground.messages import Message

# Below this a log-prob is "zero probability": llama.cpp sends float's lowest for log(0),
# vLLM clamps -inf to -9999.
NEG_INF_FLOOR = -9000.0


def clean_logprob(value: Any) -> float:
    """A log-prob from JSON as a float; None, NaN and the engines' stand-ins for log(0) become -inf."""
    if value is None:
        return -math.inf
    number = float(value)
    return -math.inf if math.isnan(number) or number <= NEG_INF_FLOOR else number


@dataclass
class Position:
    """The distribution after some prefix: the engine's top-N (ids, log-probs), best first, plus
    the log-probs of other tokens learned on the way (a given token outside the top-N)."""

    top_ids: list[int]
    top_logprobs: list[float]
    extra: dict[int, float] = field(default_factory=dict)

    def knows(self, token_id: int) -> bool:
        return token_id in self.extra or token_id in self.top_ids

    def logprob(self, token_id: int) -> float:
        """The token's log-prob; -inf when the engine did not say."""
        if token_id in self.extra:
            return self.extra[token_id]
        try:
            return self.top_logprobs[self.top_ids.index(token_id)]
        except ValueError:
            return -math.inf

    @property
    def n(self) -> int:
        return len(self.top_ids)


def position_from_pairs(
    pairs: Sequence[tuple[int, Any]],
    chosen: int | None = None,
    chosen_logprob: Any = None,
    limit: int | None = None,
) -> Position:
    """A Position from (id, log-prob) pairs in any order, the best `limit` as the top-N; the chosen
    token's own log-prob is kept even when it is outside the top-N (vLLM adds it as entry N+1)."""
    ordered = sorted(((int(i), clean_logprob(lp)) for i, lp in pairs), key=lambda p: -p[1])
    kept = ordered[:limit] if limit is not None else ordered
    position = Position([i for i, _ in kept], [lp for _, lp in kept])
    given = dict(ordered)
    if chosen is not None and not position.knows(chosen):
        value = chosen_logprob if chosen_logprob is not None else given.get(int(chosen))
        if value is not None:
            position.extra[int(chosen)] = clean_logprob(value)
    return position


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, labels, rest = line, {}, ""
        if "{" in line:
            name, _, tail = line.partition("{")
            body, _, rest = tail.rpartition("}")
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
        else:
            name, _, rest = line.partition(" ")
        try:
            samples.append((name.strip(), labels, float(rest.split()[0])))
        except (ValueError, IndexError):
            continue
    return samples


def whole(value: Any) -> int | None:
    """An int from a label or JSON value ("661", 661.0); None for "None", "", null."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


@dataclass
class ServerInfo:
    """What the engine says about itself and its model (None = it does not say)."""

    model: str  # the served model's name or id
    context_length: int | None
    vocab_size: int | None
    model_source: str | None  # a path or Hub id the model was loaded from (to find its tokenizer)
    max_top_n: int | None  # most alternatives per position it returns (None: the whole vocabulary)
    parallel: int = 1  # requests it runs at once (llama.cpp slots); beams are sent this many at a time
    version: str = ""


@dataclass
class StreamToken:
    """One generated token as the engine streamed it: id, raw log-prob, raw top alternatives."""

    id: int
    position: Position  # the distribution it was drawn from (top-N + the token's own log-prob)


@dataclass
class StreamProgress:
    """Prompt tokens read so far (engines that report prefill progress)."""

    done: int
    total: int


@dataclass
class ServerTimings:
    """The engine's own account of one streamed request."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    stop: str = ""  # why the engine stopped: "eos", "limit", "word", ...

    @property
    def decode_tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


StreamEvent = StreamToken | StreamProgress | ServerTimings


class Adapter:
    """One engine's native API. Subclasses set `kind` and implement the calls below."""

    kind = ""
    label = ""  # for messages: "the llama.cpp server"
    tested_live = False  # has this adapter been tested against a live server of its engine?
    has_score = False  # prompt scoring: log-probs of given tokens in one request

    def __init__(self, http: HttpClient) -> None:
        self.http = http

    def server_info(self) -> ServerInfo:
        raise NotImplementedError

    def tokenize(self, text: str) -> list[int]:
        """The engine's own ids for text, without special tokens (for the tokenizer check)."""
        raise NotImplementedError

    def next_token(self, ids: Sequence[int], n: int, force: int | None = None) -> Position:
        """The raw distribution after ids: top-n (and force's log-prob when force is given)."""
        raise NotImplementedError

    def score(self, ids: Sequence[int], start: int, n: int) -> list[Position]:
        """Positions after ids[:m] for m = start .. len(ids), in one request (prompt scoring)."""
        raise EngineUnavailable(
            Message("remote.error.no_score", "{label} has no prompt scoring.", label=self.label)
        )

    def stream(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        seed: int,
        stop_ids: Sequence[int],
    ) -> Iterator[StreamEvent]:
        """Generate after ids with the user's settings on the server; yield progress, then each token
        with its raw top-n, then the engine's timings. Stops after a stop id or max_tokens."""
        raise NotImplementedError

    def kv_figures(self) -> ServerKV | None:
        """The engine's KV capacity and usage, or None when it does not expose them."""
        return None

    def stream_problem(self, settings: SamplingSettings) -> str | None:
        """Why the server cannot sample with these settings itself, exactly as the playground defines
        them (None: it can); the engine then samples on this side, one request per token."""
        return None

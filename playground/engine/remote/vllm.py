"""vLLM's OpenAI-compatible server: `/v1/completions` with token-id prompts. Not yet tested against a
live server (vLLM needs a GPU or its own CPU build); tests/test_remote_shapes.py checks it on
response shapes taken from vLLM's source.

Shapes from vllm-project/vllm (vllm/entrypoints/openai/completion/protocol.py `CompletionRequest`,
`CompletionLogProbs`, `CompletionResponseChoice`; completion/serving.py `_create_completion_logprobs`;
generate/base/serving.py `format_token_id_placeholder`, `clamp_prompt_logprobs`):
- `prompt: list[int]`; `logprobs: N` (at most `--max-logprobs`, default 20; -1 there = the whole
  vocabulary); `prompt_logprobs: N` (not with `stream`); `return_tokens_as_token_ids` writes tokens
  as "token_id:{id}", so alternatives are keyed by id, never by text.
- `choices[0].logprobs = {tokens, token_logprobs, top_logprobs: [{"token_id:5": -0.1, ...}], text_offset}`;
  a top dict holds the sampled token too (up to N+1 entries); -inf is sent as -9999.0.
- `choices[0].prompt_logprobs = [None, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]`: entry i is
  the distribution before prompt token i and always contains that token.
- Too many log-probs: HTTP 400 "Requested sample logprobs of X, which is greater than max allowed: Y".
- Log-probs are raw (before temperature and filters) under the default `--logprobs-mode raw_logprobs`;
  connect() checks that with two requests.
- Metrics: `vllm:cache_config_info` (labels num_gpu_blocks, block_size, cache_dtype, ...) and
  `vllm:kv_cache_usage_perc` (older: `vllm:gpu_cache_usage_perc`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from playground.engine.remote.adapter import (
    Adapter,
    Position,
    ServerInfo,
    ServerKV,
    ServerTimings,
    StreamEvent,
    StreamToken,
    parse_prometheus,
    position_from_pairs,
    whole,
)
from playground.engine.sampling import DEFAULT_ORDER, SamplingSettings
from playground.errors import EngineUnavailable
from playground.messages import Message

TOKEN_PREFIX = "token_id:"
_MAX_ALLOWED = re.compile(r"max allowed:\s*(-?\d+)", re.IGNORECASE)
PROBE_LOGPROBS = 2**31 - 1  # more than any vocabulary: the refusal names the server's maximum


class VLLMAdapter(Adapter):
    kind = "vllm"
    label = Message("remote.label.vllm", "the vLLM server")
    tested_live = False
    has_score = True

    def __init__(self, http: Any) -> None:
        super().__init__(http)
        self.model = ""

    def server_info(self) -> ServerInfo:
        self.http.get_text("/health", timeout=10)
        card = (self.http.get_json("/v1/models", timeout=10).get("data") or [{}])[0]
        self.model = str(card.get("id") or "")
        context = whole(card.get("max_model_len"))
        return ServerInfo(
            model=self.model or "vLLM model",
            context_length=context,
            vocab_size=None,
            model_source=card.get("root") or self.model or None,
            max_top_n=self._max_logprobs(),
            parallel=8,
            version=str(card.get("owned_by") or ""),
        )

    def _max_logprobs(self) -> int | None:
        """Ask for more log-probs than any vocabulary has; the refusal names the limit (a full-vocabulary
        server names its vocabulary size, which is then the whole vocabulary)."""
        body = self._body([0], SamplingSettings(temperature=0), 1, PROBE_LOGPROBS)
        try:
            self.http.post_json("/v1/completions", body)
        except EngineUnavailable as exc:
            found = _MAX_ALLOWED.search(str(exc))
            if found is None:
                raise
            limit = int(found.group(1))
            if limit <= 0:
                raise EngineUnavailable(
                    Message(
                        "remote.error.max_logprobs",
                        "{label} returns no log-probs (--max-logprobs {limit}); the playground needs them: "
                        "restart it with --max-logprobs 20 or more (-1 = the whole vocabulary).",
                        label=self.label,
                        limit=limit,
                    )
                ) from None
            return limit
        return None

    def tokenize(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return [int(t) for t in self.http.post_json("/tokenize", body)["tokens"]]

    def next_token(self, ids: Sequence[int], n: int, force: int | None = None) -> Position:
        if force is not None:
            return self.score([*ids, int(force)], len(ids), n)[0]
        answer = self.http.post_json(
            "/v1/completions", self._body(ids, SamplingSettings(temperature=0), 1, n)
        )
        return _positions(_choice(answer), n)[0].position

    def score(self, ids: Sequence[int], start: int, n: int) -> list[Position]:
        """prompt_logprobs for every prompt position (vLLM computes them all; we keep start..) and
        the generated token's position for the last one."""
        body = {**self._body(ids, SamplingSettings(temperature=0), 1, n), "prompt_logprobs": int(n)}
        choice = _choice(self.http.post_json("/v1/completions", body))
        prompt = choice.get("prompt_logprobs") or []
        if len(prompt) != len(ids):
            raise EngineUnavailable(
                Message(
                    "remote.error.prompt_logprobs_count",
                    "{label} returned {got} prompt log-probs for {count} tokens.",
                    label=self.label,
                    got=len(prompt),
                    count=len(ids),
                )
            )
        positions = [_prompt_position(prompt[m], ids[m], n) for m in range(max(start, 1), len(ids))]
        return [*positions, _positions(choice, n)[0].position]

    def stream(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        seed: int,
        stop_ids: Sequence[int],
    ) -> Iterator[StreamEvent]:
        body = {
            **self._body(ids, settings, max_tokens, n, seed),
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,  # stop exactly on our end tokens, as the in-process engine does
            "stop_token_ids": [int(t) for t in stop_ids],
        }
        timings = ServerTimings()
        for event in self.http.stream_events("/v1/completions", body):
            for choice in event.get("choices") or []:
                yield from _positions(choice, n)
                timings.stop = str(choice.get("finish_reason") or timings.stop)
            usage = event.get("usage") or {}
            timings.prompt_tokens = int(usage.get("prompt_tokens") or timings.prompt_tokens)
            timings.generated_tokens = int(usage.get("completion_tokens") or timings.generated_tokens)
        yield timings

    def stream_problem(self, settings: SamplingSettings) -> str | None:
        if settings.typical_p < 1.0:
            return "vLLM has no typical-p sampling"
        if tuple(settings.order) != DEFAULT_ORDER:
            return "vLLM applies its sampling stages in a fixed order"
        return None

    def kv_figures(self) -> ServerKV | None:
        samples = parse_prometheus(self.http.get_text("/metrics", timeout=10))
        info = next((labels for name, labels, _ in samples if name == "vllm:cache_config_info"), None)
        if info is None:
            return None
        blocks, block = whole(info.get("num_gpu_blocks")), whole(info.get("block_size"))
        capacity = whole(info.get("kv_cache_size_tokens")) or (blocks * block if blocks and block else None)
        if not capacity:
            return None
        usage = next(
            (
                v
                for name, _, v in samples
                if name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
            ),
            None,
        )
        used = round(usage * capacity) if usage is not None else None
        memory = whole(info.get("kv_cache_memory_bytes"))
        return ServerKV(
            capacity, used, usage, block, blocks, info.get("cache_dtype"), "vllm:cache_config_info", memory
        )

    def _body(
        self, ids: Sequence[int], settings: SamplingSettings, max_tokens: int, n: int, seed: int | None = None
    ) -> dict[str, Any]:
        """A completions request with token ids, the user's sampler settings and raw top-n log-probs."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in ids],
            "max_tokens": int(max_tokens),
            "logprobs": int(n),
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "temperature": float(settings.temperature),
            "top_k": int(settings.top_k),  # 0 = off
            "top_p": float(settings.top_p),
            "min_p": float(settings.min_p),
            "repetition_penalty": float(settings.repetition_penalty),
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
        }
        if seed is not None:
            body["seed"] = int(seed)
        return body


def _choice(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices") or []
    if not choices:
        raise EngineUnavailable(
            Message("remote.error.no_choices", "The vLLM server answered without choices.")
        )
    return choices[0]


def token_id(token: str) -> int:
    """The id in a "token_id:123" placeholder (return_tokens_as_token_ids)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise EngineUnavailable(
            Message(
                "remote.error.keyed_by_text",
                "vLLM keyed a log-prob by text ({token!r}), not by token id: it ignored "
                "return_tokens_as_token_ids.",
                token=token,
            )
        )
    return int(token[len(TOKEN_PREFIX) :])


def _positions(choice: dict[str, Any], n: int) -> list[StreamToken]:
    """The generated tokens of a choice with their distributions (top-n, plus the token itself)."""
    logprobs = choice.get("logprobs")
    if not logprobs:
        if choice.get("text") or choice.get("token_ids"):
            raise EngineUnavailable(
                Message(
                    "remote.error.tokens_without_logprobs",
                    "The vLLM server returned tokens without log-probs.",
                )
            )
        return []
    result = []
    for token, value, top in zip(
        logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True
    ):
        chosen = token_id(token)
        pairs = [(token_id(key), lp) for key, lp in (top or {}).items()]
        result.append(StreamToken(chosen, position_from_pairs(pairs, chosen, value, limit=n)))
    return result


def _prompt_position(entry: dict[str, Any] | None, token: int, n: int) -> Position:
    """One prompt_logprobs entry ({"<id>": {"logprob", "rank", ...}}): the top-n by rank, plus the
    prompt token's own log-prob (always present)."""
    if not entry:
        raise EngineUnavailable(
            Message(
                "remote.error.prompt_logprob_missing",
                "The vLLM server left out a prompt log-prob (is prefix caching hiding it?).",
            )
        )
    items = [(int(key), value.get("logprob"), value.get("rank")) for key, value in entry.items()]
    top = [(i, lp) for i, lp, rank in items if rank is None or int(rank) <= n]
    own = next((lp for i, lp, _ in items if i == int(token)), None)
    return position_from_pairs(top, int(token), own, limit=n)

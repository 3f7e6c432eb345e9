"""SGLang's native `/generate` with `input_ids`. Not yet tested against a live server (SGLang needs a GPU
or an AMX Xeon); tests/test_remote_shapes.py checks it on response shapes taken from SGLang's source.

Shapes from sgl-project/sglang (python/sglang/srt/managers/io_struct.py `GenerateReqInput`;
tokenizer_manager.py `add_logprob_to_meta_info`, `detokenize_logprob_tokens` and
tokenizer_manager_components/output_processor.py; entrypoints/http_server.py; test_srt_endpoint.py
`test_logprob_start_len`):
- request: `input_ids`, `sampling_params`, `return_logprob`, `top_logprobs_num`, `logprob_start_len`
  (-1 = output tokens only), `stream`.
- `meta_info.output_token_logprobs = [[logprob, id, text|null], ...]`,
  `meta_info.output_top_logprobs = [[[logprob, id, text|null], ...] per token]`, and the same for
  `input_*` from `logprob_start_len` on (`prompt_tokens == logprob_start_len + len(input_token_logprobs)`;
  the very first prompt token has a null log-prob).
- Streaming repeats the whole lists in every chunk unless the server runs with
  `--incremental-streaming-output` (then each chunk holds only its new tokens); `completion_tokens`
  tells which.
- Log-probs are log_softmax(logits / temperature) unless the server runs with
  SGLANG_RETURN_ORIGINAL_LOGPROB=1; temperature 0 and 1 give raw ones. connect() checks which.
- `/get_server_info` holds `max_total_num_tokens` (the KV pool in tokens); with `--enable-metrics`,
  `/metrics` has `sglang:token_usage` and `sglang:num_used_tokens`.
"""

from __future__ import annotations

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

GREEDY = SamplingSettings(temperature=0)


class SGLangAdapter(Adapter):
    kind = "sglang"
    label = Message("remote.label.sglang", "the SGLang server")
    tested_live = False
    has_score = True

    def server_info(self) -> ServerInfo:
        self.http.get_text("/health", timeout=10)
        info = self.http.get_json("/get_model_info", timeout=10)
        server = self._server_info()
        context = whole(server.get("context_length")) or whole(server.get("max_req_input_len"))
        return ServerInfo(
            model=str(server.get("served_model_name") or info.get("model_path") or "SGLang model"),
            context_length=context,
            vocab_size=None,
            model_source=info.get("tokenizer_path") or info.get("model_path") or None,
            max_top_n=None,
            parallel=8,
            version=str(server.get("version") or ""),
        )

    def _server_info(self) -> dict[str, Any]:
        try:
            return self.http.get_json("/get_server_info", timeout=10)
        except EngineUnavailable:
            return self.http.get_json("/server_info", timeout=10)  # newer releases renamed it

    def tokenize(self, text: str) -> list[int]:
        try:
            answer = self.http.post_json("/v1/tokenize", {"prompt": text, "add_special_tokens": False})
            return [int(t) for t in answer["tokens"]]
        except EngineUnavailable as exc:
            if "HTTP 404" not in str(exc):
                raise
        # Older servers: read the ids the server gives the text back from the prompt log-probs.
        body = {
            "text": text,
            "sampling_params": {"max_new_tokens": 1},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        meta = self.http.post_json("/generate", body)["meta_info"]
        return [int(entry[1]) for entry in meta["input_token_logprobs"]]

    def next_token(self, ids: Sequence[int], n: int, force: int | None = None) -> Position:
        if force is not None:
            return self.score([*ids, int(force)], len(ids), n)[0]
        meta = self._generate(ids, GREEDY, 1, n, start=-1)
        return _outputs(meta, n, 0)[0].position

    def score(self, ids: Sequence[int], start: int, n: int) -> list[Position]:
        """Input log-probs from `start` on (the radix cache is reused up to there) and the output's."""
        start = max(1, int(start))
        meta = self._generate(ids, GREEDY, 1, n, start=start)
        tokens, tops = meta.get("input_token_logprobs") or [], meta.get("input_top_logprobs") or []
        count = len(ids) - start
        if len(tokens) < count or len(tops) < count:
            raise EngineUnavailable(
                Message(
                    "remote.error.prompt_logprobs_asked",
                    "{label} returned {got} prompt log-probs where {count} were asked for.",
                    label=self.label,
                    got=len(tokens),
                    count=count,
                )
            )
        positions = []
        for (logprob, token, *_), top, expected in zip(
            tokens[-count:], tops[-count:], ids[start:], strict=True
        ):
            if int(token) != int(expected):
                raise EngineUnavailable(
                    Message(
                        "remote.error.scored_other",
                        "{label} scored token {token} where the prompt has {expected}.",
                        label=self.label,
                        token=token,
                        expected=expected,
                    )
                )
            positions.append(position_from_pairs(_pairs(top), int(token), logprob, limit=n))
        return [*positions, _outputs(meta, n, 0)[0].position]

    def stream(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        seed: int,
        stop_ids: Sequence[int],
    ) -> Iterator[StreamEvent]:
        body = self._body(ids, settings, max_tokens, n, start=-1, seed=seed, stop_ids=stop_ids)
        body["stream"] = True
        seen, timings = 0, ServerTimings()
        for event in self.http.stream_events("/generate", body):
            meta = event.get("meta_info") or {}
            done = int(meta.get("completion_tokens", seen))
            entries = meta.get("output_token_logprobs") or []
            cumulative = len(entries) == done  # the whole list so far, or only the new tokens
            first = seen if cumulative else len(entries) - (done - seen)
            yield from _outputs(meta, n, max(first, 0))
            seen = done
            timings.prompt_tokens = int(meta.get("prompt_tokens") or timings.prompt_tokens)
            timings.generated_tokens = done
            finish = meta.get("finish_reason")
            timings.stop = (
                str(finish.get("type", "")) if isinstance(finish, dict) else str(finish or timings.stop)
            )
        yield timings

    def stream_problem(self, settings: SamplingSettings) -> str | None:
        if settings.typical_p < 1.0:
            return "SGLang has no typical-p sampling"
        if tuple(settings.order) != DEFAULT_ORDER:
            return "SGLang applies its sampling stages in a fixed order"
        return None

    def kv_figures(self) -> ServerKV | None:
        server = self._server_info()
        capacity = whole(server.get("max_total_num_tokens"))
        if capacity is None:
            states = server.get("internal_states") or [{}]
            capacity = whole(states[0].get("max_total_num_tokens")) if states else None
        if not capacity:
            return None
        used = usage = None
        try:
            samples = parse_prometheus(self.http.get_text("/metrics", timeout=10))
            used = next((whole(v) for name, _, v in samples if name == "sglang:num_used_tokens"), None)
            usage = next((v for name, _, v in samples if name == "sglang:token_usage"), None)
        except EngineUnavailable:
            pass  # metrics are off unless the server runs with --enable-metrics
        page = whole(server.get("page_size"))
        blocks = capacity // page if page else None
        source = "SGLang /get_server_info max_total_num_tokens"
        return ServerKV(capacity, used, usage, page, blocks, server.get("kv_cache_dtype"), source)

    def _generate(
        self, ids: Sequence[int], settings: SamplingSettings, max_tokens: int, n: int, start: int
    ) -> dict[str, Any]:
        answer = self.http.post_json("/generate", self._body(ids, settings, max_tokens, n, start=start))
        if isinstance(answer, list):
            answer = answer[0]
        meta = answer.get("meta_info")
        if not meta or "output_token_logprobs" not in meta:
            raise EngineUnavailable(
                Message(
                    "remote.error.sglang_no_logprobs",
                    "{label} answered without log-probs (meta_info.output_token_logprobs).",
                    label=self.label,
                )
            )
        return meta

    def _body(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        *,
        start: int,
        seed: int | None = None,
        stop_ids: Sequence[int] = (),
    ) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": int(max_tokens),
            "temperature": float(settings.temperature),
            "top_k": int(settings.top_k) if settings.top_k > 0 else -1,  # -1 = off
            "top_p": float(settings.top_p),
            "min_p": float(settings.min_p),
            "repetition_penalty": float(settings.repetition_penalty),
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "skip_special_tokens": False,
        }
        if stop_ids:
            sampling.update(ignore_eos=True, stop_token_ids=[int(t) for t in stop_ids])
        if seed is not None:
            sampling["sampling_seed"] = int(seed)  # honoured with --enable-deterministic-inference
        return {
            "input_ids": [int(t) for t in ids],
            "sampling_params": sampling,
            "return_logprob": True,
            "top_logprobs_num": int(n),
            "logprob_start_len": int(start),
        }


def _pairs(top: Any) -> list[tuple[int, Any]]:
    """[[logprob, id, text], ...] as (id, logprob) pairs."""
    return [(int(entry[1]), entry[0]) for entry in top or []]


def _outputs(meta: dict[str, Any], n: int, first: int) -> list[StreamToken]:
    """The output tokens from index `first` on, each with its top-n and own log-prob."""
    tokens = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or [None] * len(tokens)
    result = []
    for (logprob, token, *_), top in zip(tokens[first:], tops[first:], strict=True):
        result.append(StreamToken(int(token), position_from_pairs(_pairs(top), int(token), logprob, limit=n)))
    return result

"""llama.cpp's llama-server on its native API (`/completion` with integer-array prompts and `n_probs`).

Shapes from ggml-org/llama.cpp tools/server (server-task.cpp `probs_vector_to_json`, server-context.cpp
`populate_token_probs`, `send_partial_response`; the copy vendored in llama-cpp-python 0.3.36):
- `completion_probabilities: [{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}]`;
  without `post_sampling_probs` the numbers are the raw softmax of the model's logits (temperature 1),
  and the chosen token's `logprob` is exact even outside the top `n_probs`; log(0) comes as float's lowest.
- A streamed token whose text ends inside a UTF-8 character is not sent at all (no event, no
  probabilities); the next event's `tokens_predicted` then jumps. We notice the jump, drop that event
  and let the server sample the next token in a one-token request that returns its id (see `stream`).
- Its sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, ...) apply unless sent, so
  every request sends the whole sampler configuration. Temperature 0 is greedy inside the chain.
- `ignore_eos` bans end-of-generation tokens (a logit bias of -inf), so we never send it: when the
  server stops on an end token we do not stop on, the next request simply continues.
- No prompt scoring (no echo, no prompt log-probs): a given token's log-prob comes from a one-token
  request that forces it with a logit bias (raw numbers are read before the bias applies).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.engine.remote.adapter import (
    Adapter,
    Position,
    ServerInfo,
    ServerKV,
    ServerTimings,
    StreamEvent,
    StreamProgress,
    StreamToken,
    position_from_pairs,
)
from playground.engine.sampling import SamplingSettings
from playground.errors import EngineUnavailable
from playground.messages import Message

FORCE_BIAS = 1.0e4  # added to a forced token's logit: it wins greedy decoding whatever its score
# llama.cpp's names for our stages (common/sampling.cpp common_sampler_type_to_str)
SAMPLER_NAMES = {
    "repetition_penalty": "penalties",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typ_p",
}
# Every other sampler llama-server knows, switched off.
OFF = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "mirostat": 0,
    "dynatemp_range": 0.0,
    "n_indent": 0,
}
GREEDY = SamplingSettings(temperature=0)


@dataclass
class _Gap:
    """A token the server did not stream (it ended inside a UTF-8 character)."""


class LlamaCppAdapter(Adapter):
    kind = "llama.cpp"
    label = Message("remote.label.llamacpp", "the llama.cpp server")
    tested_live = True
    has_score = False

    def __init__(self, http: Any) -> None:
        super().__init__(http)
        self._context = 4096  # replaced by server_info; used for repeat_last_n (penalize every token)

    def server_info(self) -> ServerInfo:
        health = self.http.get_json("/health", timeout=10)
        if isinstance(health, dict) and health.get("status") not in (None, "ok"):
            raise EngineUnavailable(
                Message(
                    "remote.error.not_ready",
                    "{label} is not ready: {health}",
                    label=self.label,
                    health=str(health),
                )
            )
        props = self.http.get_json("/props", timeout=10)
        models = self.http.get_json("/v1/models", timeout=10)
        meta = (models.get("data") or [{}])[0].get("meta") or {}
        context = props.get("default_generation_settings", {}).get("n_ctx") or meta.get("n_ctx")
        self._context = int(context or self._context)
        return ServerInfo(
            model=Path(
                str(props.get("model_alias") or (models.get("data") or [{}])[0].get("id") or "model")
            ).name,
            context_length=int(context) if context else None,
            vocab_size=int(meta["n_vocab"]) if meta.get("n_vocab") else None,
            model_source=props.get("model_path") or None,
            max_top_n=None,  # n_probs may be as large as the vocabulary
            parallel=max(1, int(props.get("total_slots") or 1)),
            version=str(props.get("build_info") or ""),
        )

    def kv_figures(self) -> ServerKV | None:
        """llama-server allocates n_ctx cells per slot; it reports no usage or cache type to clients."""
        props = self.http.get_json("/props", timeout=10)
        per_slot = int(props.get("default_generation_settings", {}).get("n_ctx") or 0)
        if not per_slot:
            return None
        slots = max(1, int(props.get("total_slots") or 1))
        source = "llama-server /props: n_ctx per slot x slots (cache type f16 unless --cache-type-k/-v)"
        return ServerKV(per_slot * slots, None, None, None, None, "f16", source)

    def tokenize(self, text: str) -> list[int]:
        body = {"content": text, "add_special": False, "parse_special": True}
        return [int(t) for t in self.http.post_json("/tokenize", body)["tokens"]]

    # --- one position -----------------------------------------------------------------------

    def next_token(self, ids: Sequence[int], n: int, force: int | None = None) -> Position:
        body = self._body(ids, GREEDY, 1, n, seed=0)
        if force is not None:
            body["logit_bias"] = [[int(force), FORCE_BIAS]]
        body.update(stream=False)
        answer = self.http.post_json("/completion", body)
        probs = answer.get("completion_probabilities") or []
        if not probs:
            raise EngineUnavailable(
                Message(
                    "remote.error.no_n_probs",
                    "{label} returned no token probabilities (n_probs): this build or setup does not report "
                    "log-probs, which the playground needs.",
                    label=self.label,
                )
            )
        return _position(probs[0])

    def progress_query(self, ids: Sequence[int], n: int) -> Iterator[StreamProgress | Position]:
        """next_token streamed: prompt progress while a long prefix is read, then the Position
        (closing the iterator early cancels the request on the server)."""
        body = self._body(ids, GREEDY, 1, n, seed=0)
        for event in self.http.stream_events("/completion", body):
            if "prompt_progress" in event:
                yield _progress(event["prompt_progress"])
            for item in event.get("completion_probabilities") or []:
                yield _position(item)
                return
        raise EngineUnavailable(
            Message(
                "remote.error.ended_without_probs",
                "{label} ended the request without token probabilities (n_probs).",
                label=self.label,
            )
        )

    # --- generation -------------------------------------------------------------------------

    def stream(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        seed: int,
        stop_ids: Sequence[int],
    ) -> Iterator[StreamEvent]:
        """Stream with the server sampling; continue after an end token we do not stop on, and take a
        token the server did not stream (a partial UTF-8 character) from a one-token request."""
        generated: list[int] = []
        total, stops, done = ServerTimings(), set(stop_ids), False
        while not done:
            before, gap = len(generated), False
            events = self._stream_once(
                [*ids, *generated], settings, max_tokens - before, n, seed + before, not before
            )
            with closing(events):
                for event in events:
                    if isinstance(event, ServerTimings):
                        _add(total, event)  # the server's final event (read after our last token too)
                    elif isinstance(event, _Gap) or done:  # after our stop token the server may go on
                        gap = not done
                        break
                    else:
                        if isinstance(event, StreamToken):
                            generated.append(event.id)
                            done = event.id in stops or len(generated) >= max_tokens
                        yield event
            if done:
                break
            if gap:
                token = self._sample_one([*ids, *generated], settings, n, seed + len(generated))
                generated.append(token.id)
                done = token.id in stops or len(generated) >= max_tokens
                yield token
            elif len(generated) == before:
                raise EngineUnavailable(
                    Message(
                        "remote.error.no_token_generated",
                        "{label} stopped without generating a token ({why}).",
                        label=self.label,
                        why=total.stop or Message("remote.why.no_reason", "no reason given"),
                    )
                )
        yield total

    def _stream_once(
        self,
        ids: Sequence[int],
        settings: SamplingSettings,
        max_tokens: int,
        n: int,
        seed: int,
        progress: bool,
    ) -> Iterator[StreamEvent | _Gap]:
        body = self._body(ids, settings, max_tokens, n, seed)
        received = 0
        for event in self.http.stream_events("/completion", body):
            if "prompt_progress" in event:
                if progress:
                    yield _progress(event["prompt_progress"])
                continue
            items = event.get("completion_probabilities") or []
            if event.get("tokens") and not items:
                raise EngineUnavailable(
                    Message(
                        "remote.error.tokens_without_probs",
                        "{label} streamed tokens without probabilities (n_probs).",
                        label=self.label,
                    )
                )
            if items and int(event.get("tokens_predicted", received + len(items))) > received + len(items):
                yield _Gap()  # a token before this one was never sent
                return
            for item in items:
                received += 1
                yield StreamToken(int(item["id"]), _position(item))
            if event.get("stop") and event.get("timings"):
                yield _timings(event)

    def _sample_one(self, ids: Sequence[int], settings: SamplingSettings, n: int, seed: int) -> StreamToken:
        """One token sampled by the server with the user's settings; its id comes from `tokens`, its
        position from a forced request when the server left out its probabilities."""
        body = {**self._body(ids, settings, 1, n, seed), "stream": False}
        answer = self.http.post_json("/completion", body)
        tokens = answer.get("tokens") or []
        if not tokens:
            raise EngineUnavailable(
                Message(
                    "remote.error.no_token",
                    "{label} returned no token for a one-token request.",
                    label=self.label,
                )
            )
        token = int(tokens[0])
        probs = [p for p in answer.get("completion_probabilities") or [] if int(p["id"]) == token]
        position = _position(probs[0]) if probs else self.next_token(ids, n, force=token)
        return StreamToken(token, position)

    def _body(
        self, ids: Sequence[int], settings: SamplingSettings, max_tokens: int, n: int, seed: int
    ) -> dict[str, Any]:
        """A /completion request: our ids, our whole sampler chain, raw top-n log-probs."""
        return {
            "prompt": [int(t) for t in ids],
            "n_predict": int(max_tokens),
            "n_probs": int(n),
            "post_sampling_probs": False,
            "stream": True,
            "return_progress": True,
            "return_tokens": True,
            "cache_prompt": True,
            "temperature": float(settings.temperature),
            "top_k": int(settings.top_k),
            "top_p": float(settings.top_p),
            "min_p": float(settings.min_p),
            "typical_p": float(settings.typical_p),
            "repeat_penalty": float(settings.repetition_penalty),
            "repeat_last_n": self._context,  # the whole text, as transformers penalizes
            "samplers": [SAMPLER_NAMES[name] for name in settings.order] or ["temperature"],
            "seed": int(seed) % 2**32,
            **OFF,
        }


def _position(item: dict[str, Any]) -> Position:
    """One `completion_probabilities` entry: top alternatives by id, plus the token's own log-prob."""
    pairs = [(int(alt["id"]), alt.get("logprob")) for alt in item.get("top_logprobs") or []]
    return position_from_pairs(pairs, int(item["id"]), item.get("logprob"))


def _progress(data: dict[str, Any]) -> StreamProgress:
    return StreamProgress(int(data.get("processed", 0)), int(data.get("total", 0)))


def _timings(event: dict[str, Any]) -> ServerTimings:
    t = event.get("timings") or {}
    return ServerTimings(
        prompt_tokens=int(t.get("prompt_n", 0)),
        prompt_seconds=float(t.get("prompt_ms", 0.0)) / 1000,
        generated_tokens=int(t.get("predicted_n", 0)),
        decode_seconds=float(t.get("predicted_ms", 0.0)) / 1000,
        stop=str(event.get("stop_type", "")),
    )


def _add(total: ServerTimings, part: ServerTimings) -> None:
    total.prompt_tokens += part.prompt_tokens
    total.prompt_seconds += part.prompt_seconds
    total.generated_tokens += part.generated_tokens
    total.decode_seconds += part.decode_seconds
    total.stop = part.stop

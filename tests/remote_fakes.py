"""In-process stand-ins for vLLM, SGLang and llama-server HTTP APIs (httpx.MockTransport handlers).

They answer with the response shapes of the engines' own sources (cited per handler), computed
from a real in-process model (a LocalEngine), so the adapters can be checked number for number:
what the RemoteEngine shows must equal that model's own log-probs. The numbers are exact
log_softmax values of the model; only the wire format is the engine's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import torch

from playground.engine.local import LocalEngine

Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeModel:
    """Exact raw log-probs (log_softmax of the logits) of a LocalEngine, cached by prefix."""

    engine: LocalEngine
    _cache: dict[tuple[int, ...], torch.Tensor] = field(default_factory=dict)

    def logprobs(self, ids: list[int]) -> torch.Tensor:
        key = tuple(ids)
        if key not in self._cache:
            self._cache[key] = torch.log_softmax(self.engine.prefill(list(ids))[-1].float(), dim=-1)
        return self._cache[key]

    def choose(self, ids: list[int], temperature: float, generator: torch.Generator) -> int:
        lp = self.logprobs(ids)
        if temperature == 0:
            return int(lp.argmax())
        return int(torch.multinomial(torch.softmax(lp / temperature, -1), 1, generator=generator))

    def top(self, ids: list[int], n: int) -> list[tuple[int, float]]:
        values, indices = torch.topk(self.logprobs(ids), n)
        return list(zip(indices.tolist(), values.tolist(), strict=True))


def sse(events: list[Any], *, done: bool = True, fail_after: int | None = None) -> Iterator[bytes]:
    """Server-sent events; fail_after: break the connection after that many events."""
    for i, event in enumerate(events):
        if fail_after is not None and i == fail_after:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        yield f"data: {json.dumps(event)}\n\n".encode()
    if done:
        yield b"data: [DONE]\n\n"


def stream_response(events: list[Any], **kwargs: Any) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(events, **kwargs))


def generate(
    model: FakeModel,
    ids: list[int],
    body: dict[str, Any],
    temperature: float,
    max_tokens: int,
    stop_ids: set[int],
) -> list[int]:
    """The tokens a server would generate: greedy or seeded sampling, stopping on stop ids."""
    generator = torch.Generator().manual_seed(int(body.get("seed") or body.get("sampling_seed") or 0))
    out: list[int] = []
    for _ in range(max_tokens):
        token = model.choose([*ids, *out], temperature, generator)
        out.append(token)
        if token in stop_ids:
            break
    return out


# --- vLLM ------------------------------------------------------------------------------------------


@dataclass
class FakeVLLM:
    """vLLM's OpenAI server (vllm/entrypoints/openai/completion/protocol.py + serving.py shapes).

    max_logprobs: the server's --max-logprobs (-1: the whole vocabulary). processed: behave as
    --logprobs-mode processed_logprobs (log-probs after temperature). fail_stream_after: break the
    stream after that many chunks."""

    model: FakeModel
    max_logprobs: int = 20
    processed: bool = False
    fail_stream_after: int | None = None
    metrics: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            card = {
                "id": "tiny",
                "object": "model",
                "owned_by": "vllm",
                "root": "/models/tiny",
                "max_model_len": 512,
            }
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if path == "/metrics":
            return httpx.Response(200, text=self.metrics)
        body = json.loads(request.content)
        self.requests.append(body)
        if path == "/tokenize":
            ids = self.model.engine.tokenizer(
                body["prompt"], add_special_tokens=body.get("add_special_tokens", True)
            )
            return httpx.Response(
                200, json={"count": len(ids.input_ids), "max_model_len": 512, "tokens": ids.input_ids}
            )
        return self._completions(body)

    def _completions(self, body: dict[str, Any]) -> httpx.Response:
        vocab = self.model.engine.vocab_size
        limit = vocab if self.max_logprobs == -1 else self.max_logprobs
        for name in ("logprobs", "prompt_logprobs"):
            asked = body.get(name)
            asked = vocab if asked == -1 else asked
            if asked is not None and asked > limit:
                what = "sample" if name == "logprobs" else "prompt"
                message = f"Requested {what} logprobs of {asked}, which is greater than max allowed: {limit}"
                return httpx.Response(
                    400, json={"error": {"message": message, "type": "BadRequestError", "code": 400}}
                )
        ids, n = list(body["prompt"]), int(body.get("logprobs") or 0)
        stops = set(body.get("stop_token_ids") or []) | (set() if body.get("ignore_eos") else {2})
        temperature = float(body.get("temperature", 1.0))
        out = generate(self.model, ids, body, temperature, int(body.get("max_tokens", 16)), stops)
        steps = [self._logprobs([*ids, *out[:i]], token, n, temperature) for i, token in enumerate(out)]
        if body.get("stream"):
            return self._stream(out, steps, len(ids))
        choice = {"index": 0, "text": "", "finish_reason": "length", "logprobs": _merge(steps)}
        if body.get("prompt_logprobs") is not None:
            choice["prompt_logprobs"] = self._prompt_logprobs(ids, int(body["prompt_logprobs"]))
        return httpx.Response(
            200,
            json={
                "id": "cmpl-1",
                "object": "text_completion",
                "choices": [choice],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out)},
            },
        )

    def _logprobs(self, context: list[int], token: int, n: int, temperature: float) -> dict[str, Any]:
        """_create_completion_logprobs for one token: the sampled token first, then the top-n
        (OpenAI's up to n+1 entries), keyed "token_id:{id}" (return_tokens_as_token_ids), -inf as -9999."""
        lp = self.model.logprobs(context)
        if self.processed and temperature not in (0.0, 1.0):
            lp = torch.log_softmax(lp / temperature, -1)
        top = {f"token_id:{token}": max(float(lp[token]), -9999.0)}
        for i, value in zip(*[t.tolist() for t in torch.topk(lp, n)][::-1], strict=True):
            top.setdefault(f"token_id:{i}", max(value, -9999.0))
        return {
            "tokens": [f"token_id:{token}"],
            "token_logprobs": [max(float(lp[token]), -9999.0)],
            "top_logprobs": [top],
            "text_offset": [0],
        }

    def _prompt_logprobs(self, ids: list[int], n: int) -> list[Any]:
        """CompletionResponseChoice.prompt_logprobs: None, then {id: Logprob(logprob, rank, ...)}."""
        entries: list[Any] = [None]
        for m in range(1, len(ids)):
            lp = self.model.logprobs(ids[:m])
            ranks = torch.argsort(lp, descending=True)
            wanted = {int(ids[m])} | set(ranks[:n].tolist())
            entries.append(
                {
                    str(i): {
                        "logprob": float(lp[i]),
                        "rank": int((lp > lp[i]).sum()) + 1,
                        "decoded_token": None,
                    }
                    for i in wanted
                }
            )
        return entries

    def _stream(self, out: list[int], steps: list[dict[str, Any]], prompt_tokens: int) -> httpx.Response:
        chunks = [
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": "tiny",
                "choices": [
                    {
                        "index": 0,
                        "text": "",
                        "logprobs": step,
                        "finish_reason": "length" if i == len(out) - 1 else None,
                    }
                ],
            }
            for i, step in enumerate(steps)
        ]
        chunks.append(
            {
                "id": "cmpl-1",
                "choices": [],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(out)},
            }
        )
        return stream_response(chunks, fail_after=self.fail_stream_after)


def _merge(steps: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for step in steps:
        for key in merged:
            merged[key] += step[key]
    return merged


# --- SGLang ----------------------------------------------------------------------------------------


@dataclass
class FakeSGLang:
    """SGLang's native server (io_struct.GenerateReqInput; tokenizer_manager add_logprob_to_meta_info:
    [logprob, id, text] triples; streaming repeats the whole lists unless incremental)."""

    model: FakeModel
    incremental: bool = False
    original_logprob: bool = True  # SGLANG_RETURN_ORIGINAL_LOGPROB; else log-probs after temperature
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/get_model_info":
            return httpx.Response(
                200,
                json={"model_path": "/models/tiny", "tokenizer_path": "/models/tiny", "is_generation": True},
            )
        if path == "/get_server_info":
            return httpx.Response(
                200,
                json={
                    "context_length": None,
                    "max_req_input_len": 500,
                    "max_total_num_tokens": 123456,
                    "page_size": 1,
                    "kv_cache_dtype": "auto",
                    "version": "0.5.0",
                },
            )
        if path == "/metrics":
            return httpx.Response(
                200,
                text='sglang:token_usage{model_name="tiny"} 0.25\n'
                'sglang:num_used_tokens{model_name="tiny"} 30864\n',
            )
        body = json.loads(request.content)
        self.requests.append(body)
        if path == "/v1/tokenize":
            ids = self.model.engine.tokenizer(
                body["prompt"], add_special_tokens=body.get("add_special_tokens", True)
            )
            return httpx.Response(
                200, json={"tokens": ids.input_ids, "count": len(ids.input_ids), "max_model_len": 512}
            )
        return self._generate(body)

    def _generate(self, body: dict[str, Any]) -> httpx.Response:
        ids, params = list(body["input_ids"]), body.get("sampling_params") or {}
        n, start = int(body.get("top_logprobs_num") or 0), int(body.get("logprob_start_len", -1))
        stops = set(params.get("stop_token_ids") or []) | (set() if params.get("ignore_eos") else {2})
        temperature = float(params.get("temperature", 1.0))
        out = generate(self.model, ids, params, temperature, int(params.get("max_new_tokens", 16)), stops)
        outputs = [self._triple([*ids, *out[:i]], t, n, temperature) for i, t in enumerate(out)]
        meta: dict[str, Any] = {"id": "r1", "prompt_tokens": len(ids), "finish_reason": {"type": "length"}}
        meta.update(self._inputs(ids, n, start))
        if not body.get("stream"):
            return httpx.Response(
                200,
                json={
                    "text": "",
                    "output_ids": out,
                    "meta_info": {
                        **meta,
                        "completion_tokens": len(out),
                        "output_token_logprobs": [o[0] for o in outputs],
                        "output_top_logprobs": [o[1] for o in outputs],
                    },
                },
            )
        chunks = []
        for i in range(len(out)):
            first = i if self.incremental else 0
            chunks.append(
                {
                    "text": None,
                    "output_ids": out[first : i + 1],
                    "meta_info": {
                        **meta,
                        "completion_tokens": i + 1,
                        "output_token_logprobs": [o[0] for o in outputs[first : i + 1]],
                        "output_top_logprobs": [o[1] for o in outputs[first : i + 1]],
                    },
                }
            )
        return stream_response(chunks)

    def _triple(
        self, context: list[int], token: int, n: int, temperature: float
    ) -> tuple[list[Any], list[Any]]:
        lp = self.model.logprobs(context)
        if not self.original_logprob and temperature not in (0.0, 1.0):
            lp = torch.log_softmax(lp / temperature, -1)
        top = [[v, i, None] for i, v in zip(*[t.tolist() for t in torch.topk(lp, n)][::-1], strict=True)]
        return [float(lp[token]), token, None], top

    def _inputs(self, ids: list[int], n: int, start: int) -> dict[str, Any]:
        """input_* from logprob_start_len on: prompt_tokens == start + len(input_token_logprobs)."""
        if start < 0:
            return {"input_token_logprobs": [], "input_top_logprobs": []}
        tokens, tops = [], []
        for m in range(start, len(ids)):
            if m == 0:
                tokens.append([None, ids[0], None])
                tops.append(None)
                continue
            lp = self.model.logprobs(ids[:m])
            tokens.append([float(lp[ids[m]]), ids[m], None])
            tops.append(
                [[v, i, None] for i, v in zip(*[t.tolist() for t in torch.topk(lp, n)][::-1], strict=True)]
            )
        return {"input_token_logprobs": tokens, "input_top_logprobs": tops}


# --- llama-server ------------------------------------------------------------------------------------


@dataclass
class FakeLlamaServer:
    """llama-server's /completion (server-task.cpp probs_vector_to_json; server-context.cpp
    send_partial_response). skip_at: generated positions whose token is never streamed, as the
    server does for a token that ends inside a UTF-8 character."""

    model: FakeModel
    skip_at: set[int] = field(default_factory=set)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/props":
            return httpx.Response(
                200,
                json={
                    "default_generation_settings": {"n_ctx": 512},
                    "total_slots": 1,
                    "model_path": "/models/tiny.gguf",
                    "build_info": "b0-fake",
                },
            )
        if path == "/v1/models":
            return httpx.Response(
                200, json={"data": [{"id": "tiny", "meta": {"n_vocab": self.model.engine.vocab_size}}]}
            )
        body = json.loads(request.content)
        self.requests.append(body)
        if path == "/tokenize":
            ids = self.model.engine.tokenizer(
                body["content"], add_special_tokens=bool(body.get("add_special"))
            )
            return httpx.Response(200, json={"tokens": ids.input_ids})
        return self._completion(body)

    def _completion(self, body: dict[str, Any]) -> httpx.Response:
        ids, n = list(body["prompt"]), int(body.get("n_probs", 0))
        forced = {int(t): b for t, b in body.get("logit_bias") or []}
        temperature = float(body.get("temperature", 0.8))
        out: list[int] = []
        generator = torch.Generator().manual_seed(int(body.get("seed", 0)))
        for _ in range(int(body["n_predict"])):
            token = next(iter(forced)) if forced else self.model.choose([*ids, *out], temperature, generator)
            out.append(token)
            if token == 2:  # llama.cpp stops on its end-of-generation tokens
                break
        items = [self._item([*ids, *out[:i]], t, n) for i, t in enumerate(out)]
        if not body.get("stream"):
            kept = [item for i, item in enumerate(items) if i not in self.skip_at]
            return httpx.Response(
                200,
                json={
                    "content": "",
                    "tokens": out,
                    "stop": True,
                    "stop_type": "limit",
                    "completion_probabilities": kept,
                },
            )
        events = [
            {
                "content": "",
                "tokens": [t],
                "stop": False,
                "tokens_predicted": i + 1,
                "completion_probabilities": [items[i]],
            }
            for i, t in enumerate(out)
            if i not in self.skip_at
        ]
        events.append(
            {
                "content": "",
                "tokens": [],
                "stop": True,
                "stop_type": "eos" if out[-1] == 2 else "limit",
                "timings": {
                    "prompt_n": len(ids),
                    "prompt_ms": 10.0,
                    "predicted_n": len(out),
                    "predicted_ms": 10.0 * len(out),
                },
            }
        )
        return stream_response(events, done=False)

    def _item(self, context: list[int], token: int, n: int) -> dict[str, Any]:
        lp = self.model.logprobs(context)
        top = [
            {"id": i, "token": "", "bytes": [], "logprob": v}
            for i, v in zip(*[t.tolist() for t in torch.topk(lp, n)][::-1], strict=True)
        ]
        value = float(lp[token])
        return {
            "id": token,
            "token": "",
            "bytes": [],
            "logprob": value if math.isfinite(value) else -3.4e38,
            "top_logprobs": top,
        }

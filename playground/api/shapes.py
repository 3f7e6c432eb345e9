"""The OpenAI response objects, as plain dicts: chat completions and their stream chunks, (legacy)
completions and theirs, log-probs in both formats, usage and the model list.

A token's log-prob is the model's own (log-softmax of its raw logits, temperature 1), as vLLM reports
by default: the same number the app shows on every token.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

from playground.api.generate import Generation, Piece
from playground.engine.records import TokenRecord
from playground.engine.tokens import token_bytes, token_piece

NO_LOGPROB = -9999.0  # what servers send for a probability that underflowed to 0 (JSON has no -inf)


class Reply:
    """One response's identity (id, created, model) and the builders of its objects."""

    def __init__(self, model: str, chat: bool, tokenizer: Any, top: int | None) -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created, self.model, self.chat = int(time.time()), model, chat
        self.tokenizer, self.top = tokenizer, top  # top: alternatives asked per token (None: no log-probs)
        self.offset = 0  # characters of the answer before the next piece (completions' text_offset)

    def head(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def chunk(self, piece: Piece, first: bool = False) -> dict[str, Any]:
        """A stream chunk: the new text, its tokens' log-probs, the finish reason on the last."""
        logprobs = self.logprobs(piece.records)
        self.offset += len(piece.text)
        if not self.chat:
            choice = {
                "index": 0,
                "text": piece.text,
                "logprobs": logprobs,
                "finish_reason": piece.finish_reason,
            }
            return self.head("text_completion", [choice])
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if piece.text or first:
            delta["content"] = piece.text
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": piece.finish_reason}
        return self.head("chat.completion.chunk", [choice])

    def whole(self, pieces: Sequence[Piece], run: Generation) -> dict[str, Any]:
        """The non-streamed response: every piece's text and tokens, the finish reason, usage."""
        text = "".join(p.text for p in pieces)
        records = [r for p in pieces for r in p.records]
        reason = pieces[-1].finish_reason if pieces else "length"
        self.offset = 0
        logprobs = self.logprobs(records)
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reason}
            reply = self.head("chat.completion", [choice])
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}
            reply = self.head("text_completion", [choice])
        return {**reply, "usage": usage(run), "system_fingerprint": f"seed-{run.seed}"}

    def usage_chunk(self, run: Generation) -> dict[str, Any]:
        """The last chunk when stream_options.include_usage: no choices, the token counts."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self.head(kind, []), "usage": usage(run)}

    def logprobs(self, records: Sequence[TokenRecord]) -> dict[str, Any] | None:
        if self.top is None:
            return None
        if self.chat:
            return {"content": [self.chat_entry(r) for r in records]}
        return self.completion_logprobs(records)

    def chat_entry(self, record: TokenRecord) -> dict[str, Any]:
        top = [self.token_entry(a.id, _log(a.prob)) for a in record.top[: self.top]]
        return {**self.token_entry(record.id, _finite(record.logprob)), "top_logprobs": top}

    def token_entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = token_piece(self.tokenizer, token_id).text
        data = token_bytes(self.tokenizer, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(data if data is not None else text.encode())}

    def completion_logprobs(self, records: Sequence[TokenRecord]) -> dict[str, Any]:
        """The legacy format: parallel lists of tokens, their log-probs, top alternatives, offsets."""
        offsets, at = [], self.offset
        for record in records:
            offsets.append(at)
            at += len(record.text)
        return {
            "tokens": [r.text for r in records],
            "token_logprobs": [_finite(r.logprob) for r in records],
            "top_logprobs": [
                {token_piece(self.tokenizer, a.id).text: _log(a.prob) for a in r.top[: self.top]}
                for r in records
            ],
            "text_offset": offsets,
        }


def usage(run: Generation) -> dict[str, int]:
    prompt, answer = len(run.prompt_ids), run.generated
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}


def model_list(names: Sequence[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(name, created) for name in names]}


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "llm-generation-playground"}


def _log(prob: float) -> float:
    return math.log(prob) if prob > 0 else NO_LOGPROB


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else NO_LOGPROB

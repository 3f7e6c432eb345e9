"""Streaming chat with per-token probabilities and timings.

`stream_chat` runs its own decode loop over the model's KV cache (one forward per token),
so every token comes with the model's true distribution at that position: the probability
and log-prob of the chosen token, the top-5 alternatives, and the probability it had under
the sampling settings it was drawn with.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from playground.errors import PlaygroundError
from playground.model import LoadedModel
from playground.sampling import (
    SamplingSettings,
    choose_token,
    final_scores,
    seeded_generator,
    validate_settings,
)
from playground.tokens import decode_ids, token_piece

TOP_ALTERNATIVES = 5


@dataclass
class Alternative:
    id: int
    visible: str
    prob: float


@dataclass
class TokenInfo:
    """One generated token and the model's distribution at its position."""

    id: int
    text: str  # what it adds to the answer
    visible: str  # whitespace and bytes made visible
    special: bool
    prob: float  # softmax of the raw logits (temperature 1): the model's own probability
    logprob: float  # natural log of prob, computed with log_softmax
    sampled_prob: float  # probability under the processed distribution it was drawn from
    top: list[Alternative] = field(default_factory=list)  # top-5 raw alternatives, best first


@dataclass
class ChatTimings:
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0  # time to first token: prompt forward + first choice
    generated_tokens: int = 0
    decode_seconds: float = 0.0  # time for every token after the first

    @property
    def decode_tokens_per_second(self) -> float:
        decoded = self.generated_tokens - 1
        return decoded / self.decode_seconds if decoded > 0 and self.decode_seconds > 0 else 0.0

    def summary(self) -> str:
        rate = f"{self.decode_tokens_per_second:.1f} tok/s" if self.generated_tokens > 1 else "n/a"
        return (
            f"prompt {self.prompt_tokens} tokens · prefill (time to first token) "
            f"{self.prefill_seconds * 1000:.0f} ms · generated {self.generated_tokens} tokens · decode {rate}"
        )


@dataclass
class ChatUpdate:
    """Yielded after every token: the answer so far and its statistics."""

    text: str
    tokens: list[TokenInfo]
    timings: ChatTimings
    prompt_ids: list[int]
    seed: int
    notes: list[str] = field(default_factory=list)  # truncation, template fallback, ...
    finished: bool = False
    stop_reason: str = ""  # "eos", "max_new_tokens" or "context"


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]  # [{"role": "user"|"assistant", "content": str}], last is user
    system_prompt: str = ""
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    max_new_tokens: int = 256
    seed: int | None = None


# Each shown answer ends with its statistics in this footer; it is display only, and
# normalize_history strips it so the model never sees it.
FOOTER_START = "\n\n<sub>⏱ "
_FOOTER_PATTERN = re.compile(re.escape(FOOTER_START) + r".*?</sub>\s*$", re.DOTALL)


def with_footer(text: str, footer: str) -> str:
    """The answer text followed by its statistics line (shown under the answer)."""
    return f"{text}{FOOTER_START}{footer}</sub>"


def normalize_history(history: Sequence[Any] | None) -> list[dict[str, str]]:
    """Chat history from Gradio 6 (content as a list of blocks) or the API (plain strings)
    as plain {"role", "content": str} dicts, without the statistics footers."""
    messages = []
    for message in history or []:
        role = message_role(message)
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
        if role not in {"user", "assistant", "system"}:
            continue
        text = _content_text(content)
        if role == "assistant":
            text = _FOOTER_PATTERN.sub("", text)
        messages.append({"role": role, "content": text})
    return messages


def message_role(message: Any) -> str | None:
    """The role of a history entry, whether a dict (API, Gradio) or a ChatMessage object."""
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return str(content.get("text", ""))
    if isinstance(content, (list, tuple)):
        return "".join(_content_text(block) for block in content)
    return "" if content is None else str(content)


def check_request(lm: LoadedModel, request: ChatRequest, max_new_tokens_limit: int) -> SamplingSettings:
    """Validate everything the user typed; raises PlaygroundError with the bad value."""
    if not request.messages or request.messages[-1]["role"] != "user":
        raise PlaygroundError("Nothing to answer: the conversation must end with a user message.")
    if not request.messages[-1]["content"].strip():
        raise PlaygroundError("Empty message: type something to send.")
    if not 1 <= request.max_new_tokens <= max_new_tokens_limit:
        raise PlaygroundError(
            f"max new tokens must be between 1 and {max_new_tokens_limit}, got {request.max_new_tokens}"
        )
    if request.seed is not None and not 0 <= request.seed < 2**63:
        raise PlaygroundError(f"seed must be between 0 and 2^63 - 1, got {request.seed}")
    return validate_settings(request.settings)


def build_prompt(lm: LoadedModel, request: ChatRequest) -> tuple[list[int], list[str]]:
    """Token ids of the prompt, fitted to the context, and notes on what was done to fit."""
    notes: list[str] = []
    messages = list(request.messages)
    budget = lm.context_length - 1  # at least one new token must fit
    while True:
        ids = _encode_conversation(lm, messages, request.system_prompt)
        if len(ids) <= budget or len(messages) == 1:
            break
        messages = messages[2:] if len(messages) > 2 else messages[-1:]  # drop the oldest exchange
        if not notes:
            notes.append("Earlier turns were dropped so that the conversation fits in the context.")
    if len(ids) > budget:
        raise PlaygroundError(
            f"Prompt too long: {len(ids)} tokens, but the model's context is {lm.context_length} tokens "
            "(prompt + answer). Shorten the message."
        )
    if not lm.has_chat_template:
        notes.append("This model has no chat template: plain completion of the text (system prompt unused).")
    return ids, notes


def _encode_conversation(lm: LoadedModel, messages: list[dict[str, str]], system_prompt: str) -> list[int]:
    if not lm.has_chat_template:
        text = "\n".join(message["content"] for message in messages)
        return lm.tokenizer(text, add_special_tokens=True)["input_ids"]
    turns = ([{"role": "system", "content": system_prompt}] if system_prompt.strip() else []) + messages
    encoded = lm.tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def stream_chat(
    lm: LoadedModel, request: ChatRequest, max_new_tokens_limit: int = 1024
) -> Iterator[ChatUpdate]:
    """Generate the answer token by token; yields a ChatUpdate after each token.

    Timings count only the model's own work: prefill = prompt forward + first choice; decode =
    every later forward + choice. Time the caller spends between yields (rendering, network)
    is not counted, so tok/s is the model's speed, not the UI's.
    """
    settings = check_request(lm, request, max_new_tokens_limit)
    prompt_ids, notes = build_prompt(lm, request)
    max_new = min(request.max_new_tokens, lm.context_length - len(prompt_ids))
    if max_new < request.max_new_tokens:
        notes.append(f"Max new tokens cut to {max_new} to stay within the {lm.context_length}-token context.")
    seed = request.seed if request.seed is not None else int(torch.randint(0, 2**31 - 1, (1,)))
    update = ChatUpdate("", [], ChatTimings(prompt_tokens=len(prompt_ids)), prompt_ids, seed, notes)
    started = time.perf_counter()
    decoder = _Decoder(lm, prompt_ids, settings, seed)
    for step in range(max_new):
        if step > 0:
            started = time.perf_counter()
            decoder.advance()
        info = decoder.choose()
        spent = time.perf_counter() - started
        if step == 0:
            update.timings.prefill_seconds = spent
        else:
            update.timings.decode_seconds += spent
        _append(lm, update, info)
        if info.id in lm.eos_token_ids or step == max_new - 1:
            update.finished = True
            update.stop_reason = _stop_reason(info.id in lm.eos_token_ids, max_new < request.max_new_tokens)
        yield update
        if update.finished:
            return


def _append(lm: LoadedModel, update: ChatUpdate, info: TokenInfo) -> None:
    """Add a token; the text is decoded from all ids at once, so characters split over several
    tokens (emoji, CJK) come out whole. An unfinished character is held back until complete."""
    update.tokens.append(info)
    update.timings.generated_tokens += 1
    ids = [token.id for token in update.tokens if not token.special]
    text = decode_ids(lm.tokenizer, ids)
    update.text = text.rstrip("\ufffd")


def _stop_reason(eos: bool, cut_by_context: bool) -> str:
    if eos:
        return "eos"
    return "context" if cut_by_context else "max_new_tokens"


class _Decoder:
    """The decode loop's state: ids so far, the KV cache, the logits for the next position."""

    def __init__(self, lm: LoadedModel, prompt_ids: list[int], settings: SamplingSettings, seed: int) -> None:
        self.lm = lm
        self.settings = settings
        self.generator = seeded_generator(seed, lm.device)
        self.ids = torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)  # (1, seq)
        self.cache = DynamicCache(config=lm.config)
        self.logits = self._forward(self.ids)  # (vocab,) logits for the next position

    @torch.inference_mode()
    def _forward(self, new_ids: torch.Tensor) -> torch.Tensor:
        with self.lm.lock:
            out = self.lm.model(
                input_ids=new_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1
            )
        return out.logits[0, -1].float()

    @torch.inference_mode()
    def choose(self) -> TokenInfo:
        """Pick the next token from the current logits and append it to the ids."""
        scores = final_scores(self.logits, self.ids, self.settings)  # (1, vocab)
        token_id = choose_token(scores, self.settings, self.generator)
        info = describe_choice(self.lm, self.logits, scores[0], token_id)
        self.ids = torch.cat([self.ids, self.ids.new_tensor([[token_id]])], dim=1)
        return info

    def advance(self) -> None:
        """Run the model over the last chosen token: logits for the position after it."""
        self.logits = self._forward(self.ids[:, -1:])


def describe_choice(
    lm: LoadedModel, raw_logits: torch.Tensor, processed: torch.Tensor, token_id: int
) -> TokenInfo:
    """Probability, log-prob, sampled probability and top-5 of one choice, in one host copy.

    raw_logits, processed: (vocab,) before and after the sampling chain."""
    log_probs = torch.log_softmax(raw_logits, dim=-1)
    top = torch.topk(log_probs, TOP_ALTERNATIVES)
    sampled = torch.softmax(processed, dim=-1)[token_id]
    packed = torch.cat([log_probs[token_id].reshape(1), sampled.reshape(1), top.values]).tolist()
    top_ids = top.indices.tolist()
    piece = token_piece(lm.tokenizer, token_id)
    alternatives = [
        Alternative(i, token_piece(lm.tokenizer, i).visible, math.exp(lp))
        for i, lp in zip(top_ids, packed[2:], strict=True)
    ]
    logprob = packed[0]
    return TokenInfo(
        token_id,
        piece.text,
        piece.visible,
        piece.special,
        math.exp(logprob),
        logprob,
        packed[1],
        alternatives,
    )


def run_chat(lm: LoadedModel, request: ChatRequest, max_new_tokens_limit: int = 1024) -> ChatUpdate:
    """The final update of stream_chat (for notebooks and tests)."""
    *_, last = stream_chat(lm, request, max_new_tokens_limit)
    return last

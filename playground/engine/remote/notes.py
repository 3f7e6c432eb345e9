"""One-line explanations a remote engine gives the UI: why a view is off, where numbers come from."""

from __future__ import annotations

from typing import Any

from playground.messages import Message


def capability_reasons(engine: Any) -> dict[str, str]:
    """Capabilities.reasons for a RemoteEngine (each a Message: a short sentence without a final period)."""
    label = engine.adapter.label
    reasons = {
        "attentions": _inside(Message("remote.what.attentions", "Attention weights"), label),
        "hidden_states": _inside(Message("remote.what.hidden_states", "Hidden states"), label),
        "cache_bytes": Message(
            "remote.reason.cache_bytes",
            "{label} holds the KV cache itself; its own capacity and usage are shown instead of a cache "
            "built here",
            label=label,
        ),
        "batched": Message(
            "remote.reason.batched",
            "{label} batches requests itself; the batching view needs the model in this process",
            label=label,
        ),
    }
    if not engine.adapter.has_score:
        reasons["score"] = Message(
            "remote.reason.score",
            "{label} has no prompt scoring: each given token is scored by its own one-token request (a "
            "prefix-cache hit on the server), at most 64 at once",
            label=label,
        )
    if not engine.full_vocab:
        reasons["full_vocab"] = Message(
            "remote.reason.full_vocab",
            "{label} returns the top {top_n:,} of {vocab:,} tokens per position",
            label=label,
            top_n=engine.top_n,
            vocab=engine.vocab_size,
        )
    return reasons


def capability_notes(engine: Any) -> dict[str, str]:
    """Capabilities.notes for a RemoteEngine (see base.Capabilities for the keys)."""
    kind = engine.kind
    tested = (
        "tested against a live llama-server"
        if engine.adapter.tested_live
        else "not yet tested against a live server (checked on response shapes from its source)"
    )
    notes = {
        "engine": f"Every number comes from {kind} at {engine.url} serving {engine.name}; this adapter is "
        f"{tested}.",
        "distribution": _distribution_note(engine),
        "chat": _chat_note(engine),
        "beam": (
            f"Beam search runs here over one-token requests for each beam's top candidates from {kind} (all "
            "the contenders a step can pick), so the tree is the real search over the server's raw "
            "distribution; the model's generation-config processors are not applied."
        ),
        "score": _score_note(engine),
    }
    if kind == "llama.cpp":
        notes["engine"] += (
            " llama.cpp quantizes activations for quantized weights, so its log-probs differ from an "
            "in-process float32 run of the same GGUF by about 0.05-0.15 nats."
        )
    return notes


def _distribution_note(engine: Any) -> str:
    kind, n, vocab = engine.kind, min(engine.top_n, engine.vocab_size), engine.vocab_size
    penalty = "the repetition penalty applies to log-probs (the server sends no logits), unlike transformers"
    if engine.full_vocab:
        return (
            f"{kind} returns all {vocab:,} tokens' log-probs: the sampling stages run here exactly, except "
            f"that {penalty}."
        )
    return (
        f"{kind} returns the top {n:,} of {vocab:,} tokens; the rest (the tail) is unknown. The sampling "
        f"stages run here on those {n:,} log-probs: top-k is exact for k <= {n:,}; temperature, top-p, min-p "
        f"and typical-p renormalize over the {n:,} (exact only when the tail's mass is small); {penalty}."
    )


def _chat_note(engine: Any) -> str:
    text = (
        f"Chat decodes on {engine.kind} with your settings and seed (its own implementation of each stage), "
        "at the server's speed; each token's probability and top alternatives are the server's raw log-probs "
        "(temperature 1). 'After sampling' is shown for greedy decoding only; times are measured here."
    )
    if not engine.raw_when_sampling:
        text += (
            f" {engine.adapter.label} reports log-probs after its sampling stages, so settings other than "
            "greedy or the raw distribution are sampled here instead, one request per token."
        )
    return text + " Settings the server cannot apply as defined here (typical-p on vLLM) are sampled here."


def _score_note(engine: Any) -> str:
    if engine.kind == "vllm":
        return "Given tokens are scored with prompt_logprobs in one request (vLLM recomputes the prompt)."
    if engine.kind == "sglang":
        return "Given tokens are scored with logprob_start_len in one request (the radix cache is reused)."
    return capability_reasons(engine)["score"] + "."


def _inside(what: Message, label: str) -> Message:
    """Why a view of the model's internals (what) cannot show a served model's."""
    return Message(
        "remote.reason.inside",
        "{what} stay inside {label}: this view needs the model in this process (start the app without "
        "--engine)",
        what=what,
        label=label,
    )

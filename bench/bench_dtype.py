"""float32 vs bfloat16 weights (`--dtype bfloat16`): decode speed and how far the probabilities move.

    python bench/bench_dtype.py [--device cpu] [--random-weights | --config PATH] [--repeats 3] [--tokens 48]

Loads the model twice (float32 and bfloat16; the embedded model unless told otherwise), then
from one run prints: our chat decode tok/s for each (greedy, alternating repeats); the largest
and the mean absolute difference of next-token probabilities over every position of a few
prompts (teacher-forced: both read the same ids); how often the most likely token differs
there; and whether greedy answers stay the same token for token. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_chat import ours
from bench.common import add_common_arguments, load_bench_model, print_json
from playground.chat import ChatRequest
from playground.engine.base import DecodePlan
from playground.engine.local import LocalEngine
from playground.engine.prompts import encode_conversation
from playground.engine.sampling import SamplingSettings

QUESTIONS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain in two sentences how a KV cache speeds up text generation.",
    "List three uses of a lighthouse.",
]
GREEDY = SamplingSettings(temperature=0)


def decode_rates(engines: dict[str, LocalEngine], tokens: int, repeats: int) -> dict[str, float]:
    """Median decode tok/s of each engine on the same chat request, the engines taking turns."""
    request = ChatRequest([{"role": "user", "content": QUESTIONS[1]}], settings=GREEDY, max_new_tokens=tokens)
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for engine in engines.values():
        ours(engine, request)  # warm-up
    for _ in range(repeats):
        for name, engine in engines.items():
            rates[name].append(ours(engine, request)[0])
    return {name: statistics.median(values) for name, values in rates.items()}


def probability_gap(reference: LocalEngine, other: LocalEngine, prompts: list[list[int]]) -> dict[str, float]:
    """Teacher-forced next-token distributions of both over every position of every prompt."""
    gaps, top_changes, positions = [], 0, 0
    for ids in prompts:
        want = reference.prefill(ids, last=len(ids)).softmax(-1)  # (positions, vocab)
        got = other.prefill(ids, last=len(ids)).softmax(-1)
        gaps.append((got - want).abs().max(dim=-1).values)
        top_changes += int((got.argmax(-1) != want.argmax(-1)).sum())
        positions += len(ids)
    every = torch.cat(gaps)
    return {
        "max_abs_prob_diff": float(every.max()),
        "mean_max_abs_prob_diff": float(every.mean()),
        "top1_changed": top_changes,
        "positions": positions,
    }


def greedy_answers(engine: LocalEngine, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    plan = DecodePlan(GREEDY, tokens, seed=0)
    return [[r.id for r in engine.stream(ids, plan) if hasattr(r, "id")] for ids in prompts]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two answers differ (None: the same answer)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per answer")
    args = parser.parse_args()
    load = dict(config=args.config, decode=args.decode)
    engines = {
        dtype: load_bench_model(args.device, args.random_weights, dtype=dtype, **load)
        for dtype in ("float32", "bfloat16")
    }
    reference, other = engines["float32"], engines["bfloat16"]
    print(f"model: {reference.name} on {reference.device.type}; {reference.describe_decode()}")
    prompts = [encode_conversation(reference.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    rates = decode_rates(engines, args.tokens, args.repeats)
    gap = probability_gap(reference, other, prompts)
    answers = {dtype: greedy_answers(engine, prompts, args.tokens) for dtype, engine in engines.items()}
    differ = [first_difference(a, b) for a, b in zip(answers["float32"], answers["bfloat16"], strict=True)]
    print(f"decode float32  {rates['float32']:7.1f} tok/s   (median of {args.repeats}, {args.tokens} tokens)")
    print(
        f"decode bfloat16 {rates['bfloat16']:7.1f} tok/s   ratio {rates['bfloat16'] / rates['float32']:.2f}x"
    )
    print(
        f"next-token probabilities over {gap['positions']} positions of {len(prompts)} prompts: "
        f"max |p32 - p16| "
        f"{gap['max_abs_prob_diff']:.4f}, mean of the per-position max {gap['mean_max_abs_prob_diff']:.5f}; "
        f"most likely token differs at {gap['top1_changed']} positions"
    )
    for question, where in zip(QUESTIONS, differ, strict=True):
        print(
            f"greedy {args.tokens} tokens, {question[:40]!r}: "
            + ("same" if where is None else f"differs from token {where}")
        )
    print_json(
        "dtype",
        model=reference.name,
        device=reference.device.type,
        tokens=args.tokens,
        tok_s=rates,
        greedy_first_difference=differ,
        **gap,
    )


if __name__ == "__main__":
    main()

"""Speculative decoding with prompt lookup on a copy-heavy prompt vs plain decoding, in one run.

    python -m bench.bench_speculative [--device cpu|cuda] [--random-weights] [--repeats 3] [--tokens 128]

The prompt asks the model to copy a paragraph with one word changed, so most of the answer
copies the prompt. Paths, all greedy, same prompt: plain transformers `generate`, transformers'
own prompt lookup (`prompt_lookup_num_tokens`), our plain decode loop (one token per forward)
and our prompt-lookup speculative decoding. Tokens/s = new tokens / wall time (median of the
repeats); every path must give the same tokens. Goal: ours speculative / plain generate >= 1.5.
(--random-weights: speed of the machinery only; a random model does not copy, so the goal does
not apply.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, load_bench_model, synchronize, verdict
from playground.engine.prompts import encode_prompt
from playground.hood import speculative as speculative_lesson

GOAL = 1.5
PARAGRAPH = (
    "The old lighthouse stood on the cliff for two hundred years. Every night its keeper climbed the "
    "spiral stairs, trimmed the wick and polished the great lens until it shone. Ships passing in the "
    "storm saw its beam and turned away from the rocks below. When the keeper grew old, his daughter "
    "took the lamp and kept it burning through the longest winter anyone could remember."
)
PROMPT = "Copy the following paragraph exactly, but change the word 'old' to 'ancient':\n\n" + PARAGRAPH


def timed(lm, fn) -> tuple[float, list[int]]:
    synchronize(lm.device)
    started = time.perf_counter()
    ids = fn()
    synchronize(lm.device)
    return time.perf_counter() - started, ids


def generate(lm, ids: list[int], n: int, **options) -> list[int]:
    prompt = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False, **options
        )
    return out[0, len(ids) :].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens")
    parser.add_argument("--draft", type=int, default=8, help="draft length (tokens per round)")
    args = parser.parse_args()
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.describe()}")
    ids = encode_prompt(lm.tokenizer, PROMPT, chat=lm.has_chat_template)
    paths = {
        "plain generate (transformers)": lambda: generate(lm, ids, args.tokens),
        "generate, prompt_lookup_num_tokens": lambda: generate(
            lm, ids, args.tokens, prompt_lookup_num_tokens=args.draft
        ),
        "ours, plain decode loop": lambda: (
            speculative_lesson.run(lm, ids, args.tokens, compare=True).plain_ids
        ),
        "ours, prompt lookup": lambda: (
            speculative_lesson.run(lm, ids, args.tokens, draft_tokens=args.draft).ids
        ),
    }
    for fn in paths.values():
        fn()  # warm-up
    results = {name: [timed(lm, fn) for _ in range(args.repeats)] for name, fn in paths.items()}
    tokens = {name: runs[0][1] for name, runs in results.items()}
    speeds = {
        name: len(tokens[name]) / statistics.median(s for s, _ in runs) for name, runs in results.items()
    }
    for name in paths:
        print(f"{name:<38} {speeds[name]:8.2f} tok/s   ({len(tokens[name])} tokens)")
    spec = speculative_lesson.run(lm, ids, args.tokens, draft_tokens=args.draft)
    print(f"rounds {len(spec.rounds)} for {len(spec.ids)} tokens · acceptance {spec.acceptance_rate:.0%}")
    same = all(t == tokens["plain generate (transformers)"] for t in tokens.values())
    print(f"identical tokens on every path: {same}")
    print(f"answer: {lm.tokenizer.decode(tokens['ours, prompt lookup'])!r}")
    ours = speeds["ours, prompt lookup"]
    for label, base in [
        ("plain generate", "plain generate (transformers)"),
        ("our plain loop", "ours, plain decode loop"),
        ("generate prompt lookup", "generate, prompt_lookup_num_tokens"),
    ]:
        ratio = ours / speeds[base]
        # the goal is for the real model: a random one copies nothing
        goal_applies = base.startswith("plain generate") and not args.random_weights
        note = verdict(ratio, GOAL, lower_is_better=False) if goal_applies else ""
        print(f"ours prompt lookup / {label:<24} {ratio:6.2f}x  {note}")
    if not same:
        print("FAIL: tokens differ")


if __name__ == "__main__":
    main()

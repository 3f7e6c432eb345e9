"""KV cache on vs off at a long prefix: the per-step cost of recomputing the prefix, in one run.

    python -m bench.bench_kv_on_off [--device cpu|cuda] [--random-weights] [--prefix 1000] [--steps 6]

Ours: playground.hood.kv_on_off (a cached step vs a no-cache forward of the whole prefix, same
greedy tokens). Plain transformers: one step with a DynamicCache vs `model(ids, use_cache=False)`
at the same length. Prints the medians and the off / on ratio of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, load_bench_model, median_seconds
from playground.hood import kv_on_off, preset_ids


def plain_transformers(lm, ids: list[int], repeats: int) -> tuple[float, float]:
    """(cached step, recomputed step) seconds with plain transformers at len(ids) tokens."""
    prompt = torch.tensor([ids], device=lm.device)
    with torch.inference_mode():
        cache = DynamicCache(config=lm.config)
        lm.model(input_ids=prompt[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
        length = cache.get_seq_length()

        def cached() -> None:
            extra = cache.get_seq_length() - length
            if extra:
                cache.crop(-extra)  # transformers 5: a negative count removes that many tokens
            lm.model(input_ids=prompt[:, -1:], past_key_values=cache, use_cache=True, logits_to_keep=1)

        def recomputed() -> None:
            lm.model(input_ids=prompt, use_cache=False, logits_to_keep=1)

        cached(), recomputed()  # warm-up
        return median_seconds(cached, repeats, lm.device), median_seconds(recomputed, repeats, lm.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--prefix", type=int, default=1000, help="prompt length in tokens")
    parser.add_argument("--steps", type=int, default=6, help="new tokens for our run (steps = tokens - 1)")
    args = parser.parse_args()
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.describe()}")
    ids = preset_ids(lm.tokenizer, args.prefix)
    kv_on_off(lm, ids[:32], 2)  # warm-up
    result = kv_on_off(lm, ids, args.steps)
    on = statistics.median(result.cached_step_seconds)
    off = statistics.median(result.recomputed_step_seconds)
    plain_on, plain_off = plain_transformers(lm, ids, args.repeats)
    print(f"prefix {args.prefix} tokens, {len(result.cached_step_seconds)} decode steps")
    print(
        f"ours:   step with cache {on * 1000:8.1f} ms   without {off * 1000:8.1f} ms   "
        f"off/on {off / on:6.1f}x"
    )
    print(
        f"plain:  step with cache {plain_on * 1000:8.1f} ms   without {plain_off * 1000:8.1f} ms   "
        f"off/on {plain_off / plain_on:6.1f}x"
    )
    print(
        f"prefill (time to first token): {result.cached_prefill_seconds * 1000:.0f} ms with the cache, "
        f"{result.recomputed_prefill_seconds * 1000:.0f} ms without"
    )
    print(
        f"identical tokens: {result.identical} · cache bytes equal the formula: {result.bytes_match} "
        f"({result.cache_bytes[-1]:,} bytes at {result.cache_lengths[-1]} tokens)"
    )


if __name__ == "__main__":
    main()

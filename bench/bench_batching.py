"""Batching: 8 prompts decoded one by one vs in one padded batch, ours and plain transformers.

    python -m bench.bench_batching [--device cpu|cuda] [--random-weights] [--batch 8] [--tokens 32]

Ours: playground.batching.batching (greedy; each sequence's batch tokens must equal its solo run).
Plain transformers: `generate` on each prompt alone vs `generate` on the left-padded batch.
Throughput = all new tokens / wall time, medians of the repeats (the paths alternate); prints
the batch / one-by-one ratio of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, load_bench_model, synchronize
from playground.engine.prompts import encode_prompt
from playground.hood import batching as batching_lesson
from playground.hood.batching import PRESET_QUESTIONS


def plain_generate(lm, prompts: list[list[int]], n: int) -> tuple[float, list[list[int]]]:
    """One left-padded generate call over all prompts: seconds and each row's new tokens."""
    width = max(len(p) for p in prompts)
    pad = lm.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=lm.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=lm.device)
    synchronize(lm.device)
    started = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad)
    synchronize(lm.device)
    rows = [_until_eos(row[width:].tolist(), lm.eos_token_ids) for row in out]
    return time.perf_counter() - started, rows


def _until_eos(ids: list[int], eos: tuple[int, ...]) -> list[int]:
    for i, token in enumerate(ids):
        if token in eos:
            return ids[: i + 1]
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--batch", type=int, default=8, help="number of prompts (1-16)")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    args = parser.parse_args()
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.describe()}")
    questions = PRESET_QUESTIONS[: args.batch]
    prompts = [encode_prompt(lm.tokenizer, q, chat=lm.has_chat_template) for q in questions]
    batching_lesson.run(lm, prompts[:2], 2)  # warm-up
    rates: dict[str, list[float]] = {"ours solo": [], "ours batch": [], "plain solo": [], "plain batch": []}
    for _ in range(args.repeats):  # alternately, so that machine noise hits both paths alike
        ours = batching_lesson.run(lm, prompts, args.tokens)
        rates["ours solo"].append(ours.solo_tokens_per_second)
        rates["ours batch"].append(ours.batch_tokens_per_second)
        solo = [plain_generate(lm, [p], args.tokens) for p in prompts]
        solo_ids = [ids[0] for _, ids in solo]
        batch_seconds, batch_ids = plain_generate(lm, prompts, args.tokens)
        rates["plain solo"].append(sum(map(len, solo_ids)) / sum(s for s, _ in solo))
        rates["plain batch"].append(sum(map(len, batch_ids)) / batch_seconds)
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{args.batch} prompts x up to {args.tokens} new tokens (greedy), medians of {args.repeats}")
    for who, same in (("ours", ours.identical), ("plain", batch_ids == solo_ids)):
        solo_rate, batch_rate = median[f"{who} solo"], median[f"{who} batch"]
        print(
            f"{who + ':':<7} one by one {solo_rate:8.2f} tok/s   batch {batch_rate:8.2f} tok/s   "
            f"batch/solo {batch_rate / solo_rate:5.2f}x   tokens equal to solo: {same}"
        )
    print(f"ours vs plain generate solo tokens equal: {ours.solo_ids == solo_ids}")
    print(
        f"last sequence done after {ours.solo_finished[-1]:.1f} s one by one, "
        f"{max(ours.batch_finished):.1f} s in the batch (last run)"
    )


if __name__ == "__main__":
    main()

"""Two models in one process: the memory both hold, and a compare chat against each side alone.

    python bench/bench_compare.py [--tokens 48] [--repeats 3]

Loads the two embedded models (SmolLM2-135M-Instruct and Gemma 3 270M) through the model registry,
as the app would, and reports the process's resident memory (RSS) before, with one and with both.
Then the same greedy conversation is answered by SmolLM2 alone, by Gemma alone, and by both at once
(playground.compare: each side streams in its own thread, each model in its own running batch); every
run makes the same tokens (checked). Goal: the compare run takes <= 1.2x the sum of the two alone
(medians of --repeats). Needs the embedded models' packages (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_json, verdict
from bench.memory import rss_mib
from playground.chat import ChatRequest, run_chat
from playground.compare import Side, run_compare
from playground.engine.sampling import SamplingSettings
from playground.models import ModelRegistry
from playground.settings import load_settings

GOAL = 1.2
QUESTION = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
GREEDY = SamplingSettings(temperature=0)


def solo(engine, tokens: int) -> tuple[float, list[int]]:
    started = time.perf_counter()
    answer = run_chat(engine, ChatRequest(QUESTION, settings=GREEDY, max_new_tokens=tokens))
    return time.perf_counter() - started, answer.answer_ids


def together(sides: list[Side], tokens: int) -> tuple[float, list[list[int]]]:
    started = time.perf_counter()
    result = run_compare(sides, QUESTION, max_new_tokens=tokens)
    errors = [s.error for s in result.sides if s.error]
    if errors:
        raise SystemExit(f"compare failed: {errors}")
    return time.perf_counter() - started, [s.update.answer_ids for s in result.sides]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per answer (greedy)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of each run (median)")
    args = parser.parse_args()
    registry = ModelRegistry(load_settings(device="cpu", max_models=2))
    rss = {"start": rss_mib()}
    smol = registry.engine("smollm2-135m-instruct")
    rss["smollm2"] = rss_mib()
    gemma = registry.engine("gemma-3-270m")
    rss["both"] = rss_mib()
    sides = [Side(smol, GREEDY), Side(gemma, GREEDY)]
    solo(smol, 4), solo(gemma, 4), together(sides, 4)  # warm-up: first forwards, batch threads
    rss["both_warm"] = rss_mib()  # every weight touched once (a cached load maps them lazily)
    runs: dict[str, list[float]] = {"smollm2": [], "gemma": [], "compare": []}
    for _ in range(args.repeats):
        seconds_a, ids_a = solo(smol, args.tokens)
        seconds_b, ids_b = solo(gemma, args.tokens)
        seconds_ab, ids_ab = together(sides, args.tokens)
        if ids_ab != [ids_a, ids_b]:
            raise SystemExit("a side of the compare run made other tokens than alone")
        for key, seconds in (("smollm2", seconds_a), ("gemma", seconds_b), ("compare", seconds_ab)):
            runs[key].append(seconds)
    medians = {key: statistics.median(values) for key, values in runs.items()}
    ratio = medians["compare"] / (medians["smollm2"] + medians["gemma"])
    print(
        f"RSS: start {rss['start']:.0f} MiB, with SmolLM2 {rss['smollm2']:.0f} MiB, with both "
        f"{rss['both']:.0f} MiB, both after a chat each {rss['both_warm']:.0f} MiB"
    )
    print(
        f"{args.tokens} greedy tokens each: SmolLM2 alone {medians['smollm2']:.2f} s, Gemma alone "
        f"{medians['gemma']:.2f} s, both compared {medians['compare']:.2f} s (same tokens)"
    )
    print(f"compare / (sum of the two alone) = {ratio:.2f}  {verdict(ratio, GOAL)}")
    print(f"compare / slower alone = {medians['compare'] / max(medians['smollm2'], medians['gemma']):.2f}")
    print_json(
        "compare",
        rss_start_mib=round(rss["start"]),
        rss_smollm2_mib=round(rss["smollm2"]),
        rss_both_mib=round(rss["both"]),
        rss_both_warm_mib=round(rss["both_warm"]),
        tokens=args.tokens,
        smollm2_s=round(medians["smollm2"], 3),
        gemma_s=round(medians["gemma"], 3),
        compare_s=round(medians["compare"], 3),
        ratio_to_sum=round(ratio, 3),
        goal=GOAL,
    )


if __name__ == "__main__":
    main()

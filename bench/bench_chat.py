"""Chat decode speed: our streaming path (per-token probabilities on) vs plain model.generate.

    python bench/bench_chat.py [--device cpu|cuda] [--random-weights | --config PATH]
                               [--decode auto|static|eager] [--repeats 5] [--tokens 64]

Same prompt, same settings, same tokens (greedy, and sampling with the same seed). Decode
tokens/s counts every token after the first, timed from the first token to the last, for
both paths. Goal: ours / generate >= 0.95 (with continuous batching on, as the app runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    add_common_arguments,
    describe_engine,
    load_from_args,
    print_json,
    synchronize,
    verdict,
)
from playground.chat import ChatRequest, build_prompt, stream_chat
from playground.engine.local import LocalEngine
from playground.engine.sampling import SamplingSettings

GOAL = 0.95
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
MODES = {
    "greedy": SamplingSettings(temperature=0),
    "sampled": SamplingSettings(temperature=0.8, top_k=50, top_p=0.95),
}


class TokenClock(BaseStreamer):
    """Records when generate emits each new token (the first put() is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def ours(engine: LocalEngine, request: ChatRequest) -> tuple[float, list[int]]:
    """Decode tokens/s of stream_chat and the tokens it produced."""
    stamps, ids = [], []
    for update in stream_chat(engine, request, max_new_tokens_limit=1 << 20):
        synchronize(engine.device)
        stamps.append(time.perf_counter())
        ids = [t.id for t in update.tokens]
    return (len(ids) - 1) / (stamps[-1] - stamps[0]), ids


def plain_generate(
    engine: LocalEngine, prompt_ids: list[int], settings: SamplingSettings, n: int, seed: int, **kwargs: Any
) -> tuple[float, list[int]]:
    """Decode tokens/s of model.generate (kwargs: e.g. cache_implementation="static") and its tokens."""
    clock = TokenClock()
    torch.manual_seed(seed)
    sampling = (
        {"do_sample": False}
        if settings.greedy
        else {
            "do_sample": True,
            "temperature": settings.temperature,
            "top_k": settings.top_k,
            "top_p": settings.top_p,
        }
    )
    with torch.inference_mode():
        out = engine.model.generate(
            torch.tensor([prompt_ids], device=engine.device),
            attention_mask=torch.ones((1, len(prompt_ids)), dtype=torch.long, device=engine.device),
            max_new_tokens=n,
            min_new_tokens=n,
            streamer=clock,
            pad_token_id=engine.pad_token_id,
            **sampling,
            **kwargs,
        )
    token_times = clock.times[1:]  # one per new token
    return (len(token_times) - 1) / (token_times[-1] - token_times[0]), out[0, len(prompt_ids) :].tolist()


def run_mode(engine: LocalEngine, name: str, settings: SamplingSettings, tokens: int, repeats: int) -> dict:
    request = ChatRequest(PROMPT, settings=settings, max_new_tokens=tokens, seed=1234)
    prompt_ids, _ = build_prompt(engine, request)
    ours(engine, request)  # warm-up
    ours_rates, generate_rates = [], []
    for _ in range(repeats):  # alternate the two paths so machine noise hits both alike
        rate, ids = ours(engine, request)
        ours_rates.append(rate)
        rate, reference = plain_generate(engine, prompt_ids, settings, len(ids), 1234)
        generate_rates.append(rate)
    same = reference[: len(ids)] == ids
    ours_median, generate_median = statistics.median(ours_rates), statistics.median(generate_rates)
    ratio = ours_median / generate_median
    print(
        f"{name:<8} {len(ids):>4} tok  ours {ours_median:7.1f} tok/s   "
        f"generate {generate_median:7.1f} tok/s   "
        f"ratio {ratio:.3f}  {verdict(ratio, GOAL, lower_is_better=False)}  "
        f"({'same' if same else 'DIFFERENT'} tokens)"
    )
    return {"ours_tok_s": ours_median, "generate_tok_s": generate_median, "ratio": ratio, "same_tokens": same}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per answer")
    args = parser.parse_args()
    engine = load_from_args(args)
    print(describe_engine(engine))
    print(f"medians of {args.repeats} runs")
    results = {
        name: run_mode(engine, name, settings, args.tokens, args.repeats) for name, settings in MODES.items()
    }
    print_json("chat", model=engine.name, device=engine.device.type, decode=engine.decode_path, **results)


if __name__ == "__main__":
    main()

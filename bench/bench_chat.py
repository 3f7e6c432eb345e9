"""Chat decode speed: our streaming path (per-token probabilities on) vs plain model.generate.

    python -m bench.bench_chat [--device cpu|cuda] [--random-weights] [--repeats 5] [--tokens 64]

Same prompt, same settings, same tokens (greedy, and sampling with the same seed). Decode
tokens/s counts every token after the first, timed from the first token to the last, for
both paths. Goal: ours / generate >= 0.9.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers.generation.streamers import BaseStreamer

from bench.common import add_common_arguments, load_bench_model, synchronize, verdict
from playground.chat import ChatRequest, build_prompt, stream_chat
from playground.sampling import SamplingSettings

GOAL = 0.9
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


def ours(lm, request: ChatRequest) -> tuple[float, list[int]]:
    """Decode tokens/s of stream_chat and the tokens it produced."""
    stamps, ids = [], []
    for update in stream_chat(lm, request, max_new_tokens_limit=4096):
        synchronize(lm.device)
        stamps.append(time.perf_counter())
        ids = [t.id for t in update.tokens]
    return (len(ids) - 1) / (stamps[-1] - stamps[0]), ids


def plain_generate(
    lm, prompt_ids: list[int], settings: SamplingSettings, n: int, seed: int
) -> tuple[float, list]:
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
        out = lm.model.generate(
            torch.tensor([prompt_ids], device=lm.device),
            max_new_tokens=n,
            streamer=clock,
            pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
            **sampling,
        )
    token_times = clock.times[1:]  # one per new token (generate may stop early at EOS)
    return (len(token_times) - 1) / (token_times[-1] - token_times[0]), out[0, len(prompt_ids) :].tolist()


def run_mode(lm, name: str, settings: SamplingSettings, tokens: int, repeats: int) -> float:
    request = ChatRequest(PROMPT, settings=settings, max_new_tokens=tokens, seed=1234)
    prompt_ids, _ = build_prompt(lm, request)
    ours(lm, request)  # warm-up
    ours_rates, generate_rates = [], []
    for _ in range(repeats):  # alternate the two paths so machine noise hits both alike
        rate, ids = ours(lm, request)
        ours_rates.append(rate)
        rate, reference = plain_generate(lm, prompt_ids, settings, len(ids), 1234)
        generate_rates.append(rate)
    same = "same tokens" if reference[: len(ids)] == ids else "DIFFERENT tokens"
    ours_median, generate_median = statistics.median(ours_rates), statistics.median(generate_rates)
    ratio = ours_median / generate_median
    outcome = verdict(ratio, GOAL, lower_is_better=False)
    print(
        f"{name:<8} {len(ids):>4} tok  ours {ours_median:7.1f} tok/s   "
        f"generate {generate_median:7.1f} tok/s   ratio {ratio:.3f}  {outcome}  ({same})"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per answer")
    args = parser.parse_args()
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.name} on {lm.device} ({lm.dtype}); medians of {args.repeats} runs")
    for name, settings in MODES.items():
        run_mode(lm, name, settings, args.tokens, args.repeats)


if __name__ == "__main__":
    main()

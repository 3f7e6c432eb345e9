"""Step-by-step latency: one step (pick + candidates) with the session's KV cache at a long
vs a short prefix, and against recomputing the whole prefix without a cache.

    python bench/bench_step.py [--device cpu|cuda] [--random-weights] [--repeats N]

Goals (issue 3): step(1000) / step(10) <= 1.5 and step(1000) / recompute(1000) <= 0.2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.session_store import MIB, KVStore

from bench.common import add_common_arguments, load_bench_model, median_seconds, verdict
from playground.model import LoadedModel
from playground.stepper import StepSession

TEXT = (
    "The history of the printing press begins long before Gutenberg. Carved wooden blocks were "
    "inked and pressed onto paper in China, and movable type made of clay and later metal followed. "
)


def prefix_ids(lm: LoadedModel, length: int) -> list[int]:
    """`length` token ids of ordinary English text."""
    ids: list[int] = []
    while len(ids) < length:
        ids += lm.tokenizer(TEXT, add_special_tokens=False).input_ids
    return ids[:length]


def session_at(lm: LoadedModel, length: int) -> StepSession:
    """A session whose prompt + tokens are exactly `length` tokens."""
    ids = prefix_ids(lm, length)
    session = StepSession(lm, lm.tokenizer.decode(ids[:1]), kv_store=KVStore(4096 * MIB))
    session.append_tokens(ids[len(session.prompt_ids) : length])
    assert len(session.ids) == length, (len(session.ids), length)
    return session


def step_seconds(lm: LoadedModel, length: int, repeats: int) -> float:
    """Median of: pick the top candidate (one forward of one token) + the next candidates.
    An undo (a cache crop, no forward) after each keeps the prefix length fixed."""
    session = session_at(lm, length)
    token = session.candidates(1)[0].token_id

    def step() -> None:
        session.pick(token)
        session.candidates(10)
        session.undo()

    step()  # warm-up
    return median_seconds(step, repeats, lm.device)


def recompute_seconds(lm: LoadedModel, length: int, repeats: int) -> float:
    """Median of the same step without a cache: forward the whole prefix + token, top-10."""
    ids = torch.tensor([prefix_ids(lm, length + 1)], device=lm.device)

    def step() -> None:
        with lm.lock, torch.inference_mode():
            logits = lm.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
        torch.topk(torch.softmax(logits, -1), 10).indices.tolist()

    step()  # warm-up
    return median_seconds(step, repeats, lm.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)  # --device, --random-weights, --repeats
    parser.add_argument("--long", type=int, default=1000, help="long prefix length (tokens)")
    parser.add_argument("--short", type=int, default=10, help="short prefix length (tokens)")
    args = parser.parse_args()
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.describe()}")
    short = step_seconds(lm, args.short, args.repeats)
    long = step_seconds(lm, args.long, args.repeats)
    full = recompute_seconds(lm, args.long, min(args.repeats, 5))  # seconds each on a CPU
    print(f"step at {args.short:>5} tokens (KV cache): {short * 1000:8.1f} ms  (median of {args.repeats})")
    print(f"step at {args.long:>5} tokens (KV cache): {long * 1000:8.1f} ms")
    print(f"recompute {args.long:>5} tokens (no cache): {full * 1000:8.1f} ms")
    for label, ratio, goal in [
        (f"step({args.long}) / step({args.short})", long / short, 1.5),
        (f"step({args.long}) / recompute({args.long})", long / full, 0.2),
    ]:
        print(f"{label:<32} {ratio:6.3f}  {verdict(ratio, goal)}")


if __name__ == "__main__":
    main()

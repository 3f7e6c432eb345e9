"""Step-by-step latency: one step (pick + the top-10 candidates on the host; the undo between
steps is not timed) with the session's KV cache at prefixes of several lengths, and against
recomputing the whole prefix.

    python bench/bench_step.py [--device cpu|cuda] [--random-weights | --config PATH]
                               [--decode auto|static|eager] [--repeats N] [--prefixes 10,1000,4000]

Goals: step(1000) / step(10) <= 1.2 and step(4000) / step(10) <= 1.4 (issue 8; a step must read
all the weights and the whole cache, but copy neither); step / recompute <= 0.2 (issue 3); on a
GPU (issue 9) one step <= 5 ms at a 1000-token prefix.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, describe_engine, load_from_args, print_json, timed, verdict
from playground.engine.local import LocalEngine
from playground.step import StepSession

TEXT = (
    "The history of the printing press begins long before Gutenberg. Carved wooden blocks were "
    "inked and pressed onto paper in China, and movable type made of clay and later metal followed. "
)


def prefix_ids(engine: LocalEngine, length: int) -> list[int]:
    """`length` token ids of ordinary English text."""
    ids: list[int] = []
    while len(ids) < length:
        ids += engine.tokenizer(TEXT, add_special_tokens=False).input_ids
    return ids[:length]


def session_at(engine: LocalEngine, length: int) -> StepSession:
    """A session whose prompt + tokens are exactly `length` tokens."""
    ids = prefix_ids(engine, length)
    session = StepSession(engine, engine.tokenizer.decode(ids[:1]))
    session.append_tokens(ids[len(session.prompt_ids) : length])
    assert len(session.ids) == length, (len(session.ids), length)
    return session


def step_times(engine: LocalEngine, lengths: list[int], repeats: int) -> dict[int, list[float]]:
    """Seconds of each of `repeats` steps per prefix length: pick the top candidate (one forward
    of one token) and read the next top-10 candidates on the host. The lengths take turns, one
    step each, so a change in the machine's load falls on all of them alike. Between steps,
    untimed, an undo and the tip's row (as the UI shows it) put the cache back at its length, so
    every step really forwards. On the static path each session holds one of the slots (3 by
    default): more lengths than slots would time the parking of caches too."""
    sessions = {n: session_at(engine, n) for n in lengths}
    tokens = {n: session.candidates(1)[0].token_id for n, session in sessions.items()}
    times: dict[int, list[float]] = {n: [] for n in lengths}
    for _ in range(repeats + 1):  # the first round is a warm-up
        for n, session in sessions.items():
            times[n].append(timed(lambda s=session, t=tokens[n]: step(s, t), engine.device))
            session.undo()
            session.next_logits()  # a crop: the next pick is not served from remembered rows
    for session in sessions.values():
        session.release()
    return {n: seconds[1:] for n, seconds in times.items()}


def step(session: StepSession, token: int) -> None:
    """One step as the UI makes it: pick a token, then read the next top-10 candidates."""
    session.pick(token)
    session.candidates(10)


def recompute_seconds(engine: LocalEngine, length: int, repeats: int) -> float:
    """Median of the same step without a cache: forward the whole prefix + token, top-10."""
    ids = prefix_ids(engine, length + 1)

    input_ids = torch.tensor([ids], device=engine.device)

    @torch.inference_mode()
    def step() -> None:  # plain transformers: one forward of the whole prefix, no cache
        logits = engine.model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
        torch.topk(torch.softmax(logits, -1), 10).indices.tolist()

    step()  # warm-up
    return statistics.median(timed(step, engine.device) for _ in range(repeats))


def growth_goal(prefix: int) -> float:
    """The most a step may grow from a 10-token prefix to `prefix` tokens (issue 8)."""
    return 1.2 if prefix <= 1000 else 1.4


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)  # --device, --random-weights, --config, --decode, --repeats
    parser.add_argument("--prefixes", default="10,1000,4000", help="prefix lengths in tokens, short first")
    args = parser.parse_args()
    prefixes = [int(p) for p in args.prefixes.split(",")]
    engine = load_from_args(args)
    print(describe_engine(engine))
    medians = {n: statistics.median(t) for n, t in step_times(engine, prefixes, args.repeats).items()}
    for n, seconds in medians.items():
        print(f"step at {n:>5} tokens (KV cache): {seconds * 1000:8.2f} ms  (median of {args.repeats})")
    short, long = prefixes[0], prefixes[-1]
    full = recompute_seconds(engine, long, min(args.repeats, 5))  # seconds each on a CPU
    print(f"recompute {long:>5} tokens (no cache): {full * 1000:8.2f} ms")
    ratios = [
        (f"step({n}) / step({short})", medians[n] / medians[short], growth_goal(n)) for n in prefixes[1:]
    ]
    for label, ratio, goal in [*ratios, (f"step({long}) / recompute({long})", medians[long] / full, 0.2)]:
        print(f"{label:<32} {ratio:6.3f}  {verdict(ratio, goal)}")
    step_ms = {str(n): s * 1000 for n, s in medians.items()}
    print_json(
        "step", model=engine.name, decode=engine.decode_path, step_ms=step_ms, recompute_ms=full * 1000
    )


if __name__ == "__main__":
    main()

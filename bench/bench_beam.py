"""Beam search with the recorded tree vs plain `model.generate` beam search, same settings.

    python bench/bench_beam.py [--device cpu|cuda] [--random-weights | --config PATH]
                               [--decode auto|static|eager] [--repeats N]
                               [--beams 4] [--steps 32] [--prompt TEXT]

Both paths run alternately in one process (order swapped every repeat) after a warm-up;
prints the medians, the ratio and PASS/FAIL against the goal (issue 4): ratio <= 1.3.
Checks first that both return the same sequences, so the timed work is the same search.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, describe_engine, load_from_args, print_json, timed, verdict
from playground.beam import BeamTree, beam_search
from playground.engine.local import LocalEngine

GOAL = 1.3
PROMPT = "The history of the printing press begins long before Gutenberg. In China,"


def plain_generate(lm: LocalEngine, prompt_ids: list[int], beams: int, steps: int) -> torch.Tensor:
    """transformers' own beam search: (beams, prompt + new) ids."""
    ids = torch.tensor([prompt_ids], device=lm.device)
    with torch.inference_mode():
        out = lm.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            num_beams=beams,
            num_return_sequences=beams,
            do_sample=False,
            length_penalty=1.0,
            early_stopping=False,
            max_new_tokens=steps,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return out.sequences


def ours(lm: LocalEngine, prompt: str, beams: int, steps: int) -> BeamTree:
    return beam_search(lm, prompt, beams, steps, 1.0, False)


def alternate(paths: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds per path, running the paths in turn (reversed order every other repeat)."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            times[name].append(timed(paths[name], device))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--beams", type=int, default=4, help="number of beams (default 4)")
    parser.add_argument("--steps", type=int, default=32, help="max new tokens (default 32)")
    parser.add_argument("--prompt", default=PROMPT, help="the prompt (plain text, no chat template)")
    args = parser.parse_args()
    lm = load_from_args(args)
    tree = ours(lm, args.prompt, args.beams, args.steps)  # warm-up, and the parity check below
    reference = plain_generate(lm, tree.prompt_ids, args.beams, args.steps)
    same = reference[:, len(tree.prompt_ids) :].tolist() == tree.sequences
    print(describe_engine(lm))
    print(
        f"prompt: {len(tree.prompt_ids)} tokens · {args.beams} beams · {args.steps} steps · "
        f"{len(tree.nodes) - 1} tree nodes · same sequences as generate: {same}"
    )
    medians = alternate(
        {
            "beam_search (with tree)": lambda: ours(lm, args.prompt, args.beams, args.steps),
            "generate (plain)": lambda: plain_generate(lm, tree.prompt_ids, args.beams, args.steps),
        },
        args.repeats,
        lm.device,
    )
    for name, seconds in medians.items():
        print(f"{name:26s} median {seconds * 1000:9.1f} ms over {args.repeats} runs")
    ratio = medians["beam_search (with tree)"] / medians["generate (plain)"]
    print(f"ratio beam_search / generate: {ratio:.3f}  {verdict(ratio, GOAL)}")
    if not same:
        print("WARNING: the sequences differ from generate: the timings do not compare the same search")
    ours_ms, generate_ms = (medians[name] * 1000 for name in medians)
    print_json(
        "beam",
        model=lm.name,
        decode=lm.decode_path,
        beams=args.beams,
        steps=args.steps,
        ours_ms=ours_ms,
        generate_ms=generate_ms,
        ratio=ratio,
        same_sequences=same,
    )


if __name__ == "__main__":
    main()

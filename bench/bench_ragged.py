"""The batched attention's one scripted call per layer vs a Python-level torch call per sequence.

    python bench/bench_ragged.py [--sequences 20] [--cached 80] [--repeats 30] [--busy-threads 2]

One iteration of the running batch (engine/ragged.py) attends every sequence over its own cache
in each of the embedded model's 30 layers. The same work runs two ways, side by side: the loop
as Python (`attend_segments` called as it is: about ten torch calls per sequence and layer, as
the batch did before) and as one TorchScript call per layer (what the batch runs). Each is timed
idle, then beside `--busy-threads` Python threads that never wait (the app's other threads in a
crowd: Gradio's event loop, the handlers). Every torch call releases Python's interpreter lock
and takes it back; beside busy threads, taking it back waits. Ends with one JSON line.

Needs only torch (no model weights: the shapes are the embedded model's, the values random).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import EMBEDDED_ARCHITECTURE, print_json
from playground.engine.ragged import _attend, attend_segments

LAYERS = EMBEDDED_ARCHITECTURE["num_hidden_layers"]
HEADS = EMBEDDED_ARCHITECTURE["num_attention_heads"]
KV_HEADS = EMBEDDED_ARCHITECTURE["num_key_value_heads"]
HEAD_DIM = EMBEDDED_ARCHITECTURE["head_dim"]


def iteration(attend: Callable[..., torch.Tensor], sequences: int, cached: int) -> Callable[[], None]:
    """One iteration's attention: `sequences` one-token sequences with `cached` tokens each, every
    layer (the lengths are not moved on, so every repeat does the same work)."""
    g = torch.Generator().manual_seed(0)
    keys = [torch.randn(1, KV_HEADS, cached + 64, HEAD_DIM, generator=g) for _ in range(sequences)]
    values = [torch.randn(1, KV_HEADS, cached + 64, HEAD_DIM, generator=g) for _ in range(sequences)]
    query = torch.randn(1, HEADS, sequences, HEAD_DIM, generator=g)
    key, value = (torch.randn(1, KV_HEADS, sequences, HEAD_DIM, generator=g) for _ in range(2))
    starts, counts, lengths = list(range(sequences)), [1] * sequences, [cached] * sequences
    rows = [1] * sequences

    def run() -> None:
        for _ in range(LAYERS):
            attend(query, key, value, keys, values, starts, counts, rows, lengths, None)

    return run


def milliseconds(runs: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median ms of each run, timed in turn (one of each per round), so both see the same load."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for run in runs.values():
            run()  # warm up
        for _ in range(repeats):
            for name, run in runs.items():
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def measure(args: argparse.Namespace) -> dict[str, float]:
    ways = {"python": attend_segments, "scripted": _attend()}
    runs = {name: iteration(attend, args.sequences, args.cached) for name, attend in ways.items()}
    figures = {f"{name}_idle_ms": ms for name, ms in milliseconds(runs, args.repeats).items()}
    stop = threading.Event()

    def busy() -> None:
        count = 0
        while not stop.is_set():
            for step in range(1000):  # pure Python, holding the lock but for the forced switches
                count += step

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(args.busy_threads)]
    for thread in threads:
        thread.start()
    try:
        figures |= {f"{name}_busy_ms": ms for name, ms in milliseconds(runs, args.repeats).items()}
    finally:
        stop.set()
    return figures


def main() -> None:
    title, _, *details = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        description=title, epilog="\n\n".join(details), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sequences", type=int, default=20, help="one-token sequences (default 20)")
    parser.add_argument("--cached", type=int, default=80, help="tokens each has cached (default 80)")
    parser.add_argument("--repeats", type=int, default=30, help="timed iterations, median (default 30)")
    parser.add_argument("--busy-threads", type=int, default=2, help="busy Python threads (default 2)")
    args = parser.parse_args()
    if min(args.sequences, args.cached, args.repeats) < 1 or args.busy_threads < 0:
        parser.error("--sequences, --cached and --repeats must be at least 1, --busy-threads at least 0")
    torch.manual_seed(0)
    f = measure(args)
    print(
        f"{args.sequences} one-token sequences, {args.cached} cached tokens each, {LAYERS} layers "
        f"(ms per iteration, median of {args.repeats})"
    )
    print(f"{'':<30}{'python':>10}{'scripted':>10}{'ratio':>8}")
    for label, key in (("idle", "idle"), (f"beside {args.busy_threads} busy threads", "busy")):
        python, scripted = f[f"python_{key}_ms"], f[f"scripted_{key}_ms"]
        print(f"{label:<30}{python:>10.1f}{scripted:>10.1f}{python / scripted:>7.1f}x")
    print_json(
        "ragged",
        sequences=args.sequences,
        cached=args.cached,
        busy_threads=args.busy_threads,
        **{k: round(v, 1) for k, v in f.items()},
    )


if __name__ == "__main__":
    main()

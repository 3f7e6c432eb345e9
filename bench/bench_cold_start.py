"""Cold start: loading the embedded model from the converted-weights cache vs converting the GGUF.

    python -m bench.bench_cold_start [--device cpu|cuda] [--repeats 3]

Goal: cache load / GGUF conversion <= 0.25. Both legs run in this one process, into a
fresh temporary cache directory, alternately.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, load_bench_model, median_seconds, verdict
from playground.engine.loading import embedded_cache_dir, load_model

GOAL = 0.25


def timed_load(device: str, cache_dir: Path) -> tuple[float, str]:
    started = time.perf_counter()
    lm = load_model(device=device, cache_dir=cache_dir)
    return time.perf_counter() - started, lm.source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(parser)
    args = parser.parse_args()
    if args.random_weights:
        lm = load_bench_model(args.device, random_weights=True)
        print(f"--random-weights: there is no GGUF to convert; nothing to compare ({lm.name}).")
        return
    cache_dir = Path(tempfile.mkdtemp(prefix="cold-start-"))
    convert_times, cache_times = [], []
    try:
        for _ in range(args.repeats):
            shutil.rmtree(embedded_cache_dir(cache_dir), ignore_errors=True)
            seconds, source = timed_load(args.device, cache_dir)
            assert source == "gguf", source
            convert_times.append(seconds)
            cache_times.append(median_seconds(lambda: load_model(device=args.device, cache_dir=cache_dir), 1))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    report(sorted(convert_times), sorted(cache_times))


def report(convert_times: list[float], cache_times: list[float]) -> None:
    convert = convert_times[len(convert_times) // 2]
    cached = cache_times[len(cache_times) // 2]
    ratio = cached / convert
    print(f"{'path':<34}{'median':>10}   runs")
    print(f"{'convert GGUF + write cache':<34}{convert:>9.2f}s   {[round(t, 2) for t in convert_times]}")
    print(f"{'load from cache':<34}{cached:>9.2f}s   {[round(t, 2) for t in cache_times]}")
    print(f"ratio cache / convert = {ratio:.3f}  {verdict(ratio, GOAL)}")


if __name__ == "__main__":
    main()

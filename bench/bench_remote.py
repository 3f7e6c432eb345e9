"""Chat decode through the llama-server backend vs the server's own decode speed for the same request.

    python -m bench.bench_remote [--url http://127.0.0.1:8080] [--tokens 128] [--repeats 5]

Without --url it starts the llama-server that scripts/build_llama_server.sh built, on the embedded
GGUF. Each run streams one chat answer through our path (`stream_chat` on a RemoteEngine: native
streaming, per-token raw top-5 alternatives, records, text decoding) and reads the server's own
timings of that same request (`predicted_per_second`). Ours counts every token after the first,
from the first token's arrival to the last's. A plain HTTP stream of the same request (no
playground code) is timed too, for scale. Goal: ours / server >= 0.9.
(--device and --random-weights do not apply: the server runs its own model.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, verdict
from playground.chat import ChatRequest, build_prompt, stream_chat
from playground.engine import connect
from playground.engine.remote.launcher import LlamaServer
from playground.engine.sampling import SamplingSettings

GOAL = 0.9
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
MODES = {
    "greedy": SamplingSettings(temperature=0),
    "sampled": SamplingSettings(temperature=0.8, top_k=50, top_p=0.95),
}


def ours(engine, request: ChatRequest) -> tuple[float, float, int]:
    """Our decode tok/s, the server's own for the same request(s), and the tokens made."""
    stamps, count = [], 0
    for update in stream_chat(engine, request, max_new_tokens_limit=4096):
        if update.progress is None:
            stamps.append(time.perf_counter())
            count = len(update.tokens)
    rate = (count - 1) / (stamps[-1] - stamps[0]) if count > 1 else 0.0
    return rate, engine.last_timings.decode_tokens_per_second, count


def plain_stream(url: str, body: dict) -> float:
    """Client-side decode tok/s of the same /completion stream read with no playground code."""
    stamps = []
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and "completion_probabilities" in line:
                json.loads(line[5:])
                stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0


def run_mode(engine, name: str, settings: SamplingSettings, tokens: int, repeats: int) -> float:
    request = ChatRequest(PROMPT, settings=settings, max_new_tokens=tokens, seed=1234)
    prompt_ids, _ = build_prompt(engine, request)
    body = engine.adapter._body(prompt_ids, settings, tokens, 5, 1234)
    ours(engine, request)  # warm-up (the prompt enters the server's cache)
    rates, server_rates, plain_rates, made = [], [], [], 0
    for _ in range(repeats):
        rate, server, made = ours(engine, request)
        rates.append(rate)
        server_rates.append(server)
        plain_rates.append(plain_stream(engine.url, body))
    mine, theirs, plain = (statistics.median(r) for r in (rates, server_rates, plain_rates))
    ratio = mine / theirs
    print(
        f"{name:<8} {made:>4} tok  ours {mine:7.1f} tok/s   server-reported {theirs:7.1f} tok/s   "
        f"ratio {ratio:.3f}  {verdict(ratio, GOAL, lower_is_better=False)}   "
        f"(plain HTTP stream {plain:7.1f} tok/s)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--url", help="a running llama-server (default: start the built one on the embedded GGUF)"
    )
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per answer")
    parser.add_argument(
        "--threads", type=int, help="llama-server threads (default: the machine's cores, at most 4)"
    )
    args = parser.parse_args()
    server = None if args.url else LlamaServer.start(threads=args.threads)
    try:
        engine = connect(args.url or server.url, "llama.cpp", progress=lambda line: None)
        print(f"engine: {engine.describe()}; top-5 alternatives per token; medians of {args.repeats} runs")
        for name, settings in MODES.items():
            run_mode(engine, name, settings, args.tokens, args.repeats)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

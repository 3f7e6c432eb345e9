"""Decode at GPU speed (issue 9): every figure from one run, against plain transformers.

    python bench/bench_gpu.py --device cuda --random-weights [--config bench/configs/llama-3.1-8b.json]
                              [--decode auto|static|eager] [--tokens 256] [--repeats 3]

Prints, in this order (the first request is timed right after load, before anything else ran):
the decode path and its warm-up seconds; the first request after load vs the tenth; our chat
decode tok/s (stream_chat, greedy, per-token records on); `generate` with a dynamic cache;
`generate` with a static cache, compiled (transformers compiles it itself on CUDA); the
memory-bandwidth bound (bytes read per token / a measured device-to-device copy bandwidth);
our ratio to each; step latency p50 at prefixes 10 / 1000 / 4000; beam 4 x 32 vs `generate`;
the goals of issue 9 with PASS/FAIL; and one JSON line. Needs only torch + transformers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_beam import alternate
from bench.bench_beam import ours as beam_ours
from bench.bench_beam import plain_generate as beam_generate
from bench.bench_chat import PROMPT, ours, plain_generate
from bench.bench_step import step_times
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

GREEDY = SamplingSettings(temperature=0)
BEAM_PROMPT = "The history of the printing press begins long before Gutenberg. In China,"


def first_vs_tenth(engine: LocalEngine, request: ChatRequest) -> list[float]:
    """Seconds of ten identical chat requests (prompt + answer) in a row, the first right after load."""
    seconds = []
    for _ in range(10):
        synchronize(engine.device)
        started = time.perf_counter()
        for _update in stream_chat(engine, request, max_new_tokens_limit=1 << 20):
            pass
        synchronize(engine.device)
        seconds.append(time.perf_counter() - started)
    return seconds


def chat_figures(engine: LocalEngine, request: ChatRequest, repeats: int) -> dict[str, Any]:
    """Our decode tok/s and plain generate's (dynamic cache), alternating, with a token check."""
    prompt_ids, _ = build_prompt(engine, request)
    ours_rates, generate_rates = [], []
    for _ in range(repeats):
        rate, ids = ours(engine, request)
        ours_rates.append(rate)
        rate, reference = plain_generate(engine, prompt_ids, GREEDY, len(ids), 0)
        generate_rates.append(rate)
    return {
        "ours_tok_s": statistics.median(ours_rates),
        "generate_dynamic_tok_s": statistics.median(generate_rates),
        "same_tokens": reference[: len(ids)] == ids,
        "prompt_tokens": len(prompt_ids),
        "new_tokens": len(ids),
    }


def compiled_generate(engine: LocalEngine, request: ChatRequest, repeats: int) -> dict[str, Any]:
    """generate(cache_implementation="static"): the first call compiles (timed apart), then repeats."""
    prompt_ids, _ = build_prompt(engine, request)
    n = request.max_new_tokens
    try:
        started = time.perf_counter()
        plain_generate(engine, prompt_ids, GREEDY, n, 0, cache_implementation="static")
        compile_seconds = time.perf_counter() - started
        rates = [
            plain_generate(engine, prompt_ids, GREEDY, n, 0, cache_implementation="static")[0]
            for _ in range(repeats)
        ]
    except Exception as exc:  # a missing compiler must not hide every other figure
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    return {"tok_s": statistics.median(rates), "compile_seconds": compile_seconds}


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Bytes per second a device-to-device copy moves (each byte read once and written once)."""
    nbytes = nbytes if device.type == "cuda" else nbytes // 8  # a CPU needs less to be measured
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    synchronize(device)
    return 2 * nbytes * repeats / (time.perf_counter() - started)


def bytes_per_token(engine: LocalEngine, context: int) -> int:
    """Bytes one decode step must read: every weight once (the input embedding only one row, unless
    it is tied to the output layer) plus the KV cache of `context` tokens."""
    model = engine.model
    unique = {p.data_ptr(): p for p in model.parameters()}
    total = sum(p.numel() * p.element_size() for p in unique.values())
    embedding = model.get_input_embeddings().weight
    if embedding.data_ptr() != model.get_output_embeddings().weight.data_ptr():
        total -= embedding.numel() * embedding.element_size() - embedding.shape[1] * embedding.element_size()
    text = model.config.get_text_config()
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv = 2 * int(text.num_hidden_layers) * kv_heads * head_dim * embedding.element_size() * context
    return total + kv


def bound_figures(engine: LocalEngine, context: int) -> dict[str, Any]:
    needed, bandwidth = bytes_per_token(engine, context), copy_bandwidth(engine.device)
    return {"bytes_per_token": needed, "copy_gb_s": bandwidth / 1e9, "bound_tok_s": bandwidth / needed}


def beam_figures(engine: LocalEngine, beams: int, steps: int, repeats: int) -> dict[str, Any]:
    tree = beam_ours(engine, BEAM_PROMPT, beams, steps)  # warm-up, and the parity check
    reference = beam_generate(engine, tree.prompt_ids, beams, steps)
    same = reference[:, len(tree.prompt_ids) :].tolist() == tree.sequences
    paths = {
        "ours": lambda: beam_ours(engine, BEAM_PROMPT, beams, steps),
        "generate": lambda: beam_generate(engine, tree.prompt_ids, beams, steps),
    }
    medians = alternate(paths, repeats, engine.device)
    return {
        "ours_ms": medians["ours"] * 1000,
        "generate_ms": medians["generate"] * 1000,
        "same_sequences": same,
    }


def report(results: dict[str, Any]) -> None:
    """The human-readable table, ratios and goals."""
    chat, compiled, bound = results["chat"], results["compiled"], results["bound"]
    ours_rate = chat["ours_tok_s"]
    print(
        f"chat decode (ours, {chat['new_tokens']} tokens): {ours_rate:8.1f} tok/s  (same tokens as generate: "
        f"{chat['same_tokens']})"
    )
    print(
        f"generate, dynamic cache:         {chat['generate_dynamic_tok_s']:8.1f} tok/s   ours / it: "
        f"{ours_rate / chat['generate_dynamic_tok_s']:.2f}"
    )
    if "tok_s" in compiled:
        print(
            f"generate, static cache{' compiled' if results['cuda'] else ' (cpu: not compiled)'}: "
            f"{compiled['tok_s']:8.1f} tok/s   ours / it: "
            f"{ours_rate / compiled['tok_s']:.2f}   (compile warm-up {compiled['compile_seconds']:.1f} s)"
        )
    else:
        print(f"generate, static cache compiled: n/a ({compiled['error']})")
    print(
        f"bandwidth bound:                 {bound['bound_tok_s']:8.1f} tok/s   ours / it: "
        f"{ours_rate / bound['bound_tok_s']:.2f}   ({bound['bytes_per_token'] / 1e6:,.0f} MB per token "
        f"at {bound['copy_gb_s']:,.0f} GB/s copy bandwidth)"
    )
    for prefix, ms in results["step_p50_ms"].items():
        print(f"step p50 at prefix {prefix:>5}:        {ms:8.2f} ms  (pick + top-10 on the host)")
    beam = results["beam"]
    print(
        f"beam {results['beams']} x {results['steps']}: ours {beam['ours_ms']:.1f} ms, generate "
        f"{beam['generate_ms']:.1f} ms, ratio {beam['ours_ms'] / beam['generate_ms']:.2f} "
        f"(same sequences: {beam['same_sequences']})"
    )
    first, tenth = results["requests_s"][0], results["requests_s"][9]
    print(
        f"first request after load {first * 1000:.0f} ms, tenth {tenth * 1000:.0f} ms: "
        f"ratio {first / tenth:.2f}"
    )
    print(f"warm-up: {results['warmup_s']:.1f} s")
    goals(results)


def goals(results: dict[str, Any]) -> None:
    """Issue 9's goals (H200-class GPU); the shape each applies to is named."""
    chat, compiled, bound = results["chat"], results["compiled"], results["bound"]
    lines = [("135M shape: chat tok/s", chat["ours_tok_s"], 300, False)]
    if "tok_s" in compiled:
        lines.append(
            (
                "135M shape: ours / compiled static generate",
                chat["ours_tok_s"] / compiled["tok_s"],
                0.9,
                False,
            )
        )
    if "1000" in results["step_p50_ms"]:
        lines.append(("one step at prefix 1000, ms", results["step_p50_ms"]["1000"], 5.0, True))
    lines.append(("8B shape: ours / bandwidth bound", chat["ours_tok_s"] / bound["bound_tok_s"], 0.7, False))
    lines.append(("first request / tenth", results["requests_s"][0] / results["requests_s"][9], 1.2, True))
    for label, value, goal, lower in lines:
        print(f"goal  {label:<46} {value:9.3f}  {verdict(value, goal, lower_is_better=lower)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=256, help="new tokens per chat answer")
    parser.add_argument("--prefixes", default="10,1000,4000", help="step latency prefixes (tokens)")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    engine = load_from_args(args)
    print(describe_engine(engine))
    request = ChatRequest(PROMPT, settings=GREEDY, max_new_tokens=args.tokens, seed=0)
    results: dict[str, Any] = {"requests_s": first_vs_tenth(engine, request)}  # before anything else
    results["chat"] = chat_figures(engine, request, args.repeats)
    prefixes = [int(p) for p in args.prefixes.split(",")]
    step_seconds = step_times(engine, prefixes, max(args.repeats, 5))
    results["step_p50_ms"] = {str(n): statistics.median(t) * 1000 for n, t in step_seconds.items()}
    results["beams"], results["steps"] = args.beams, args.steps
    results["beam"] = beam_figures(engine, args.beams, args.steps, args.repeats)
    results["bound"] = bound_figures(engine, results["chat"]["prompt_tokens"] + args.tokens // 2)
    results["compiled"] = compiled_generate(
        engine, request, args.repeats
    )  # last: compiling may disturb others
    results["warmup_s"] = engine.decode_status.warmup_seconds or 0.0
    results["cuda"] = engine.device.type == "cuda"
    report(results)
    print_json(
        "gpu", model=engine.name, device=engine.device.type, decode=engine.describe_decode(), **results
    )


if __name__ == "__main__":
    main()

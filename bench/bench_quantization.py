"""Quantization: the lesson's ladder against float32 in one run, then --quantize's decode speed.

    python -m bench.bench_quantization [--device cpu|cuda] [--tokens 32] [--text-tokens 200]
        [--formats hqq8,hqq4,...] [--serve int8,hqq4] [--threads 1] [--repeats 3]

1. One run of playground.hood.quantization.iter_run over a text (the reference is the
   loaded model): per format bits, bytes, mean / p99 KL, top-1 agreement, perplexity and the decode
   tok/s of its teacher-forced one-token forwards next to the reference's, and the ladder's wall time.
2. --quantize: plain `generate` (greedy, --tokens new tokens) on the loaded model and on each serving
   format's copy, interleaved, median of --repeats; the ratio to float32 (above 1: faster).
Ends with one JSON line.

    python bench/bench_quantization.py --quick

times the lesson's quick setting (3 formats over 64 tokens) before and after one run of the whole
ladder (200 text tokens + 32 new), in one process: the ratio counts on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_arguments, load_bench_model, print_json, synchronize
from playground.hood import quantization as quantization_lesson
from playground.hood.common import LONG_TEXT
from playground.hood.quantization import LADDER, quantized_weights


def text_ids(lm, tokens: int) -> list[int]:
    ids = list(lm.tokenizer(LONG_TEXT * 8).input_ids)
    return ids[:tokens]


def ladder(lm, ids: list[int], formats: list[str], tokens: int) -> tuple[object, float]:
    started, run, phase = time.perf_counter(), None, ""
    for run in quantization_lesson.iter_run(lm, ids, formats, tokens):
        if run.phase.split(":")[0] != phase:
            phase = run.phase.split(":")[0]
            print(f"  {time.perf_counter() - started:6.1f} s  {run.phase}", flush=True)
    return run, time.perf_counter() - started


def print_ladder(run, seconds: float) -> dict:
    print(
        f"\nreference {run.dtype}: {run.reference_weight_bytes / 1e6:,.1f} MB weights, "
        f"decode {run.reference_tok_s:.1f} tok/s, perplexity {run.reference_perplexity:.2f}"
    )
    print(
        f"{'format':<22}{'bits':>6}{'weights MB':>12}{'KV KiB':>9}{'mean KL':>10}{'p99 KL':>9}"
        f"{'top-1':>7}{'ppl':>8}{'tok/s':>7}{'vs ref':>8}"
    )
    out = {}
    for r in run.results:
        ratio = r.tok_s[1] / r.tok_s[0]
        sizes = f"{r.bits:6.2f}{r.weight_bytes / 1e6:12.1f}{r.kv_bytes / 1024:9.1f}"
        quality = f"{r.mean_kl:10.4f}{r.p99_kl:9.4f}{r.top1_agreement:7.2f}{r.perplexity:8.2f}"
        print(f"{r.key:<22}{sizes}{quality}{r.tok_s[1]:7.1f}{ratio:7.2f}x")
        out[r.key] = {
            "bits": round(r.bits, 3),
            "weight_bytes": r.weight_bytes,
            "kv_bytes": r.kv_bytes,
            "kv_bytes_match_formula": r.kv_bytes_match,
            "mean_kl": round(r.mean_kl, 5),
            "p99_kl": round(r.p99_kl, 5),
            "top1": round(r.top1_agreement, 4),
            "perplexity": round(r.perplexity, 3),
            "tok_s": round(r.tok_s[1], 2),
            "vs_reference": round(ratio, 3),
        }
    for key, why in run.skipped.items():
        print(f"{key:<22} not run here: {why}")
    print(
        f"ladder: {len(run.results)} formats over {len(run.text_ids)} text tokens + {run.new_tokens} new "
        f"in {seconds:.1f} s"
    )
    return out


def decode_rate(lm, model, ids: list[int], tokens: int) -> float:
    prompt = torch.tensor([ids], device=lm.device)
    synchronize(lm.device)
    started = time.perf_counter()
    with lm.lock, torch.inference_mode():
        model.generate(
            prompt,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=lm.pad_token_id,
        )
    synchronize(lm.device)
    return tokens / (time.perf_counter() - started)


def serving(lm, ids: list[int], names: list[str], tokens: int, repeats: int) -> dict:
    """generate tok/s of float32 and each serving format, interleaved; medians and ratios."""
    copies = {name: quantized_weights(lm, name) for name in names}
    models = {"float32": lm.model, **{name: c.model for name, c in copies.items()}}
    rates: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():  # warm-up
        decode_rate(lm, model, ids, 2)
    for _ in range(repeats):
        for name, model in models.items():
            rates[name].append(decode_rate(lm, model, ids, tokens))
    for copy in copies.values():
        copy.free()
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\n--quantize: generate {tokens} tokens after a {len(ids)}-token prompt, median of {repeats}")
    out = {}
    for name, rate in median.items():
        ratio = rate / median["float32"]
        print(f"  {name:<8} {rate:7.1f} tok/s   {ratio:5.2f}x float32")
        out[name] = {"tok_s": round(rate, 2), "vs_float32": round(ratio, 3)}
    return out


def quick_vs_ladder(lm, ids: list[int], tokens: int) -> None:
    """The quick setting, the whole ladder, the quick setting again: seconds and the ratio."""
    from playground.ui.hood.quantization import QUICK

    quick_ids = list(lm.tokenizer(QUICK["quant_text"], add_special_tokens=True).input_ids)
    times = {}
    for name, run_ids, formats, new in (
        ("quick", quick_ids, QUICK["quant_formats"], QUICK["quant_tokens"]),
        ("ladder", ids, list(LADDER), tokens),
        ("quick again", quick_ids, QUICK["quant_formats"], QUICK["quant_tokens"]),
    ):
        _, times[name] = ladder(lm, run_ids, formats, new)
        print(f"{name}: {times[name]:.1f} s", flush=True)
    quick = (times["quick"] + times["quick again"]) / 2
    print(f"quick setting / whole ladder: {quick / times['ladder']:.3f}")
    print_json("quantization_quick", quick_s=round(quick, 1), ladder_s=round(times["ladder"], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=32, help="new tokens (ladder and generate)")
    parser.add_argument("--text-tokens", type=int, default=200, help="tokens of the text the ladder reads")
    parser.add_argument("--formats", default=",".join(LADDER), help="the ladder, comma-separated")
    parser.add_argument("--serve", default="int8", help="--quantize formats to time ('' for none)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="the view's quick setting vs the whole ladder")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_bench_model(args.device, args.random_weights)
    print(f"model: {lm.describe()} · {torch.get_num_threads()} threads")
    if args.quick:
        quick_vs_ladder(lm, text_ids(lm, args.text_tokens), args.tokens)
        return
    ids = text_ids(lm, args.text_tokens)
    run, seconds = ladder(lm, ids, args.formats.split(","), args.tokens)
    formats = print_ladder(run, seconds)
    serve = serving(lm, ids[:32], [s for s in args.serve.split(",") if s], args.tokens, args.repeats)
    print_json(
        "quantization",
        device=lm.device.type,
        threads=torch.get_num_threads(),
        text_tokens=len(ids),
        new_tokens=args.tokens,
        ladder_seconds=round(seconds, 1),
        reference_tok_s=round(run.reference_tok_s, 2),
        formats=formats,
        skipped=run.skipped,
        serving=serve,
    )


if __name__ == "__main__":
    main()

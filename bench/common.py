"""Shared benchmark helpers: the model under test (real or random weights) and timing."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from playground.model import LoadedModel, load_model, resolve_device

TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizer"

# The embedded SmolLM2-135M-Instruct architecture, for --random-weights runs that need
# no weight files (speed does not depend on weight values).
EMBEDDED_ARCHITECTURE = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="embedded architecture with random weights (no weight files needed)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per path (median reported)")


def load_bench_model(device: str = "cpu", random_weights: bool = False) -> LoadedModel:
    """The embedded model, or its architecture with random weights (bf16 on cuda, fp32 on cpu)."""
    if not random_weights:
        return load_model(device=device)
    torch_device = resolve_device(device)
    dtype = torch.float32 if torch_device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    config = LlamaConfig(**EMBEDDED_ARCHITECTURE)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(torch_device).eval()
    return LoadedModel(
        model, _bench_tokenizer(), torch_device, dtype, "random-weights SmolLM2-135M shape", 0.0, "random"
    )


def _bench_tokenizer() -> AutoTokenizer:
    """The embedded model's tokenizer, shipped in bench/tokenizer (Apache-2.0, 3.5 MB) so that
    a GPU machine with only torch + transformers can run every benchmark."""
    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device | None = None) -> float:
    """Median wall time of fn over `repeats` runs (after the caller's warm-up)."""
    times = []
    for _ in range(repeats):
        if device is not None:
            synchronize(device)
        started = time.perf_counter()
        fn()
        if device is not None:
            synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def verdict(ratio: float, goal: float, lower_is_better: bool = True) -> str:
    ok = ratio <= goal if lower_is_better else ratio >= goal
    return f"{'PASS' if ok else 'FAIL'} (goal {'<=' if lower_is_better else '>='} {goal})"

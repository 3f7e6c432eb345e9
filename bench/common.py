"""Shared benchmark helpers: the engine under test (real or random weights) and timing.

Runs on a bare GPU box with only torch + transformers: random weights need no weight files,
and the tokenizer ships in bench/tokenizer (no gguf, no gradio, no downloads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.engine.batcher import BatchConfig
from playground.engine.loading import load_model, resolve_device, resolve_weights_dtype
from playground.engine.local import LocalEngine
from playground.engine.static import StaticConfig
from playground.settings import load_settings

TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizer"
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

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
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"a config.json: that architecture with random weights (shipped: {CONFIG_DIR.name}/*.json)",
    )
    parser.add_argument(
        "--decode",
        choices=("auto", "static", "eager"),
        default="auto",
        help="decode path: auto = static KV cache + CUDA graphs on cuda, eager on cpu",
    )
    parser.add_argument(
        "--dtype", default=None, help="float32, bfloat16 or float16 (default: fp32 cpu, bf16 cuda)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per path (median reported)")


def load_bench_model(
    device: str = "cpu",
    random_weights: bool = False,
    *,
    config: Path | None = None,
    decode: str = "auto",
    dtype: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> LocalEngine:
    """The embedded model, or an architecture with random weights (the embedded one, or a
    config.json), as an engine whose decode path is prepared (graphs captured) before it returns."""
    if not random_weights and config is None:
        return load_model(device=device, dtype=dtype, decode=decode, progress=progress or (lambda _m: None))
    torch_device = resolve_device(device)
    torch_dtype = resolve_weights_dtype(dtype, torch_device)
    architecture = AutoConfig.from_pretrained(str(config)) if config else LlamaConfig(**EMBEDDED_ARCHITECTURE)
    torch.manual_seed(0)
    with torch_device:  # weights made and initialised on the device: seconds, even for 8B
        model = AutoModelForCausalLM.from_config(architecture, dtype=torch_dtype).eval()
    name = f"random-weights {config.stem if config else 'SmolLM2-135M'} shape"
    settings = load_settings()
    static = StaticConfig(capacity=settings.static_tokens)
    engine = LocalEngine(
        model,
        _bench_tokenizer(),
        torch_device,
        torch_dtype,
        name,
        0.0,
        "random",
        decode=decode,
        static_config=static,
        batching=BatchConfig(settings.batching, settings.batch_size, settings.batch_tokens),
    )
    engine.prepare_decode(progress)
    return engine


def load_from_args(args: argparse.Namespace) -> LocalEngine:
    return load_bench_model(
        args.device, args.random_weights, config=args.config, decode=args.decode, dtype=args.dtype
    )


def _bench_tokenizer() -> AutoTokenizer:
    """The embedded model's tokenizer, shipped in bench/tokenizer (Apache-2.0, 3.5 MB) so that
    a GPU machine with only torch + transformers can run every benchmark."""
    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of fn(), with the device's queued work included."""
    synchronize(device)
    started = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - started


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device | None = None) -> float:
    """Median wall time of fn over `repeats` runs (after the caller's warm-up)."""
    times = [timed(fn, device) if device is not None else _plain_timed(fn) for _ in range(repeats)]
    return statistics.median(times)


def _plain_timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def verdict(ratio: float, goal: float, lower_is_better: bool = True) -> str:
    ok = ratio <= goal if lower_is_better else ratio >= goal
    return f"{'PASS' if ok else 'FAIL'} (goal {'<=' if lower_is_better else '>='} {goal})"


def describe_engine(engine: LocalEngine) -> str:
    """Two lines: the model, and how it decodes."""
    return f"model: {engine.describe()}\n{engine.describe_decode()}"


def print_json(name: str, **figures: Any) -> None:
    """The one machine-readable line a benchmark ends with."""
    print(json.dumps({"bench": name, **figures}, default=str))

"""The benchmarks must run on a bare GPU box with only torch + transformers installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = [
    "bench_chat",
    "bench_step",
    "bench_beam",
    "bench_gpu",
    "bench_dtype",
    "bench_crowd",
    "bench_ragged",
    "bench_serving",
]


def test_benchmarks_import_neither_gradio_nor_gguf() -> None:
    code = (
        "import sys\n"
        + "".join(f"import bench.{name}\n" for name in BENCHES)
        + "bad = sorted(m for m in ('gradio', 'gguf', 'plotly', 'gradio_client') if m in sys.modules)\n"
        + "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""


def test_shipped_configs_are_the_published_shapes() -> None:
    from transformers import AutoConfig

    one = AutoConfig.from_pretrained(str(ROOT / "bench/configs/llama-3.2-1b.json"))
    eight = AutoConfig.from_pretrained(str(ROOT / "bench/configs/llama-3.1-8b.json"))
    assert (one.hidden_size, one.num_hidden_layers, one.num_key_value_heads, one.tie_word_embeddings) == (
        2048,
        16,
        8,
        True,
    )
    assert (
        eight.hidden_size,
        eight.num_hidden_layers,
        eight.intermediate_size,
        eight.tie_word_embeddings,
    ) == (
        4096,
        32,
        14336,
        False,
    )
    for config in (one, eight):
        assert config.vocab_size == 128256 and config.max_position_embeddings == 131072
        assert (
            config.rope_parameters["rope_type"] == "llama3"
            and config.rope_parameters["rope_theta"] == 500000.0
        )

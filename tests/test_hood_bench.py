"""The Under the hood benchmarks must run on a bare GPU box with only torch + transformers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ["bench_speculative", "bench_kv_on_off", "bench_batching"]


def run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env
    )


def test_benchmarks_import_neither_gradio_nor_plotly() -> None:
    code = "import sys\n" + "".join(f"import bench.{name}\n" for name in BENCHES)
    banned = "('gradio', 'gguf', 'plotly', 'gradio_client')"
    code += f"print(','.join(sorted(m for m in {banned} if m in sys.modules)))"
    done = run(["-c", code])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""

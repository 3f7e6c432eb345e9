#!/usr/bin/env bash
# Set everything up (first time only) and run the whole test suite, lint included.
# Extra arguments go to pytest, e.g. ./test.sh -k chat
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements-dev.txt
# optimum-quanto's C++ kernel (the int4/int2 KV cache of the quantization tests): built once per machine
# into the cache folder (about 2 minutes on 2 cores), loaded from there afterwards. run.sh leaves it to
# the quantization lesson, which builds it the first time it needs it.
.venv/bin/python -c "from playground.engine.kv_quant import main; main()"
scripts/install_browser.sh || echo "warning: no Chromium: browser tests will be skipped"
scripts/build_llama_server.sh >/dev/null || echo "warning: no llama-server: remote-engine tests will be skipped"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Python 3.10 (ZeroGPU Spaces run 3.10.13): no newer API anywhere
.venv/bin/vermin -q -t=3.10- --no-tips --violations --eval-annotations --exclude-regex '^\.venv/' playground app.py bench scripts tests
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest -q -rs --durations=15 "$@"

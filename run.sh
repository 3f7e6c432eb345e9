#!/usr/bin/env bash
# Set everything up (first time only) and run the app on the embedded model.
# Extra arguments go to app.py, e.g. ./run.sh --port 8000 --model HuggingFaceTB/SmolLM2-360M-Instruct
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements.txt
exec .venv/bin/python app.py "$@"

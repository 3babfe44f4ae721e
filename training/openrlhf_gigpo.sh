#!/usr/bin/env bash
# GiGPO on OpenRLHF 0.11.2 (Ray + vLLM + DeepSpeed), one node of 8 GPUs by default.
#
#   bash training/openrlhf_gigpo.sh [--dry-run] [flags...]
#
# Flags are OpenRLHF 0.11's own (dotted names, e.g. --actor.model_name_or_path,
# --vllm.num_engines) plus ours: --env, --env.kwargs, --env.num_tasks,
# --env.max_new_tokens, --group_size, --history_length, --algo.advantage.estimator
# (gigpo, grpo, rloo, hgpo, graphgpo: gigpo_algo's; or OpenRLHF's own), --algo.gigpo.gamma,
# --algo.gigpo.norm, --algo.gigpo.similarity, ... (gigpo_algo's names; see
# training/openrlhf/command.py). A flag given here overrides the default below.
# --dry-run prints the fully resolved command and starts nothing. Every flag is checked
# before Ray starts; OpenRLHF's modes (async training, dynamic filtering, GSPO, packing, ...)
# and what each does with GiGPO: docs/openrlhf.md#openrlhf-modes.
#
# Needs: pip install -e ".[openrlhf]" (openrlhf==0.11.2, with vllm) on every node.
# Ray: joins $RAY_ADDRESS when set, else starts a local head node if none is running.
# A thin wrapper: the launcher is training/openrlhf/launch.py, which an install also has as
# the console script gigpo-openrlhf (the defaults live there).
set -euo pipefail
PYTHON=${PYTHON:-python3}
export PYTHON
exec "$PYTHON" -m training.openrlhf.launch "$@"

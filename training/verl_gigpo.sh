#!/usr/bin/env bash
# GiGPO, HGPO and GraphGPO on verl 0.9.1 (its v1 trainer, vLLM rollouts), one node of 8 GPUs by
# default: the gigpo plugin's agent loop plays each env step as its own sample.
#
#   bash training/verl_gigpo.sh [--dry-run] [--env ID] [--group_size N] [key=value...]
#
# Arguments are verl's own Hydra overrides (key=value, e.g.
# actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct, algorithm.adv_estimator=hgpo,
# algorithm.gigpo.step_advantage_w=1.0: verl-agent's names or gigpo_algo's) plus ours: --env,
# --env.kwargs, --env.num_tasks, --env.val_tasks, --env.max_new_tokens, --env.workers,
# --group_size, --history_length, --run_dir, --dataset_dir. Every command passes verl's own
# checks first; --dry-run prints the settings, the batch and the full verl command and starts
# nothing. docs/verl.md says what runs where.
#
# Needs: pip install -e ".[verl]" (in a clone) plus verl's GPU stack (vllm, flash-attn) on every
# node; on a CPU machine the verl-cpu extra and trainer.device=cpu (docs/verl.md).
# A thin wrapper: the launcher is training/verl/launch.py, installed as gigpo-verl.
set -euo pipefail
PYTHON=${PYTHON:-python3}
export PYTHON
exec "$PYTHON" -m training.verl.launch "$@"

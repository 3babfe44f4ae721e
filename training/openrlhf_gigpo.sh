#!/usr/bin/env bash
# GiGPO on OpenRLHF 0.11.2 (Ray + vLLM + DeepSpeed), one node of 8 GPUs by default.
#
#   bash training/openrlhf_gigpo.sh [--dry-run] [flags...]
#
# Flags are OpenRLHF 0.11's own (dotted names, e.g. --actor.model_name_or_path,
# --vllm.num_engines) plus ours: --env, --env.kwargs, --env.num_tasks,
# --env.max_new_tokens, --group_size, --history_length, --algo.advantage.estimator
# (gigpo, grpo, rloo: gigpo_algo's), --algo.gigpo.step_weight, --algo.gigpo.gamma,
# --algo.gigpo.norm, --algo.gigpo.similarity, ... (gigpo_algo's names; see
# training/openrlhf/command.py). A flag given here overrides the default below.
# --dry-run prints the fully resolved command and starts nothing.
#
# Needs: pip install -e ".[openrlhf]" (openrlhf==0.11.2, with vllm) on every node.
# Ray: joins $RAY_ADDRESS when set, else starts a local head node if none is running.
set -euo pipefail

PYTHON=${PYTHON:-python3}
RAY_DASHBOARD=${RAY_DASHBOARD:-http://127.0.0.1:8265}
GPUS=${GPUS:-8}

DEFAULTS=(
  --actor.model_name_or_path Qwen/Qwen2.5-1.5B-Instruct
  --actor.num_nodes 1 --actor.num_gpus_per_node "$GPUS"
  --ref.num_nodes 1 --ref.num_gpus_per_node "$GPUS"
  --vllm.num_engines "$GPUS" --vllm.tensor_parallel_size 1
  --vllm.gpu_memory_utilization 0.6 --vllm.enable_sleep --train.colocate_all
  --ds.zero_stage 3 --ds.param_dtype bf16
  --data.max_len 4096 --rollout.max_new_tokens 512
  --rollout.batch_size 16 --rollout.micro_batch_size 8 --rollout.temperature 1.0
  --train.batch_size 128 --train.micro_batch_size 4
  --train.max_epochs 1 --train.num_episodes 20
  --actor.adam.lr 1e-6
  --algo.kl.use_loss --algo.kl.init_coef 0.01 --algo.kl.estimator k3
  --ckpt.output_dir runs/openrlhf_gigpo/final --ckpt.path runs/openrlhf_gigpo/ckpt
  --logger.logging_steps 1
  --env gigpo/Sokoban-v0 --env.max_new_tokens 512
  --group_size 8 --history_length 0
  --algo.advantage.estimator gigpo
)

DRY_RUN=0
USER_ARGS=()
for arg in "$@"; do
  if [[ $arg == --dry-run ]]; then DRY_RUN=1; else USER_ARGS+=("$arg"); fi
done

# A user flag replaces the default of the same name (with its value, if the default has one).
ARGS=()
i=0
while ((i < ${#DEFAULTS[@]})); do
  flag=${DEFAULTS[i]}
  value=()
  if ((i + 1 < ${#DEFAULTS[@]})) && [[ ${DEFAULTS[i + 1]} != --* ]]; then
    value=("${DEFAULTS[i + 1]}")
    i=$((i + 1))
  fi
  i=$((i + 1))
  overridden=0
  for user in "${USER_ARGS[@]+"${USER_ARGS[@]}"}"; do
    if [[ $user == "$flag" || $user == "$flag="* ]]; then overridden=1; fi
  done
  # --group_size and --rollout.n_samples_per_prompt name the same thing.
  if [[ $flag == --group_size ]]; then
    for user in "${USER_ARGS[@]+"${USER_ARGS[@]}"}"; do
      [[ $user == --rollout.n_samples_per_prompt* ]] && overridden=1
    done
  fi
  if ((overridden == 0)); then ARGS+=("$flag" "${value[@]+"${value[@]}"}"); fi
done
ARGS+=("${USER_ARGS[@]+"${USER_ARGS[@]}"}")

SUBMIT=(ray job submit --address "$RAY_DASHBOARD" -- "$PYTHON" -m training.openrlhf.train "${ARGS[@]}")

if ((DRY_RUN)); then
  echo "# submit:"
  printf '%q ' "${SUBMIT[@]}"
  echo
  echo "# resolved (inside the job):"
  exec "$PYTHON" -m training.openrlhf.train --dry-run "${ARGS[@]}"
fi

if [[ -z ${RAY_ADDRESS:-} ]] && ! ray status >/dev/null 2>&1; then
  ray start --head --num-gpus "$GPUS" --dashboard-host 127.0.0.1
fi
exec "${SUBMIT[@]}"

"""A LoRA actor's weight syncs to vLLM and one training step, on OpenRLHF 0.11.2's real code.

Run by ``test_openrlhf_lora.py`` in a fresh process with ``tests/standins`` first on
``sys.path``. Reads a JSON job on stdin::

    {"args": [training.openrlhf.train's arguments, as the launcher submits them],
     "ray_tmp": short folder, "out": file to write}

and writes ``out`` (``torch.save``; tensors, lists and strings only): ``before`` and
``after`` (the actor's parameters under PEFT's names, whole, around the training step),
``initial``, ``broadcast``, ``ipc`` (what the engine loaded in each sync: ``names`` in order,
``loaded`` tensors, its weights ``version`` and ``prefix_cache_resets`` after it), ``status``
(the step's metrics), ``unpatched_error`` and the LoRA settings OpenRLHF parsed.

Real: the launcher's plan, OpenRLHF's parser and checks, the GiGPO patches in this process
and in Ray's workers, OpenRLHF's ``create_vllm_engines`` (one real ``RolloutRayActor``), a
real ``PolicyModelActor`` with PEFT's LoRA under DeepSpeed (CPU accelerator, gloo) built here
with those engines, so that its ``ActorPPOTrainer`` joins their weight-sync group itself
(``_init_vllm_sync_group``), its ``broadcast_to_vllm`` (patched) and its ``fit``. Stand-ins,
each for what cannot run here: the vLLM engine (``tests/standins/vllm``: its worker side of
the sync receives each tensor over a gloo group, or from a CPU tensor shared by handle for
CUDA IPC, and loads it under the model's own names or fails), the GPU calls
(``openrlhf_real_run.run_cuda_calls_on_cpu``, and here ``torch.cuda.current_stream`` and
the physical GPU id the IPC handles are keyed by), and the rollout: the training step's
experience is built here (random tokens and advantages, the policy's own log-probs).

In order: a sync of the adapters as PEFT made them (``initial``); one training step; a sync
by broadcast (``broadcast``, OpenRLHF's path when the engines have GPUs of their own) and one
by IPC handles (``ipc``, its path under ``--train.colocate_all``: ``use_cuda_ipc`` set as
OpenRLHF sets it there); then OpenRLHF's own, unpatched method once, whose failure is kept.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

#: The experience the training step trains on: samples, tokens each, response tokens each.
SAMPLES, LENGTH, RESPONSE = 8, 12, 6


def gathered_state(model: Any, zero3: bool) -> dict[str, Any]:
    """Every parameter of ``model`` (PEFT's names), whole, as a copy."""
    import deepspeed

    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=zero3):
        return {n: p.data.detach().clone() for n, p in model.named_parameters()}


def engine_sync(engine: Any, since: int) -> dict:
    """What the engine loaded since its ``since``-th load: names in order, last tensors."""
    import ray

    def read(actor: Any) -> dict:
        sync = actor.llm.sync
        names = sync.names[since:]
        return {
            "names": names,
            "loaded": {n: sync.loaded[n] for n in names},
            "version": actor.llm.weights_version,
            "prefix_cache_resets": actor.llm.prefix_cache_resets,
        }

    return ray.get(engine.__ray_call__.remote(read))


def experience_for(policy: Any, vocab: int) -> Any:
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    generator = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, vocab, (SAMPLES, LENGTH), generator=generator)
    attention = torch.ones(SAMPLES, LENGTH, dtype=torch.long)
    action_mask = torch.ones(SAMPLES, RESPONSE, dtype=torch.bool)
    log_probs = policy.forward(sequences, action_mask, attention)
    advantages = torch.randn(SAMPLES, RESPONSE, generator=generator)
    return Experience(
        sequences=sequences,
        attention_mask=attention,
        action_mask=action_mask,
        action_log_probs=log_probs,
        base_action_log_probs=log_probs.clone(),
        advantages=advantages,
        returns=advantages.clone(),
        rewards=torch.zeros(SAMPLES),
        response_length=torch.full((SAMPLES,), float(RESPONSE)),
        total_length=torch.full((SAMPLES,), float(LENGTH)),
    )


def main() -> None:
    job = json.load(sys.stdin)
    from openrlhf_real_run import free_port

    os.environ.update(
        RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    import ray
    import torch

    from training.openrlhf.command import plan
    from training.openrlhf.train import prepare

    run_plan = plan(job["args"])
    env_vars = {
        **run_plan.runtime_env["env_vars"],
        "PYTHONPATH": os.environ["PYTHONPATH"],
        "GIGPO_STANDIN_VLLM_SCRIPT": json.dumps(["<action>+</action>"]),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    runtime_env = {**run_plan.runtime_env, "env_vars": env_vars}
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             _temp_dir=job["ray_tmp"], runtime_env=runtime_env)  # fmt: skip
    try:
        out = run(run_plan, prepare)
    finally:
        ray.shutdown()
    torch.save(out, job["out"])


def run(run_plan: Any, prepare: Any) -> dict:
    prepare(run_plan)  # this process patched, as OpenRLHF's driver and actors are
    from openrlhf_real_parse import parsed_args
    from openrlhf_real_run import built_on_cpu, run_cuda_calls_on_cpu

    args = parsed_args(run_plan.openrlhf_args)
    run_cuda_calls_on_cpu()
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import torch
    from openrlhf.trainer.ray.vllm_engine import create_vllm_engines
    from openrlhf.utils.utils import get_strategy
    from vllm.weight_sync import STANDIN_GPU_ID

    torch.cuda.current_stream = lambda device=None: None
    ppo_actor.get_physical_gpu_id = lambda: STANDIN_GPU_ID
    strategy = get_strategy(args)
    pretrain = args.actor.model_name_or_path
    (engine,) = create_vllm_engines(
        1, 1, pretrain, args.train.seed, False, args.vllm.enable_prefix_caching, True,
        args.data.max_len, None, None, False, None,
    )  # fmt: skip
    policy = built_on_cpu(ppo_actor.PolicyModelActor, strategy, pretrain, 10, [engine])
    trainer = policy.trainer
    model = trainer.actor.model.module
    zero3 = args.ds.zero_stage == 3
    lora = args.ds.lora
    out: dict = {"lora_rank": lora.rank, "lora_alpha": lora.alpha}
    out["before"] = gathered_state(model, zero3)
    loads = 0

    def sync(name: str) -> None:
        nonlocal loads
        policy.broadcast_to_vllm()
        out[name] = engine_sync(engine, loads)
        loads += len(out[name]["names"])

    sync("initial")
    policy.append(experience_for(policy, model.config.vocab_size))
    out["status"] = {k: float(v) for k, v in policy.fit(kl_ctl=0.01).items()}
    out["after"] = gathered_state(model, zero3)
    sync("broadcast")
    trainer.use_cuda_ipc = True  # as OpenRLHF sets it under --train.colocate_all (nccl)
    sync("ipc")
    trainer.use_cuda_ipc = False
    try:
        type(trainer).broadcast_to_vllm.__wrapped__(trainer)  # OpenRLHF's own
        out["unpatched_error"] = ""
    except Exception as exc:  # the engine's refusal, through Ray
        out["unpatched_error"] = f"{type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    main()

"""One OpenRLHF 0.11.2 training step with the GiGPO glue, on CPU: rollout to PPO update.

Run by ``test_openrlhf_real.py`` in a fresh process with ``tests/standins`` first on
``sys.path``. Reads a JSON job on stdin::

    {"args": [training.openrlhf.train's arguments, as the launcher submits them],
     "script": [texts the vLLM stand-in answers with], "ray_tmp": short folder}

and prints one JSON line (see :func:`main`). What runs is what ``openrlhf.cli.train_ppo_ray``
and its ``PPOTrainer`` run, in this order, with OpenRLHF's own code:

1. ``training.openrlhf.train.prepare``: the task dataset written, the run's variables, the
   patches, Ray joined (started here first: local, loopback, with the run's runtime env);
2. OpenRLHF's argument parser and checks on the plan's command line;
3. its ``DeepspeedStrategy`` (world size 1, gloo), tokenizer and ``prepare_datasets``;
4. its ``create_vllm_engines``: one real ``RolloutRayActor`` in a Ray worker that loads the
   project's executor from ``--train.agent_func_path`` and is patched by the worker hook;
5. its ``SamplesGenerator.generate_samples``: one rollout batch of real episodes;
6. its ``BasePPOTrainer.train_step``: ``make_experience_batch`` (patched), the experiences
   appended to a real ``PolicyModelActor``, whose ``fit`` runs ``ActorPPOTrainer.ppo_train``
   and ``training_step`` under DeepSpeed (its CPU accelerator) on the tiny model; the
   reference model is a real ``ReferenceModelActor``, the value model (``gae``) a real
   ``CriticModelActor``.

Stand-ins, each for what cannot run here, named so:

* ``vllm`` (``tests/standins/vllm``): its engine answers from the script, not a model;
* ``flash_attn``: import-only; the tiny model runs with ``--ds.attn_implementation sdpa``;
* the GPU, :func:`run_cuda_calls_on_cpu`: the few ``torch.cuda`` calls OpenRLHF makes
  outside its models go to the CPU, and its device mesh is a CPU mesh;
* :class:`InProcessGroup`: OpenRLHF's ``RayActorGroup`` runs each model actor as a Ray actor
  that claims a GPU; here one real actor instance runs in this process, behind the same
  ``async_run_method`` / ``async_run_method_batch`` calls (its own ``execute_batch``);
* ``train_step`` gets ``vllm_engines=None``: the weight broadcast to vLLM is NCCL/CUDA IPC.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any


def run_cuda_calls_on_cpu() -> None:
    """Stand-in for the GPU: OpenRLHF's ``torch.cuda`` calls outside the models, on the CPU.

    ``current_device()`` names the CPU (OpenRLHF moves tensors ``.to()`` it); ``set_device``,
    ``synchronize`` are no-ops; the strategy's ``init_device_mesh("cuda", ...)`` builds a CPU
    mesh. While a model actor is built, ``current_device()`` is ``0`` instead (see
    :func:`built_on_cpu`): the replay buffer formats ``f"cuda:{index}"`` for its ``sample()``,
    which PPO training does not call.
    """
    import openrlhf.utils.deepspeed.deepspeed as strategy_module
    import torch

    torch.cuda.current_device = lambda: CURRENT_DEVICE[0]
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    real_mesh = strategy_module.init_device_mesh

    def cpu_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return real_mesh("cpu", *args, **kwargs)

    strategy_module.init_device_mesh = cpu_mesh


CURRENT_DEVICE: list[Any] = ["cpu"]


def built_on_cpu(actor_class: Any, *args: Any) -> Any:
    """A real OpenRLHF model actor (the class under ``@ray.remote``) built in this process."""
    cls = actor_class.__ray_metadata__.modified_class
    actor = cls(1, 0, "127.0.0.1", free_port())  # world size 1, rank 0
    CURRENT_DEVICE[0] = 0
    try:
        actor.init_model_from_pretrained(*args)
    finally:
        CURRENT_DEVICE[0] = "cpu"
    return actor


class InProcessGroup:
    """Stand-in for ``RayActorGroup``: one real model actor, in this process (see above)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def async_run_method(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        import ray

        return [ray.put(getattr(self.actor, method_name)(*args, **kwargs))]

    def async_run_method_batch(self, method_name: str, **kwargs: Any) -> list:
        import ray

        total = len(next(iter(kwargs.values())))
        return [ray.put(self.actor.execute_batch(method_name, kwargs, 0, total))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Spy:
    """Records each micro-batch ``training_step`` gets, then calls the real method."""

    def __init__(self, trainer: Any) -> None:
        self.real, self.rows = trainer.training_step, []

    def __call__(self, experience: Any, *args: Any, **kwargs: Any) -> Any:
        for k in range(len(experience.sequences)):
            keep = experience.attention_mask[k].bool()
            rollout = experience.rollout_log_probs
            self.rows.append(
                {
                    "label": experience.labels[k],
                    "tokens": experience.sequences[k][keep].tolist(),
                    "advantages": experience.advantages[k].float().tolist(),
                    "action_mask": experience.action_mask[k].tolist(),
                    "rollout_log_probs": None if rollout is None else rollout[k].tolist(),
                }
            )
        return self.real(experience, *args, **kwargs)


def main() -> None:
    job = json.load(sys.stdin)
    os.environ.update(
        RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    from training.openrlhf.command import plan
    from training.openrlhf.samples import sample_multiple
    from training.openrlhf.train import prepare
    from training.openrlhf.turns import INFO_KEY

    run_plan = plan(job["args"])
    import ray

    env_vars = {
        **run_plan.runtime_env["env_vars"],
        "PYTHONPATH": os.environ["PYTHONPATH"],
        "GIGPO_STANDIN_VLLM_SCRIPT": json.dumps(job["script"]),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    os.environ["GIGPO_STANDIN_VLLM_SCRIPT"] = env_vars["GIGPO_STANDIN_VLLM_SCRIPT"]
    # One logical GPU: OpenRLHF places its engine in a {"GPU": 1, "CPU": 1} bundle.
    ray.init(
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=job["ray_tmp"],
        runtime_env={**run_plan.runtime_env, "env_vars": env_vars},
    )
    try:
        print(json.dumps(train_one_step(run_plan, prepare, INFO_KEY, sample_multiple)))
    finally:
        ray.shutdown()


def train_one_step(run_plan: Any, prepare: Any, info_key: str, sample_multiple: Any) -> dict:
    """Steps 1-6 of the module docstring; returns what the test checks."""
    prepare(run_plan)
    from openrlhf_real_parse import parsed_args

    args = parsed_args(run_plan.openrlhf_args)
    run_cuda_calls_on_cpu()
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer, prepare_datasets
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.launcher import ReferenceModelActor
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from openrlhf.trainer.ray.ppo_critic import CriticModelActor
    from openrlhf.trainer.ray.vllm_engine import create_vllm_engines
    from openrlhf.utils.utils import get_strategy, get_tokenizer

    strategy = get_strategy(args)  # the driver's: distributed is set up by the model actors
    pretrain = args.actor.model_name_or_path
    tokenizer = get_tokenizer(pretrain, None, "left", strategy, use_fast=True)
    prompts, _, max_steps = prepare_datasets(strategy, tokenizer)
    engines = create_vllm_engines(
        args.vllm.num_engines,
        args.vllm.tensor_parallel_size,
        pretrain,
        args.train.seed,
        args.train.full_determinism_enable,
        args.vllm.enable_prefix_caching,
        args.vllm.enforce_eager,
        args.data.max_len,
        None,
        args.vllm.gpu_memory_utilization,
        args.vllm.enable_sleep,
        "processed_logprobs" if args.algo.advantage.is_correction_level != "off" else None,
        agent_func_path=args.train.agent_func_path,
        remote_rm_url=args.reward.remote_url,
    )
    generate_kwargs = {
        "do_sample": True,
        "max_len": args.data.max_len,
        "max_new_tokens": args.rollout.max_new_tokens,
        "temperature": args.rollout.temperature,
        "top_p": args.rollout.top_p,
    }
    samples, _, _, _ = SamplesGenerator(
        strategy, prompts, None, tokenizer, engines
    ).generate_samples(**generate_kwargs)
    records = [s.info[info_key][0] for s in samples]
    keys = [[s.labels[0], s.sequences[0][s.attention_mask[0].bool()].tolist()] for s in samples]

    policy = built_on_cpu(PolicyModelActor, strategy, pretrain, max_steps, None)
    reference = None
    if args.algo.kl.init_coef > 0:
        reference = InProcessGroup(built_on_cpu(ReferenceModelActor, strategy, pretrain))
    critic = None
    if args.critic.model_name_or_path:  # gae: a value model, trained beside the policy
        critic_path = args.critic.model_name_or_path
        critic = InProcessGroup(built_on_cpu(CriticModelActor, strategy, critic_path, max_steps))
    spy = Spy(policy.trainer)
    policy.trainer.training_step = spy
    probe = samples[0]
    before = policy.forward(probe.sequences, probe.action_mask, probe.attention_mask)
    trainer = BasePPOTrainer(
        strategy, InProcessGroup(policy), critic, None, reference, None, tokenizer
    )
    status, _ = trainer.train_step(samples, 1)
    after = policy.forward(probe.sequences, probe.action_mask, probe.attention_mask)
    return {
        "estimator": args.algo.advantage.estimator,
        "records": records,
        "keys": keys,
        "train_rows": spy.rows,
        "status": {k: v for k, v in status.items() if isinstance(v, (int, float))},
        "policy_moved": float((after - before).abs().max()),
        "sample_multiple": sample_multiple(args) if run_plan.layout == "step" else None,
    }


if __name__ == "__main__":
    main()

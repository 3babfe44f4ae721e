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
* ``flash_attn``: its padding helpers only (``training/openrlhf/flash_attn_cpu``); the tiny
  model runs with ``--ds.attn_implementation sdpa``;
* the GPU, :func:`run_cuda_calls_on_cpu`: the few ``torch.cuda`` calls OpenRLHF makes
  outside its models go to the CPU, and its device mesh is a CPU mesh;
* :class:`InProcessGroup`: OpenRLHF's ``RayActorGroup`` runs each model actor as a Ray actor
  that claims a GPU; here one real actor instance runs in this process, behind the same
  ``async_run_method`` / ``async_run_method_batch`` calls (its own ``execute_batch``);
* ``train_step`` gets ``vllm_engines=None``: the weight broadcast to vLLM is NCCL/CUDA IPC;
  where a run needs it (asynchronous training), :class:`InProcessGroup` stands in for the
  policy's ``broadcast_to_vllm`` by one ``update_weight`` call per engine (OpenRLHF's own
  ``RolloutRayActor`` method), which the vLLM stand-in counts as a new weights version;
* ``--ds.packing_samples``: OpenRLHF loads the model with flash-attn's kernel, whose varlen
  attention keeps packed samples apart; here the model runs transformers' ``sdpa``, which
  does the same from the packed position ids (the run reports the largest gap between the
  packed and the padded forward pass of one batch, ``packing_gap``).

With ``"async": true`` in the job, step 5-6 are OpenRLHF's asynchronous trainer instead
(``--train.async_enable``): its real ``GenerateSamplesActor`` in a Ray worker fills its real
rollout queue (``ray.util.queue.Queue``, ``--train.async_queue_size`` slots, its real
``VLLMLock``), and its ``TrainingActor`` (the class under ``@ray.remote``, in this process,
like the model actors) runs ``fit`` until the generator is done: every training step of the
task dataset, each reported on its own.
"""

from __future__ import annotations

import dataclasses
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
    torch.cuda.empty_cache = lambda: None
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
    """Stand-in for ``RayActorGroup``: one real model actor, in this process (see above).

    ``broadcast_to_vllm`` (NCCL or CUDA IPC in OpenRLHF) is one ``update_weight`` call to
    each of ``engines``, which the vLLM stand-in counts as a weight sync."""

    def __init__(self, actor: Any, engines: list | None = None) -> None:
        self.actor, self.engines = actor, engines or []

    def async_run_method(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        import ray

        if method_name == "broadcast_to_vllm":
            refs = [e.update_weight.remote("standin.weights", None, None) for e in self.engines]
            return [ray.put(ray.get(refs))]
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
        self.real, self.rows, self.step = trainer.training_step, [], 0

    def __call__(self, experience: Any, *args: Any, **kwargs: Any) -> Any:
        for k in range(len(experience.sequences)):
            keep = experience.attention_mask[k].bool()
            rollout = experience.rollout_log_probs
            self.rows.append(
                {
                    "step": self.step,
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
    # flags the launcher refuses (a test of what the glue does under them, past the refusal)
    unchecked = list(job.get("unchecked_args", []))
    if unchecked:
        run_plan = dataclasses.replace(
            run_plan, openrlhf_args=[*run_plan.openrlhf_args, *unchecked]
        )
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
        num_cpus=4,  # logical: the engine's bundle, the async generator, the queues
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=job["ray_tmp"],
        runtime_env={**run_plan.runtime_env, "env_vars": env_vars},
    )
    try:
        print(json.dumps(train_one_step(run_plan, prepare, INFO_KEY, sample_multiple, job)))
    finally:
        ray.shutdown()


def train_one_step(
    run_plan: Any, prepare: Any, info_key: str, sample_multiple: Any, job: dict
) -> dict:
    """Steps 1-6 of the module docstring; returns what the test checks: per training step
    the rollout samples' turn records and keys, the rows ``training_step`` got and the
    status (``steps``; the first step's also at the top level)."""
    prepare(run_plan)
    from openrlhf_real_parse import parsed_args

    args = parsed_args(run_plan.openrlhf_args)
    packing = bool(args.ds.packing_samples)
    if packing:  # flash-attn's varlen kernel: sdpa keeps packed samples apart (see above)
        args.ds.attn_implementation = "sdpa"
    run_cuda_calls_on_cpu()
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer, prepare_datasets
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
    steps: list[dict] = []

    def record(samples: list) -> None:
        """The rollout samples of one training step, before it trains on them."""
        spy.step = len(steps)
        steps.append(
            {
                "records": [x.info[info_key][0] for x in samples],
                "keys": [
                    [x.labels[0], x.sequences[0][x.attention_mask[0].bool()].tolist()]
                    for x in samples
                ],
            }
        )

    probe = None
    if job.get("async"):
        import torch

        ids = tokenizer("Target: 2\nCurrent: 1\n<action>+</action>")["input_ids"]
        probe_ids = torch.tensor([ids])
        probe_mask, probe_attention = torch.ones(1, len(ids) - 1), torch.ones(1, len(ids))
        before = policy.forward(probe_ids, probe_mask, probe_attention)
        run_async(args, strategy, pretrain, engines, policy, critic, reference,
                  generate_kwargs, record, steps)  # fmt: skip
        after = policy.forward(probe_ids, probe_mask, probe_attention)
        out = {"policy_moved": float((after - before).abs().max())}
    else:
        from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

        samples, _, _, _ = SamplesGenerator(
            strategy, prompts, None, tokenizer, engines
        ).generate_samples(**generate_kwargs)
        record(samples)
        probe = samples[0]
        before = policy.forward(probe.sequences, probe.action_mask, probe.attention_mask)
        trainer = BasePPOTrainer(
            strategy, InProcessGroup(policy), critic, None, reference, None, tokenizer
        )
        status, _ = trainer.train_step(samples, 0)  # global step 0: the first, as fit starts
        after = policy.forward(probe.sequences, probe.action_mask, probe.attention_mask)
        steps[0]["status"] = status
        out = {"policy_moved": float((after - before).abs().max())}
    for i, step in enumerate(steps):
        step["train_rows"] = [row for row in spy.rows if row["step"] == i]
        step["status"] = {
            k: v for k, v in step.get("status", {}).items() if isinstance(v, (int, float))
        }
    out.update(
        {
            "estimator": args.algo.advantage.estimator,
            "sample_multiple": sample_multiple(args) if run_plan.layout == "step" else None,
            "steps": steps,
            "engines": engine_states(engines),
            "lora": trainable_lora(policy),
            "policy_loss": {
                "type": policy.trainer.actor_loss_fn.policy_loss_type,
                "token_level": bool(policy.trainer.actor_loss_fn.token_level_loss),
            },
            "packing_samples": bool(getattr(policy.actor, "packing_samples", False)),
            **{k: steps[0][k] for k in ("records", "keys", "train_rows", "status")},
        }
    )
    if packing:
        out["packing_gap"] = packing_gap(pretrain, steps, tokenizer)
    return out


def run_async(args, strategy, pretrain, engines, policy, critic, reference, generate_kwargs,
              record, steps) -> None:  # fmt: skip
    """OpenRLHF's asynchronous trainer (``PPOTrainerAsync.fit`` without its Ray wrapper):
    its generator actor in a Ray worker, its training actor in this process."""
    import ray
    from openrlhf.trainer.ppo_trainer_async import GenerateSamplesActor, TrainingActor, VLLMLock
    from openrlhf.utils.utils import get_strategy
    from ray.util.queue import Queue

    queue_size = args.train.async_queue_size
    rollout_queue, slots = Queue(maxsize=queue_size), Queue(maxsize=queue_size)
    for _ in range(queue_size):
        slots.put(0, block=True)
    lock = VLLMLock.remote()
    # the generator gets its own strategy, as OpenRLHF's driver sends it: this process's
    # holds the model actors' process groups now
    generator = GenerateSamplesActor.remote(
        pretrain=pretrain, strategy=get_strategy(args), vllm_engines=engines, vllm_lock=lock,
        rollout_queue=rollout_queue, rollout_slots=slots, **generate_kwargs,
    )  # fmt: skip
    trainer = TrainingActor.__ray_metadata__.modified_class(
        pretrain=pretrain, strategy=strategy, actor_model_group=InProcessGroup(policy, engines),
        critic_model_group=critic, reward_model_group=None, reference_model_group=reference,
        vllm_engines=engines, vllm_lock=lock, rollout_queue=rollout_queue, rollout_slots=slots,
    )  # fmt: skip
    train_step = trainer.train_step

    def recording_train_step(rollout_samples: list, global_step: int) -> Any:
        record(rollout_samples)
        versions = sorted(
            {
                float(-1.0 - x.rollout_log_probs[0][x.action_mask[0].bool()][0])
                for x in rollout_samples
                if x.rollout_log_probs is not None and x.action_mask.any()
            }
        )
        steps[-1]["weights_versions"] = versions
        status, step = train_step(rollout_samples, global_step)
        steps[-1]["status"] = status
        return status, step

    trainer.train_step = recording_train_step
    generating = generator.fit.remote(episode=0, total_consumed_prompts=0)
    trainer.fit(global_step=0)
    ray.get(generating, timeout=600)


def engine_states(engines: list) -> list[dict]:
    """What each vLLM stand-in engine saw (through OpenRLHF's own ``RolloutRayActor``)."""
    import ray

    def state(actor: Any) -> dict:
        llm = actor.llm
        return {
            "enable_prefix_caching": bool(llm.engine_args.get("enable_prefix_caching")),
            "enable_sleep_mode": bool(llm.engine_args.get("enable_sleep_mode")),
            "weights_version": llm.weights_version,
            "generated": llm.generated,
            "asleep": sorted(llm.asleep),
        }

    return ray.get([e.__ray_call__.remote(state) for e in engines])


def trainable_lora(policy: Any) -> dict:
    """The policy's trainable weights: how many are LoRA adapters and how many are not."""
    names = [n for n, p in policy.actor.model.named_parameters() if p.requires_grad]
    lora = [n for n in names if "lora_" in n]
    return {"lora": len(lora), "other": len(names) - len(lora)}


def packing_gap(pretrain: str, steps: list, tokenizer: Any) -> float:
    """The largest |packed - padded| log-prob of the first step's first samples, through
    OpenRLHF's own ``Actor.forward`` (its packing path: unpad, one row with restarting
    position ids, pad back) on the model in float32 (the run's is bfloat16, whose rounding
    differs with the batch's shape)."""
    import torch
    from openrlhf.models import Actor
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(pretrain, attn_implementation="sdpa",
                                                 dtype=torch.float32)  # fmt: skip
    model.config.use_cache = False  # as OpenRLHF loads it
    actor = Actor(model)
    rows = [torch.tensor(tokens) for _, tokens in steps[0]["keys"][:4]]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    sequences = torch.stack([torch.cat([r, r.new_full((width - len(r),), pad)]) for r in rows])
    attention = torch.stack(
        [torch.cat([torch.ones(len(r)), torch.zeros(width - len(r))]).long() for r in rows]
    )
    mask = attention[:, 1:].clone()
    with torch.no_grad():
        actor.packing_samples = True
        packed = actor(sequences, mask, attention_mask=attention)
        actor.packing_samples = False
        padded = actor(sequences, mask, attention_mask=attention)
    return float(((packed - padded) * mask).abs().max())


if __name__ == "__main__":
    main()

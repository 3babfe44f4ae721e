"""OpenRLHF 0.11.2's own rollout-to-advantage chain with the GiGPO executor, in one process.

Run by ``test_openrlhf_real.py`` with ``tests/standins`` first on ``sys.path`` (``vllm`` and
``flash_attn`` cannot be installed on a CPU). Reads a JSON job on stdin:
``{"tokenizer": dir, "argv": [OpenRLHF flags], "settings": json or null}`` and prints JSON.

Real: OpenRLHF's argument parser and checks (``openrlhf.cli.train_ppo_ray``, stopped where
it would start Ray), the project's patches installed on import, the executor playing real
NumberLine episodes, ``SamplesGenerator._process_response_into_experience``,
``RemoteExperienceMaker.split_rollout_samples`` and ``compute_advantages_and_returns``, and
the replay buffer's split, unpadding and collation into training micro-batches.
Stand-ins: the vLLM engine (:class:`ScriptedEngine`: answers from a seeded script); the
experience maker is OpenRLHF's class built without its constructor (which starts Ray actor
groups for the models), holding the parsed args, the tokenizer and a zero KL controller, and
the KL is zero (``make_experience`` would compute it with those models).
"""

from __future__ import annotations

import asyncio
import json
import random
import runpy
import sys
from types import SimpleNamespace


class ScriptedEngine:
    """Stand-in for vLLM's ``generate``: answers ``+``, ``-`` or an invalid text, seeded."""

    def __init__(self, tokenizer, seed: int) -> None:
        self.tokenizer, self.rng = tokenizer, random.Random(seed)

    async def generate(self, token_ids, params, multi_modal_data=None):
        text = self.rng.choice(["<action>+</action>", "<action>-</action>", "hmm"])
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: params.max_tokens]
        ids = ids + [self.tokenizer.eos_token_id]
        logprobs = [{t: SimpleNamespace(logprob=-1.0)} for t in ids]
        output = SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=logprobs)
        return SimpleNamespace(outputs=[output])


def parsed_args(argv: list[str]):
    """OpenRLHF's own parser and checks on ``argv``; stops where ``train(args)`` would start."""
    import openrlhf.utils.config as config
    import ray

    class ReachedTrain(Exception):
        pass

    def stop(*args, **kwargs):
        raise ReachedTrain

    seen = {}
    real_hierarchize = config.hierarchize

    def recording(args):
        seen["args"] = real_hierarchize(args)
        return seen["args"]

    saved = (ray.init, ray.is_initialized, config.hierarchize, sys.argv)
    ray.init, ray.is_initialized, config.hierarchize = stop, lambda: False, recording
    sys.argv = ["openrlhf.cli.train_ppo_ray", *argv]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except ReachedTrain:
        return seen["args"]
    finally:
        ray.init, ray.is_initialized, config.hierarchize, sys.argv = saved
    raise RuntimeError("OpenRLHF's train_ppo_ray returned without starting training")


def parse_only(argvs: list[list[str]]) -> list[dict]:
    """Each command line through OpenRLHF's parser and checks: what it resolved, or the error."""
    out = []
    for argv in argvs:
        try:
            a = parsed_args(argv)
        except BaseException as exc:  # the parser's SystemExit and the checks' AssertionError
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append(
            {
                "estimator": a.algo.advantage.estimator,
                "n_samples_per_prompt": a.rollout.n_samples_per_prompt,
                "agent_func_path": a.train.agent_func_path,
                "remote_url": a.reward.remote_url,
                "prompt_dataset": a.data.prompt_dataset,
                "kl_use_loss": a.algo.kl.use_loss,
            }
        )
    return out


def main() -> None:
    job = json.load(sys.stdin)
    import os

    if "parse_only" in job:
        print(json.dumps(parse_only(job["parse_only"])))
        return

    if job.get("settings"):
        os.environ["GIGPO_OPENRLHF_SETTINGS"] = job["settings"]
    from training.openrlhf.patch import install_patches

    install_patches()
    import torch
    from openrlhf.trainer.ppo_utils.experience import (
        make_experience_batch,
        remove_padding_in_sequences,
        split_experience_batch,
    )
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from transformers import AutoTokenizer

    from training.openrlhf.executor import Task, run_episode, task_label

    args = parsed_args(job["argv"])
    tokenizer = AutoTokenizer.from_pretrained(job["tokenizer"])
    n = args.rollout.n_samples_per_prompt
    numberline = {"max_position": 3, "max_steps": 3}
    tasks = [Task("gigpo/NumberLine-v0", seed, numberline) for seed in (1, 2)]
    params = SimpleNamespace(max_tokens=16, logprobs=1)

    async def play():
        episodes = [
            run_episode("p", task_label(task), params, 1024, tokenizer, engine)
            for t, task in enumerate(tasks)
            for engine in (ScriptedEngine(tokenizer, 10 * t + k) for k in range(n))
        ]
        return await asyncio.gather(*episodes)

    responses = asyncio.run(play())
    samples = [
        SamplesGenerator._process_response_into_experience(None, r, max_len=1024) for r in responses
    ]
    # The real class with its real methods; only its constructor (Ray model groups) is skipped.
    maker = RemoteExperienceMaker.__new__(RemoteExperienceMaker)
    maker.args, maker.strategy, maker.tokenizer = args, SimpleNamespace(args=args), tokenizer
    maker.kl_ctl = FixedKLController(0.0)
    maker.advantage_estimator = args.algo.advantage.estimator
    batches = RemoteExperienceMaker.split_rollout_samples(maker, samples)
    for batch in batches:
        batch.kl = torch.zeros_like(batch.action_mask, dtype=torch.float32)
    experiences = RemoteExperienceMaker.compute_advantages_and_returns(maker, batches)

    rows = []
    for experience in experiences:
        for i in range(len(experience.index)):
            rows.append(
                {
                    "index": int(experience.index[i]),
                    "advantages": experience.advantages[i].tolist(),
                    "action_mask": experience.action_mask[i].tolist(),
                }
            )
    # On to the actor: OpenRLHF's replay buffer splits experiences into samples, drops their
    # padding and collates training micro-batches (its own functions; its class needs CUDA).
    order = [int(i) for experience in experiences for i in experience.index]
    items = []
    for experience in experiences:
        items += remove_padding_in_sequences(split_experience_batch(experience))
    train_rows = []
    for start in range(0, len(items), 2):
        batch = make_experience_batch(items[start : start + 2])
        for k in range(len(batch.sequences)):
            train_rows.append(
                {
                    "index": order[start + k],
                    "advantages": batch.advantages[k].tolist(),
                    "action_mask": batch.action_mask[k].tolist(),
                }
            )
        # the PPO actor turns every info entry into a metric: tensors, or lists of numbers
        for value in batch.info.values():
            if isinstance(value, list):
                torch.tensor(value, dtype=torch.float)
    info_kinds = sorted(
        {
            f"{key}:{type(value).__name__}"
            for experience in experiences
            for key, value in experience.info.items()
        }
    )
    print(
        json.dumps(
            {
                "estimator": args.algo.advantage.estimator,
                "records": [r["gigpo"] for r in responses],
                "rows": rows,
                "train_rows": train_rows,
                "info": info_kinds,
                "group_reward_std": [
                    experience.info["group_reward_std"].tolist()
                    for experience in experiences
                    if "group_reward_std" in experience.info
                ],
            }
        )
    )


if __name__ == "__main__":
    main()

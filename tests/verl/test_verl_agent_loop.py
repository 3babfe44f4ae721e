"""The ``gigpo`` agent loop inside verl 0.9.1's real agent-loop machinery, on real
environments, many episodes at once; its outputs through verl's own v1 post-processing and
advantage step.

Stand-ins, for what does not run on this CPU machine:

* :class:`ScriptedServer` for verl's rollout server (vLLM / SGLang): each request is answered
  with one of a script's texts, drawn by a generator seeded per request order, tokenized with
  the model's own tokenizer and cut at ``max_tokens``, every token's log-prob -1;
* :class:`QueueStandIn` for verl's TransferQueue, whose ``tq.init()`` did not come up here
  within 5 minutes on 2 cores: a dict of per-key field dicts, read back with verl's own
  ``list_of_dict_to_tensordict`` (what TransferQueue's client returns: one TensorDict of the
  selected fields, jagged where lengths differ).

Everything else is verl's: ``AgentLoopBase`` (its continuous-token builder), the registry
and ``hydra.utils.instantiate`` as its worker uses them, ``AgentLoopWorkerTQ``'s
post-processing (keys ``{uid}_{session}_{i}``, the reward broadcast), ``PPOTrainer``'s
advantage step and ``compute_advantage_for_multi_trajectories``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from training.env_tasks import Task, task_label

#: What the stand-in server answers in ALFWorld: two admissible commands and an invalid text.
ALFWORLD_SCRIPT = ["<action>look</action>", "<action>inventory</action>", "no idea"]
SOKOBAN_SCRIPT = ["<action>up</action>", "<action>left</action>", "<action>right</action>",
                  "<action>down</action>", "push"]  # fmt: skip
WEBSHOP_SCRIPT = ["<action>search[red shirt]</action>", "<action>click[back to search]</action>",
                  "<action>click[item 1]</action>", "<action>buy now</action>", "?"]  # fmt: skip


class ScriptedServer:
    """Stands in for verl's rollout server (``LLMServerClient.generate``)."""

    def __init__(self, tokenizer: Any, script: list[str], seed: int = 0) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.rng = random.Random(seed)
        self.requests = 0
        self.in_flight = self.most_in_flight = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int],
                       sampling_params: dict[str, Any], **kwargs: Any) -> Any:  # fmt: skip
        from verl.workers.rollout.replica import TokenOutput

        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)  # let the other episodes' requests in, as a server would
        self.in_flight -= 1
        text = self.rng.choice(self.script)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = (ids + [self.tokenizer.eos_token_id])[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), stop_reason="completed")


class QueueStandIn:
    """Stands in for verl's TransferQueue client: per-key field dicts in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    async def async_kv_batch_put(self, keys, fields, tags=None, partition_id="train") -> None:
        self.kv_batch_put(keys, partition_id, fields)

    def kv_batch_put(self, keys, partition_id, fields, tags=None) -> None:
        for i, key in enumerate(keys):
            row = fields[i]
            stored = self.rows.setdefault(key, {})
            for name in row.keys():
                value = row[name]
                stored[name] = (
                    value.data if hasattr(value, "data") and not torch.is_tensor(value) else value
                )

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        return list_of_dict_to_tensordict(
            [{f: v for f, v in self.rows[k].items() if select_fields is None or f in select_fields}
             for k in keys]
        )  # fmt: skip


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from training.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=600)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def make_loop(verl_config, tokenizer, server, prompt_length: int = 1600, response_length: int = 16):
    """The ``gigpo`` agent loop built as verl's ``AgentLoopWorker._run_agent_loop`` builds it."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(OmegaConf.to_container(verl_config, resolve=False))
    config.actor_rollout_ref.rollout.prompt_length = prompt_length
    config.actor_rollout_ref.rollout.response_length = response_length
    return hydra.utils.instantiate(
        config=_agent_loop_registry["gigpo"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


async def play(make, tasks: list[Task], group_size: int) -> dict[tuple[str, int], list]:
    """Every task's ``group_size`` episodes at once, as verl's worker runs a batch's sessions
    (each with an agent loop of its own, made by ``make()`` inside the worker's event loop)."""
    runs = {(f"uid{t}", s): make().run({"temperature": 1.0}, uid=f"uid{t}", session_id=s,
                                     extra_info={"gigpo_task": task_label(task), "index": t},
                                     raw_prompt=[])  # fmt: skip
            for t, task in enumerate(tasks) for s in range(group_size)}  # fmt: skip
    results = await asyncio.gather(*runs.values())
    return dict(zip(runs, results, strict=True))


def check_episode(outputs: list, tokenizer, task: Task, script: list[str]) -> None:
    """One output per env step, in order, each with its step columns and the episode's reward
    on every row; each prompt restates the last ``history_length`` actions."""
    steps = [o.extra_fields for o in outputs]
    assert [s["step"] for s in steps] == list(range(len(outputs)))
    assert len({s["traj_ids"] for s in steps}) == 1
    total = sum(s["rewards"] for s in steps)
    assert all(o.reward_score == pytest.approx(total) for o in outputs)
    for s, nxt in itertools.pairwise(steps):
        assert s["next_anchors"] == nxt["anchors"]  # the state a step led to is the next's
    for t, o in enumerate(outputs):
        assert len(o.response_ids) == len(o.response_mask) == len(o.response_logprobs)
        assert set(o.response_mask) == {1}
        text = tokenizer.decode(o.response_ids, skip_special_tokens=True)
        assert any(line.startswith(text) for line in script)  # cut at max_new_tokens at most
        if t >= 1 and task.history_length:
            prompt = tokenizer.decode(o.prompt_ids, skip_special_tokens=True)
            before = tokenizer.decode(outputs[t - 1].response_ids, skip_special_tokens=True)
            if steps[t - 1]["is_action_valid"] and "</action>" in before:  # in the history
                assert before.split("<action>")[1].split("</action>")[0] in prompt


def _alfworld_task(tmp_path: Path) -> Task:
    from gigpo_envs.alfworld.generate import generate_games

    games = tmp_path / "games"
    generate_games(games, num_games=2, seed=8)
    # Its envs in two worker processes (training.env_tasks.open_task_env), as ALFWorld runs.
    return Task(env_id="gigpo/ALFWorld-v0", seed=0, history_length=2, max_new_tokens=16,
                env_kwargs={"data_dir": str(games), "max_steps": 50}, env_workers=2)  # fmt: skip


def test_fifty_step_alfworld_episodes_give_one_output_per_step(verl_config, tokenizer, tmp_path):
    from training.env_tasks import close_env_pool, current_env_pool

    task = _alfworld_task(tmp_path)
    server = ScriptedServer(tokenizer, ALFWORLD_SCRIPT, seed=1)
    try:
        episodes = asyncio.run(
            play(
                lambda: make_loop(verl_config, tokenizer, server),
                [task, Task(**{**vars(task), "seed": 1})],
                group_size=4,
            )
        )
        assert current_env_pool() is not None  # the envs ran in worker processes
    finally:
        close_env_pool()
    assert len(episodes) == 8 and server.most_in_flight >= 4  # concurrently, not in turn
    for (uid, session), outputs in episodes.items():
        assert len(outputs) == 50  # never won: every one of the 50 steps is a row
        assert outputs[0].extra_fields["traj_ids"] == f"{uid}_{session}"
        check_episode(outputs, tokenizer, task, ALFWORLD_SCRIPT)
        assert max(len(o.prompt_ids) for o in outputs) <= 1600


@pytest.mark.parametrize(
    ("env_id", "kwargs", "script"),
    [("gigpo/Sokoban-v0", {"max_steps": 12}, SOKOBAN_SCRIPT),
     ("gigpo/WebShop-v0", {"max_steps": 6}, WEBSHOP_SCRIPT)],
)  # fmt: skip
def test_sokoban_and_webshop_episodes(verl_config, tokenizer, env_id, kwargs, script):
    task = Task(env_id=env_id, seed=3, env_kwargs=kwargs, history_length=2, max_new_tokens=16,
                env_workers=0)  # fmt: skip
    server = ScriptedServer(tokenizer, script, seed=2)
    episodes = asyncio.run(
        play(
            lambda: make_loop(verl_config, tokenizer, server, prompt_length=4096),
            [task],
            group_size=6,
        )
    )
    for outputs in episodes.values():
        assert 1 <= len(outputs) <= kwargs["max_steps"]
        check_episode(outputs, tokenizer, task, script)
    anchors = [o.extra_fields["anchors"] for out in episodes.values() for o in out]
    assert anchors.count(anchors[0]) >= 6  # every episode starts from the task's state


def test_a_prompt_over_the_cap_is_an_error_not_a_cut(verl_config, tokenizer, tmp_path):
    from training.env_tasks import PromptTooLongError

    task = Task(env_id="gigpo/Sokoban-v0", seed=0, history_length=2, max_new_tokens=8,
                env_workers=0)  # fmt: skip
    server = ScriptedServer(tokenizer, SOKOBAN_SCRIPT)
    with pytest.raises(PromptTooLongError, match="over data.max_prompt_length"):
        asyncio.run(
            play(
                lambda: make_loop(verl_config, tokenizer, server, prompt_length=40),
                [task],
                group_size=1,
            )
        )


def test_a_row_without_a_task_label_is_refused(verl_config, tokenizer):
    server = ScriptedServer(tokenizer, SOKOBAN_SCRIPT)

    async def run(extra_info: dict) -> Any:
        return await make_loop(verl_config, tokenizer, server).run(
            {}, uid="u", session_id=0, extra_info=extra_info
        )

    with pytest.raises(ValueError, match="gigpo_task"):
        asyncio.run(run({"index": 0}))
    with pytest.raises(ValueError, match="not JSON"):
        asyncio.run(run({"gigpo_task": "{oops"}))


def _postprocess(outputs_by_session: dict, queue: QueueStandIn) -> list[str]:
    """Each session's outputs through ``AgentLoopWorkerTQ._agent_loop_postprocess`` (verl's
    code, on a worker with no reward loop, teacher or processor); returns the keys put."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1 import agent_loop_tq

    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class
    worker = SimpleNamespace(reward_loop_worker_handles=None, distillation_enabled=False,
                             processor=None)  # fmt: skip
    for name in ("_compute_score", "_compute_teacher_logprobs", "_compute_multi_modal_inputs",
                 "_compute_position_ids"):  # fmt: skip
        setattr(worker, name, getattr(AgentLoopWorker, name).__get__(worker))
    keys: list[str] = []
    for (uid, session), outputs in outputs_by_session.items():
        post = worker_cls._agent_loop_postprocess
        asyncio.run(post(worker, outputs, False, uid=uid, session_id=session, global_steps=1))
        keys += [f"{uid}_{session}_{i}" for i in range(len(outputs))]
    return keys


@pytest.mark.parametrize(
    ("estimator", "padded"),
    [("gigpo", False), ("hgpo", False), ("graphgpo", False), ("gigpo", True), ("graphgpo", True)],
)  # fmt: skip
def test_verls_v1_advantage_step_trains_every_step_with_its_own_advantage(
    verl_config, tokenizer, tmp_path, monkeypatch, estimator, padded
):
    """The episodes through verl's v1 post-processing into the queue (``padded``: then verl's
    own padding to a multiple of a mini-batch, rows copied from the first), then verl's own
    ``PPOTrainer._compute_advantage`` (wrapped by the plugin): every step row gets
    gigpo_algo's advantage of its own, computed on the same rows; verl's padding rows get 0
    and take no part; the step's records go beside verl's generations."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo import padding_utils
    from verl.trainer.ppo.v1 import agent_loop_tq, trainer_base

    from training.advantages import critic_free_advantages
    from training.record_files import read_rollouts, rollout_path
    from training.records import StepRecords
    from training.verl.config import algorithm_settings

    task = Task(env_id="gigpo/Sokoban-v0", seed=5, env_kwargs={"max_steps": 10},
                history_length=2, max_new_tokens=16, env_workers=0)  # fmt: skip
    server = ScriptedServer(tokenizer, SOKOBAN_SCRIPT, seed=4)
    episodes = asyncio.run(
        play(
            lambda: make_loop(verl_config, tokenizer, server),
            [task, Task(**{**vars(task), "seed": 6})],
            group_size=4,
        )
    )
    queue = QueueStandIn()
    monkeypatch.setattr(agent_loop_tq, "tq", queue)
    monkeypatch.setattr(trainer_base, "tq", queue)
    keys = _postprocess(episodes, queue)
    for key in keys:  # what the trainer's old-log-prob step writes before (here: the rollout's)
        queue.rows[key]["old_log_probs"] = queue.rows[key]["rollout_log_probs"]
    algorithm = {"adv_estimator": estimator, "gamma": 0.9, "use_kl_in_reward": False,
                 estimator: {"invalid_penalty": 0.1}}  # fmt: skip
    config = OmegaConf.create(OmegaConf.to_container(verl_config, resolve=False))
    config.algorithm.update(algorithm)  # verl's own section, with our estimator
    config.actor_rollout_ref.rollout.n = 4
    config.trainer.rollout_data_dir = str(tmp_path / "generations")
    trainer = SimpleNamespace(config=config, global_steps=3)
    from transfer_queue import KVBatchMeta

    batch = KVBatchMeta(keys=keys, partition_id="train", tags=[{} for _ in keys])
    if padded:
        monkeypatch.setattr(padding_utils, "tq", queue)
        batch = padding_utils.upsample_batch_to_divisible_size(
            batch, len(keys) + 5, tokenizer.eos_token_id
        )
        assert len(batch.keys) == len(keys) + 5 and batch.tags[-1]["is_padding"]
        for key in batch.keys[len(keys) :]:  # as the log-prob steps would
            queue.rows[key]["old_log_probs"] = queue.rows[key]["rollout_log_probs"]
        assert queue.rows[batch.keys[-1]]["extra_fields"] == queue.rows[keys[0]]["extra_fields"]
    metrics: dict[str, float] = {}
    trainer_base.PPOTrainer._compute_advantage(trainer, batch, metrics)
    records = StepRecords()
    for key in keys:
        extra = queue.rows[key]["extra_fields"]
        records.append(reward=extra["rewards"], anchor=extra["anchors"],
                       anchor_text=extra["anchor_texts"], group_id=key.split("_")[0],
                       traj_id=extra["traj_ids"], is_action_valid=extra["is_action_valid"],
                       next_anchor=extra["next_anchors"],
                       next_anchor_text=extra["next_anchor_texts"], won=extra["won"])  # fmt: skip
    expected = critic_free_advantages(records, algorithm_settings(algorithm)).advantages
    got = [queue.rows[k]["advantages"] for k in keys]
    for value, row, key in zip(expected, got, keys, strict=True):
        mask = queue.rows[key]["response_mask"]
        assert row.shape == mask.shape
        assert torch.allclose(row, torch.full_like(row, float(value)) * mask, atol=1e-5), key
    assert len(set(np.round(expected, 6))) > 2  # steps differ: not one episode broadcast
    for key in batch.keys[len(keys) :]:  # verl's padding: no advantage, nothing else moved
        assert not queue.rows[key]["advantages"].any()
    header, rows = read_rollouts(rollout_path(tmp_path / "generations", 2))  # global step 3
    assert header["source"] == "verl" and header["estimator"] == estimator
    assert len(rows) == len(keys)
    # the records hold float32 advantages: compared within float32's rounding, not by digits
    assert np.allclose(sorted(r["advantage"] for r in rows), sorted(expected), atol=1e-5)
    # The batch's metrics, beside verl's: the step groups and the episodes, as the records say.
    from training.advantages import step_groups
    from training.stats import step_group_summary

    summary = step_group_summary(step_groups(records, algorithm_settings(algorithm)))
    assert metrics["gigpo/step_group_coverage"] == pytest.approx(summary["step_group_coverage"])
    assert metrics["gigpo/step_group_mean_size"] == pytest.approx(summary["step_group_mean_size"])
    assert metrics["gigpo/episodes"] == 8 and metrics["gigpo/step_rows"] == len(keys)
    invalid = 1 - np.mean(records.is_action_valid)
    assert metrics["gigpo/invalid_actions"] == pytest.approx(invalid) and 0 < invalid < 1
    assert 0 < metrics["gigpo/step_group_coverage"] <= 1

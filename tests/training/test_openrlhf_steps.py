"""The executor's step layout: one sample per env step, on its own K-step history prompt.

Real environments (NumberLine at 18 steps, generated ALFWorld games at 50 steps), the tiny
model's real tokenizer, and real env worker processes. The engine is the named stand-in for
vLLM (``benchmarks/standin_engine.py``): scripted replies that pick an admissible action
from the prompt, each episode its own seeded engine so that episodes played concurrently
are reproducible.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gigpo_envs.alfworld.generate import generate_games
from training.openrlhf.estimator import SETTINGS_ENV, GiGPOSettings
from training.openrlhf.executor import (
    PromptTooLongError,
    Task,
    env_workers_for,
    make_task_env,
    render_prompt,
    run_episode,
    task_label,
)
from training.records import StepRecords

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from standin_engine import StandinEngine  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from training.local.model import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def record_texts(monkeypatch):
    """The run saves rollouts, so the executor records each step's texts."""
    settings = GiGPOSettings(save_rollouts_every=1, rollouts_dir="/tmp/unused")
    monkeypatch.setenv(SETTINGS_ENV, settings.to_json())


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("alfworld_steps")
    generate_games(out, num_games=3, seed=21)
    return out


def play_group(task: Task, tokenizer, n: int, max_length: int, invalid_rate: float = 0.1) -> list:
    """``n`` episodes of ``task`` at once, as one rollout actor plays a group."""
    params = SimpleNamespace(max_tokens=None, logprobs=1)

    async def group():
        label = task_label(task)
        return await asyncio.gather(
            *(
                run_episode("p", label, params, max_length, tokenizer,
                            StandinEngine(tokenizer, seed=k, think_tokens=30,
                                          invalid_rate=invalid_rate))
                for k in range(n)
            )
        )  # fmt: skip

    return asyncio.run(group())


def check_against_a_replay(task: Task, tokenizer, result: dict, cap: int) -> StepRecords:
    """Replays the episode's recorded actions in a fresh env: every step's prompt must be
    exactly the env's history prompt there, with the K steps before it."""
    assert result["gigpo"]["layout"] == "step"
    steps = StepRecords.from_dict(result["gigpo"]["steps"])
    env = make_task_env(task)
    _, info = env.reset(seed=task.seed)
    done = False
    for i in range(len(steps)):
        assert not done
        assert steps.prompt_ids[i] == render_prompt(tokenizer, info["messages"])
        user = info["messages"][-1]["content"]
        for past in range(max(0, i - task.history_length), i):  # steps t-K .. t-1, no more
            assert f"[Step {past} action]" in user
        assert f"[Step {i - task.history_length - 1} action]" not in user
        assert steps.anchors[i] == info["anchor"]
        assert len(steps.prompt_ids[i]) <= cap
        assert 1 <= len(steps.response_ids[i]) <= task.max_new_tokens
        assert len(steps.old_log_probs[i]) == len(steps.response_ids[i])
        _, reward, terminated, truncated, info = env.step(steps.actions[i])
        assert steps.rewards[i] == reward
        assert steps.is_action_valid[i] == info["is_action_valid"]
        done = terminated or truncated
    assert done  # the episode played until the env ended it
    assert result["reward"] == pytest.approx(sum(steps.rewards))
    assert result["scores"] == float(result["gigpo"]["won"])
    assert set(steps.group_ids) == {task.group} and len(set(steps.traj_ids)) == 1
    return steps


@pytest.mark.slow
def test_every_step_of_18_step_numberline_episodes_is_a_sample_with_its_k_step_prompt(
    tokenizer, record_texts
):
    task = Task("gigpo/NumberLine-v0", 3, {"max_position": 9}, history_length=2,
                max_new_tokens=48, max_prompt_tokens=700)  # fmt: skip
    results = play_group(task, tokenizer, n=4, max_length=748)
    lengths = []
    for result in results:
        steps = check_against_a_replay(task, tokenizer, result, cap=700)
        lengths.append(len(steps))
        first = steps.prompt_ids[0] + steps.response_ids[0]
        assert result["observation_tokens"] == first  # OpenRLHF's fields: the first step
    assert max(lengths) == 18  # NumberLine's max_steps = 2 * max_position
    assert len({r["gigpo"]["steps"]["traj_ids"][0] for r in results}) == 4


@pytest.mark.slow
def test_fifty_step_alfworld_episodes_in_env_workers_equal_those_in_threads(
    tokenizer, record_texts, alfworld_games
):
    base = dict(env_id="gigpo/ALFWorld-v0", seed=1, history_length=2, max_new_tokens=64,
                max_prompt_tokens=4096,
                env_kwargs={"data_dir": str(alfworld_games), "max_steps": 50})  # fmt: skip
    threads = play_group(Task(**base, env_workers=0), tokenizer, n=4, max_length=4160)
    workers = play_group(Task(**base, env_workers=2), tokenizer, n=4, max_length=4160)
    task = Task(**base)
    for a, b in zip(threads, workers, strict=True):
        sa = check_against_a_replay(task, tokenizer, a, cap=4096)
        sb = StepRecords.from_dict(b["gigpo"]["steps"])
        for column in ("prompt_ids", "response_ids", "rewards", "anchors", "is_action_valid"):
            assert getattr(sa, column) == getattr(sb, column), column
    assert max(len(r["gigpo"]["steps"]["rewards"]) for r in threads) == 50
    from training.env_tasks import close_env_pool, current_env_pool

    assert len({s["pid"] for s in current_env_pool().stats()}) == 2  # both workers played
    close_env_pool()
    assert current_env_pool() is None


def test_a_prompt_over_the_cap_is_an_error_naming_the_env_and_the_sizes(tokenizer):
    task = Task("gigpo/NumberLine-v0", 3, history_length=2, max_new_tokens=8,
                max_prompt_tokens=40)  # fmt: skip
    with pytest.raises(PromptTooLongError, match=r"gigpo/NumberLine-v0 \(seed 3\) step 0: the "
                       r"prompt has \d+ tokens, over the step layout's cap of 40"):  # fmt: skip
        play_group(task, tokenizer, n=1, max_length=2048)


def test_the_episode_layout_counts_an_episode_the_token_budget_ended(tokenizer):
    task = Task("gigpo/NumberLine-v0", 3, {"max_position": 9}, max_new_tokens=48,
                layout="episode")  # fmt: skip
    # every answer invalid: the episode lasts its 18 steps unless the budget ends it
    short, long = (
        play_group(task, tokenizer, n=1, max_length=n, invalid_rate=1.0)[0] for n in (600, 20000)
    )
    cut, whole = short["gigpo"]["turns"], long["gigpo"]["turns"]
    assert cut["budget_ended"] and len(cut["rewards"]) < 18
    assert not whole["budget_ended"] and len(whole["rewards"]) == 18
    assert cut["action_ranges"][-1][1] <= 600  # no response past the budget
    assert "gigpo" in long and "steps" not in long["gigpo"]


def test_cpu_heavy_envs_get_worker_processes_by_default(monkeypatch):
    assert env_workers_for(Task("gigpo/Sokoban-v0", 0)) == 0
    assert env_workers_for(Task("gigpo/ALFWorld-v0", 0)) == min(16, len(os.sched_getaffinity(0)))
    assert env_workers_for(Task("gigpo/WebShop-v0", 0, env_workers=0)) == 0
    assert env_workers_for(Task("gigpo/Sokoban-v0", 0, env_workers=3)) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layout": "steps"}, "layout must be one of"),
        ({"max_prompt_tokens": 0}, "max_prompt_tokens must be null or an int >= 1"),
        ({"env_workers": -1}, "env_workers must be null or an int >= 0"),
        ({"env_workers": True}, "env_workers"),
    ],
)
def test_bad_step_settings_in_a_task_label_are_clear_errors(change, message):
    from training.openrlhf.executor import parse_task

    label = dict(json.loads(task_label(Task("gigpo/Sokoban-v0", 0))), **change)
    with pytest.raises(ValueError, match=message):
        parse_task(label)


def test_a_label_written_before_the_step_layout_plays_the_episode_layout():
    from training.openrlhf.executor import parse_task

    old = {"env_id": "gigpo/Sokoban-v0", "seed": 2, "history_length": 0, "max_new_tokens": 64}
    assert parse_task(old).layout == "episode"


def _replay_next_states(task: Task, anchors: list, actions: list) -> list[tuple]:
    """The (anchor, anchor_text) after each recorded action, replayed in a fresh env."""
    env = make_task_env(task)
    _, info = env.reset(seed=task.seed)
    after = []
    for anchor, action in zip(anchors, actions, strict=True):
        assert info["anchor"] == anchor
        _, _, terminated, truncated, info = env.step(action)
        after.append((info["anchor"], info["anchor_text"]))
    assert terminated or truncated  # the last one: the state the episode ended in
    return after


def test_every_turn_carries_the_state_it_led_to_into_the_batch(tokenizer, record_texts):
    import dataclasses

    from training.openrlhf.estimator import batch_steps
    from training.openrlhf.turns import SampleTurns

    # NumberLine's clock moves every step: no next state equals its own state
    kwargs = {"max_position": 3, "max_steps": 4, "clock": True}
    step_task = Task("gigpo/NumberLine-v0", 5, kwargs, history_length=1, max_new_tokens=48)
    episode_task = dataclasses.replace(step_task, layout="episode")
    rows, expected = [], []
    for result in play_group(step_task, tokenizer, n=2, max_length=2048, invalid_rate=0.3):
        steps = StepRecords.from_dict(result["gigpo"]["steps"])
        after = _replay_next_states(step_task, steps.anchors, steps.actions)
        assert list(zip(steps.next_anchors, steps.next_anchor_texts, strict=True)) == after
        won = result["gigpo"]["won"]
        # under the step layout each row rides in its own sample, as a plain dict
        rows += [
            SampleTurns.from_dict(SampleTurns.from_step(steps, i, won=won, max_len=2048).to_dict())
            for i in range(len(steps))
        ]
        expected += after
    for result in play_group(episode_task, tokenizer, n=2, max_length=20000, invalid_rate=0.3):
        turns = SampleTurns.from_dict(result["gigpo"]["turns"])
        after = _replay_next_states(episode_task, turns.anchors, turns.actions)
        assert list(zip(turns.next_anchors, turns.next_anchor_texts, strict=True)) == after
        rows.append(turns)
        expected += after
    filler = SampleTurns(group="", traj="", max_len=2048)
    batch = batch_steps([rows[:3], [filler], rows[3:]])
    assert list(zip(batch.next_anchors, batch.next_anchor_texts, strict=True)) == expected
    assert all(a != b for a, b in zip(batch.anchors, batch.next_anchors, strict=True))
    # a record from before the next states existed: the batch has none (GraphGPO refuses it)
    old = dataclasses.replace(rows[0], next_anchors=[], next_anchor_texts=[])
    assert batch_steps([[old, *rows[1:]]]).next_anchors == []

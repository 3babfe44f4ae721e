"""gigpo_envs.workers: environments in spawned worker processes, exactly as in-process.

Real worker processes throughout; the misbehaving environments (tests/worker_envs.py) wrap a
real Sokoban and misbehave on one action.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import worker_envs

import gigpo_envs  # noqa: F401
from gigpo_envs import history_prompt
from gigpo_envs.alfworld.generate import generate_games
from gigpo_envs.workers import EnvWorkerError, EnvWorkerPool, cpu_heavy, make_env


def _policy_trace(env, seed: int, steps: int, sync: bool = True) -> list:
    """A seeded policy's trajectory: (observation, reward, terminated, truncated, anchor)."""
    rng = np.random.default_rng(seed)
    observation, info = env.reset(seed=seed)
    trace = [(observation, info["anchor"])]
    for _ in range(steps):
        actions = info["admissible_actions"]
        action = f"<action>{actions[int(rng.integers(len(actions)))]}</action>"
        if rng.random() < 0.2:
            action = "junk"
        observation, reward, terminated, truncated, info = env.step(action)
        trace.append((observation, reward, terminated, truncated, info["anchor"]))
        if terminated or truncated:
            break
    return trace


@pytest.fixture(scope="module")
def pool():
    with EnvWorkerPool(2) as workers:
        yield workers


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("alfworld_workers")
    generate_games(out, num_games=2, seed=3)
    return out


def test_remote_envs_from_threads_play_exactly_as_local_ones(pool, alfworld_games):
    cases = [("gigpo/Sokoban-v0", {}), ("gigpo/WebShop-v0", {"max_steps": 6})]
    cases += [("gigpo/ALFWorld-v0", {"data_dir": str(alfworld_games), "max_steps": 8})]
    for env_id, kwargs in cases:
        local = [_policy_trace(make_env(env_id, kwargs), seed, 8) for seed in range(6)]
        remote: list = [None] * 6
        errors: list = []

        def play(seed: int, env_id=env_id, kwargs=kwargs, out=remote, errors=errors) -> None:
            try:
                env = pool.make(make_env, env_id, kwargs)
                out[seed] = _policy_trace(env, seed, 8)
                env.close()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=play, args=(s,)) for s in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert errors == [] and remote == local, env_id
    # both workers host environments, placed by load
    assert len({s["pid"] for s in pool.stats()}) == 2


def test_remote_envs_await_without_blocking_the_event_loop(pool):
    async def episode(seed: int) -> list:
        env = await pool.amake(worker_envs.numberline_with_history, 1)
        observation, info = await env.areset(seed=seed)
        out = [observation]
        for action in ("<action>+</action>", "<action>-</action>", "no"):
            observation, reward, terminated, truncated, info = await env.astep(action)
            out.append((observation, reward, info["messages"]))
            if terminated or truncated:
                break
        await env.aclose()
        return out

    async def main() -> tuple[list, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(episode(s) for s in range(8)))
        task.cancel()
        return results, ticks

    results, ticks = asyncio.run(main())
    local = []
    for seed in range(8):
        env = history_prompt(make_env("gigpo/NumberLine-v0"), 1)
        observation, _ = env.reset(seed=seed)
        out = [observation]
        for action in ("<action>+</action>", "<action>-</action>", "no"):
            observation, reward, terminated, truncated, info = env.step(action)
            out.append((observation, reward, info["messages"]))
            if terminated or truncated:
                break
        local.append(out)
    assert results == local
    assert ticks > 0  # the loop ran while the workers worked


def test_env_errors_come_back_with_their_type_and_the_worker_lives_on(pool):
    env = pool.make(make_env, "gigpo/Sokoban-v0")
    with pytest.raises(RuntimeError, match="before reset") as info:
        env.step("<action>up</action>")  # the env's own error, raised in the worker
    assert any("env worker process" in note for note in info.value.__notes__)
    env.reset(seed=1)
    env.step("<action>up</action>")
    with pytest.raises(gym.error.Error):  # the factory's error, raised by make
        pool.make(worker_envs.failing_factory)
    with pytest.raises(EnvWorkerError, match="cannot be sent"):
        env.call("step", lambda: 0).result()
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvWorkerError, match="closed"):
        env.step("x")


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("exit", "SystemExit: 3"),
        ("unpicklable", "cannot be pickled"),
        ("custom", "NotPicklableError"),
    ],
)
def test_a_system_exit_or_an_unpicklable_result_is_an_error_not_a_dead_worker(pool, how, match):
    env = pool.make(worker_envs.misbehaving_sokoban, how)
    env.reset(seed=0)
    with pytest.raises(EnvWorkerError, match=match):
        env.step("misbehave")
    assert env.step("<action>up</action>")[4]["is_action_valid"] in (True, False)  # alive


def test_a_killed_worker_fails_its_calls_and_is_replaced():
    with EnvWorkerPool(1) as pool:
        env = pool.make(make_env, "gigpo/Sokoban-v0")
        env.reset(seed=0)
        os.kill(env.worker_pid, signal.SIGKILL)
        with pytest.raises(EnvWorkerError, match=r"env worker 0 \(pid \d+\) exited with code -9"):
            env.step("<action>up</action>")
        fresh = pool.make(make_env, "gigpo/Sokoban-v0")  # a new worker takes it
        assert fresh.worker_pid != env.worker_pid
        assert fresh.reset(seed=0)[0] == make_env("gigpo/Sokoban-v0").reset(seed=0)[0]
        env.close()  # a no-op for an env whose worker is gone


def test_a_call_past_its_timeout_kills_the_worker_instead_of_hanging():
    with EnvWorkerPool(1, call_timeout_s=1.0) as pool:
        env = pool.make(worker_envs.misbehaving_sokoban, "sleep")
        env.reset(seed=0)
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match="call_timeout_s=1.0"):
            env.step("misbehave")
        assert time.monotonic() - start < 30
        assert pool.make(make_env, "gigpo/Sokoban-v0").reset(seed=2)[1]["anchor"]
    with pytest.raises(EnvWorkerError, match="closed"):
        pool.make(make_env, "gigpo/Sokoban-v0")


def test_bad_pool_arguments_are_refused_and_heavy_envs_are_declared():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_workers"):
            EnvWorkerPool(bad)
    for bad in (0, 0.05, 1e-6, float("nan"), "1", True):
        with pytest.raises(ValueError, match="call_timeout_s must be a number of seconds >= 0.1"):
            EnvWorkerPool(1, call_timeout_s=bad)
    assert cpu_heavy("gigpo/ALFWorld-v0") and cpu_heavy("gigpo/WebShop-v0")
    assert not cpu_heavy("gigpo/Sokoban-v0") and not cpu_heavy("gigpo/SearchQA-v0")


def test_a_cancelled_await_leaves_the_worker_serving(pool):
    env = pool.make(worker_envs.misbehaving_sokoban, "nap")
    env.reset(seed=0)

    async def impatient() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(env.astep("misbehave"), 0.1)  # cancels the future

    asyncio.run(impatient())
    # the reply to the cancelled call arrives later; the worker and its reader go on
    assert env.step("<action>up</action>")[4]["is_action_valid"] in (True, False)
    other = pool.make(make_env, "gigpo/Sokoban-v0")
    assert other.reset(seed=1)[1]["anchor"]
    env.close()
    other.close()


def test_envs_placed_with_one_key_share_a_worker_and_others_spread():
    with EnvWorkerPool(3) as pool:
        group_a = [pool.make(make_env, "gigpo/Sokoban-v0", place_with="a") for _ in range(4)]
        group_b = [pool.make(make_env, "gigpo/Sokoban-v0", place_with="b") for _ in range(4)]
        loose = [pool.make(make_env, "gigpo/Sokoban-v0") for _ in range(2)]
        assert len({e.worker_pid for e in group_a}) == 1
        assert len({e.worker_pid for e in group_b}) == 1
        assert group_a[0].worker_pid != group_b[0].worker_pid
        # the third worker was empty: both loose envs go there first
        assert {e.worker_pid for e in loose} == set(pool.pids) - {
            group_a[0].worker_pid,
            group_b[0].worker_pid,
        }
        for env in group_a:
            env.close()
        # a key whose envs are all closed is placed by load again
        again = pool.make(make_env, "gigpo/Sokoban-v0", place_with="a")
        assert again.worker_pid == group_a[0].worker_pid  # now the emptiest
        assert sorted(s["envs"] for s in pool.stats()) == [1, 2, 4]  # the closed 4 are gone


def test_concurrent_makes_are_placed_by_load():
    with EnvWorkerPool(2) as pool:
        remotes: list = []

        def make() -> None:
            remotes.append(pool.make(make_env, "gigpo/Sokoban-v0"))

        threads = [threading.Thread(target=make) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert sorted(s["envs"] for s in pool.stats()) == [4, 4]

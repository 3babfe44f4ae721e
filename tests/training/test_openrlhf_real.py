"""The OpenRLHF glue against OpenRLHF 0.11.2's real code on CPU.

Real here: OpenRLHF's argument parser and checks, its sample builder, rollout splitting and
advantage method (patched by the project's hook on import), Ray 2.55 with the worker setup
hook. Stand-ins (``tests/standins``, named so): ``vllm`` and ``flash_attn`` (import-only), a
scripted vLLM ``generate``, and the experience maker's ``self`` (its Ray model groups are
not started). See ``openrlhf_real_chain.py`` for the chain itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from openrlhf_launcher import command_line, dry_run

import training
from gigpo_algo.advantages import gigpo_advantages

REPO = Path(__file__).resolve().parents[2]
CHAIN = Path(__file__).resolve().parent / "openrlhf_real_chain.py"
STANDINS = REPO / "tests" / "standins"
PACKAGE_ROOT = Path(training.__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "PYTHONPATH": f"{STANDINS}{os.pathsep}{PACKAGE_ROOT}",
    "RAY_USAGE_STATS_ENABLED": "0",
}
ENVS = ["gigpo/Sokoban-v0", "gigpo/EZPoints-v0", "gigpo/NumberLine-v0", "gigpo/Blackjack-v0"]


def _resolved(*flags: str) -> tuple[list[str], dict]:
    """The launcher's dry run: OpenRLHF's argv and the Ray runtime env's variables."""
    result = dry_run(*flags)
    assert result.returncode == 0, result.stderr
    command = command_line(result.stdout)
    lines = result.stdout.splitlines()
    runtime = json.loads(next(li for li in lines if li.startswith("# ray runtime_env: "))[19:])
    return command[command.index("openrlhf.cli.train_ppo_ray") + 1 :], runtime["env_vars"]


def _chain(job: dict) -> dict | list:
    result = subprocess.run(
        [sys.executable, str(CHAIN)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_launcher_command_passes_openrlhfs_own_parser_and_checks():
    cases = [(env, est) for env in ENVS for est in ("gigpo", "grpo", "rloo")]
    cases += [("gigpo/Sokoban-v0", "reinforce_baseline"), ("gigpo/Sokoban-v0", "group_norm")]
    argvs = [
        _resolved("--env", env, "--algo.advantage.estimator", est, "--group_size", "4")[0]
        for env, est in cases
    ]
    parsed = _chain({"parse_only": argvs})
    for (env, est), got in zip(cases, parsed, strict=True):
        assert "error" not in got, (env, est, got)
        # gigpo_algo's estimators ride on group_norm (its argument checks); others are OpenRLHF's
        expected = "group_norm" if est in ("gigpo", "grpo", "rloo") else est
        assert got["estimator"] == expected, (env, est)
        assert got["n_samples_per_prompt"] == 4
        assert got["agent_func_path"].endswith("training/openrlhf/agent_func.py")
        assert got["remote_url"] == ["agent"] or got["remote_url"] == "agent"
        assert got["prompt_dataset"].endswith("tasks.jsonl") and got["kl_use_loss"]
    # and what OpenRLHF refuses is refused by its own checks, not hidden by ours
    bad = _resolved("--env", "gigpo/NumberLine-v0", "--rollout.micro_batch_size", "1024")[0]
    (refused,) = _chain({"parse_only": [bad]})
    assert "AssertionError" in refused["error"]


def _columns(start: int, end: int) -> range:
    """Mask columns of the response tokens ``start..end-1`` (OpenRLHF drops token 0)."""
    return range(start - 1, end - 1)


@pytest.mark.slow
def test_each_turns_tokens_carry_its_gigpo_advantage_through_openrlhfs_chain(tiny_model_dir):
    # 2 tasks x 4 rollouts in micro-batches of 3: a group's samples sit in different
    # experiences, as OpenRLHF splits them.
    argv, env_vars = _resolved(
        "--env", "gigpo/NumberLine-v0", "--group_size", "4", "--rollout.micro_batch_size", "3"
    )
    settings = env_vars["GIGPO_OPENRLHF_SETTINGS"]
    out = _chain({"tokenizer": str(tiny_model_dir), "argv": argv, "settings": settings})
    records = out["records"]
    assert len(records) == 8 and len(out["rows"]) == 8
    rewards, trajs, groups, anchors = [], [], [], []
    for r in records:
        rewards += r["rewards"]
        trajs += [r["traj"]] * len(r["rewards"])
        groups += [r["group"]] * len(r["rewards"])
        anchors += r["anchors"]
    assert len(set(groups)) == 2 and len(rewards) > 8  # multi-turn episodes
    expected = gigpo_advantages(rewards, trajs, groups, anchors).advantages
    assert np.abs(expected).max() > 0
    for rows in (out["rows"], out["train_rows"]):  # after the maker, and as the actor gets them
        assert sorted(r["index"] for r in rows) == list(range(8))
        starts = np.cumsum([0] + [len(r["rewards"]) for r in records])
        for row in rows:
            record = records[row["index"]]
            advantages, mask = np.array(row["advantages"]), np.array(row["action_mask"])
            covered = np.zeros_like(mask, dtype=bool)
            for k, (start, end) in enumerate(record["action_ranges"]):
                cols = list(_columns(start, end))
                assert np.allclose(advantages[cols], expected[starts[row["index"]] + k], atol=1e-5)
                covered[cols] = True
            assert not advantages[~covered].any()  # environment and padding tokens get nothing
    assert not any(k.startswith("gigpo_turns:") for k in out["info"])
    assert all(k.endswith(":Tensor") for k in out["info"]), out["info"]
    assert out["group_reward_std"]  # OpenRLHF's usual metric is logged under gigpo too


@pytest.mark.slow
# OpenRLHF's GRPO (group_norm), REINFORCE++ (reinforce_baseline), Dr. GRPO, REINFORCE
@pytest.mark.parametrize("estimator", ["group_norm", "reinforce_baseline", "dr_grpo", "reinforce"])
def test_openrlhfs_own_estimators_run_with_the_executor(tiny_model_dir, estimator):
    argv, env_vars = _resolved(
        "--env", "gigpo/NumberLine-v0", "--group_size", "4", "--algo.advantage.estimator", estimator
    )
    assert "GIGPO_OPENRLHF_SETTINGS" not in env_vars
    out = _chain({"tokenizer": str(tiny_model_dir), "argv": argv, "settings": None})
    assert out["estimator"] == estimator
    # the turn records left before OpenRLHF's own method; every info entry is a metric
    assert not any(k.startswith("gigpo_turns:") for k in out["info"])
    for row in out["rows"]:
        values = np.array(row["advantages"])[np.array(row["action_mask"]) > 0]
        assert np.allclose(values, values[0])  # OpenRLHF's own: one value per episode


@pytest.mark.slow
def test_the_worker_setup_hook_patches_a_real_ray_worker():
    # Ray's socket paths must stay under 107 bytes: a short temporary folder, not tmp_path.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    code = (
        f"PYTHONPATH = {ENV['PYTHONPATH']!r}\n"
        + """
import json, ray
ray.init(
    num_cpus=1, include_dashboard=False, log_to_driver=False,
    runtime_env={
        "worker_process_setup_hook": "training.openrlhf.patch.setup_worker",
        "env_vars": {"PYTHONPATH": PYTHONPATH},
    },
)

@ray.remote
def patched():
    import openrlhf.trainer.ppo_utils.experience_maker as maker
    import openrlhf.trainer.ppo_utils.samples_generator as samples
    return [
        getattr(maker.RemoteExperienceMaker.compute_advantages_and_returns, "__wrapped__", None)
        is not None,
        getattr(samples.SamplesGenerator._process_response_into_experience, "__wrapped__", None)
        is not None,
    ]

try:
    print(json.dumps(ray.get(patched.remote(), timeout=300)))
finally:
    ray.shutdown()
"""
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**ENV, "RAY_TMPDIR": str(ray_tmp)},
        timeout=600,
        cwd=ray_tmp,
    )
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True, True]

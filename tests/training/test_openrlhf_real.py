"""The OpenRLHF glue against OpenRLHF 0.11.2's real code on CPU (``tox -e openrlhf``).

Real here: OpenRLHF's argument parser and checks; its vLLM rollout actor in a Ray 2.55
worker, running the project's executor on real episodes; its samples generator, experience
maker (patched), PPO actor and reference model under DeepSpeed 0.19.6 (CPU accelerator,
gloo), with transformers at the version it pins; Ray's worker setup hook. Stand-ins, named
so (``tests/standins`` and ``openrlhf_real_run.py``): vLLM's engine (answers from a script),
flash-attn (import-only), the GPU (a few ``torch.cuda`` calls and the device mesh on the
CPU), and Ray's GPU actor groups (one real model actor in the driver process).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from openrlhf_launcher import command_line, dry_run, submitted_args

import gigpo_envs  # noqa: F401  (registers the environments)
import training
from gigpo_algo.estimators import ESTIMATORS, estimator_advantages
from training.openrlhf.layout import OPENRLHF_ESTIMATORS as OPENRLHF_CHOICES
from training.record_files import read_rollouts, rollout_files

pytestmark = pytest.mark.openrlhf

REPO = Path(__file__).resolve().parents[2]
PARSE = Path(__file__).resolve().parent / "openrlhf_real_parse.py"
RUN = Path(__file__).resolve().parent / "openrlhf_real_run.py"
STANDINS = REPO / "tests" / "standins"
#: flash-attn's padding helpers without its kernels, as a CPU run of OpenRLHF has them
FLASH_ATTN_CPU = REPO / "training" / "openrlhf" / "flash_attn_cpu"
PACKAGE_ROOT = Path(training.__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "PYTHONPATH": f"{STANDINS}{os.pathsep}{FLASH_ATTN_CPU}{os.pathsep}{PACKAGE_ROOT}",
    "RAY_USAGE_STATS_ENABLED": "0",
}
ENVS = sorted(name for name in gym.registry if name.startswith("gigpo/"))
#: OpenRLHF 0.11.2's estimator choices (the launcher's list, checked against OpenRLHF's own
#: parser below) but rloo (the launcher's rloo is gigpo_algo's).
OPENRLHF_ESTIMATORS = [e for e in OPENRLHF_CHOICES if e not in ESTIMATORS]


def _resolved(*flags: str) -> tuple[list[str], dict]:
    """The launcher's dry run: OpenRLHF's argv and the Ray runtime env's variables."""
    result = dry_run(*flags)
    assert result.returncode == 0, result.stderr
    command = command_line(result.stdout)
    lines = result.stdout.splitlines()
    runtime = json.loads(next(li for li in lines if li.startswith("# ray runtime_env: "))[19:])
    return command[command.index("openrlhf.cli.train_ppo_ray") + 1 :], runtime["env_vars"]


#: How long one OpenRLHF process may run (a training step here takes 1-3 minutes on 2
#: cores). Past it, the process prints every thread's stack (faulthandler, on SIGABRT), it
#: and every process it started are killed, and the test fails with that stack and the
#: error lines of Ray's logs; the OpenRLHF processes after it then fail at once, so a hang
#: costs one timeout, not one per test. $GIGPO_TEST_RUN_TIMEOUT_S sets another bound.
RUN_TIMEOUT_S = float(os.environ.get("GIGPO_TEST_RUN_TIMEOUT_S", "720"))
_HUNG: list[str] = []


def _ray_errors(ray_tmp: Path | None, limit: int = 4000) -> str:
    """The error-looking lines of a Ray session's logs under ``ray_tmp`` (last ``limit``
    characters), for a failure message."""
    if ray_tmp is None:
        return ""
    pattern = re.compile(
        r"\b(error|killed|oom|timed? ?out|traceback|exception|(?<!non-)terminated|unexpected)\b",
        re.I,
    )
    lines = []
    for session in sorted(ray_tmp.glob("session_*")):
        if session.is_symlink():  # session_latest
            continue
        for path in sorted((session / "logs").glob("*")):
            if path.is_file() and path.suffix in (".out", ".err", ".log"):
                text = path.read_text(encoding="utf-8", errors="replace")
                lines += [
                    f"{path.name}: {li}"
                    for li in text.splitlines()
                    if pattern.search(li) and not li.startswith("[state-dump]")
                ]
    return "\n".join(lines)[-limit:]


def _run_bounded(
    argv: list[str],
    stdin: str = "",
    *,
    env: dict | None = None,
    cwd: Path | None = None,
    ray_tmp: Path | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> subprocess.CompletedProcess:
    """``argv`` in its own process group with ``stdin``; see :data:`RUN_TIMEOUT_S`."""
    if _HUNG:
        pytest.fail(f"not started: an earlier OpenRLHF process ran past its time ({_HUNG[0]})")
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**(env or ENV), "PYTHONFAULTHANDLER": "1"},
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        what = "python -c <test code>" if "-c" in argv else Path(argv[-1]).name
        _HUNG.append(f"{what}, past {timeout:.0f} s")
        ray_errors = _ray_errors(ray_tmp)  # before the kill adds its own complaints
        process.send_signal(signal.SIGABRT)  # faulthandler writes each thread's stack
        time.sleep(5)
        _kill_group(process)
        try:
            out, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out, err = "", "(its output could not be read: a process outside its group holds it)"
        pytest.fail(
            f"ran past {timeout:.0f} s; stopped. Its stderr ends:\n{err[-8000:]}\n"
            f"Ray's logs before the kill:\n{ray_errors}"
        )
    finally:
        _kill_group(process)  # whatever it left behind (Ray's own processes)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run_script(script: Path, job: dict, cwd: Path | None = None) -> dict | list:
    """Runs one of the OpenRLHF scripts with the stand-ins on its path; its last JSON line."""
    ray_tmp = Path(job["ray_tmp"]) if "ray_tmp" in job else None
    result = _run_bounded([sys.executable, str(script)], json.dumps(job), cwd=cwd,
                          ray_tmp=ray_tmp)  # fmt: skip
    assert result.returncode == 0, f"{result.stderr[-6000:]}\nRay's logs:\n{_ray_errors(ray_tmp)}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def _parse(job: dict) -> list:
    return _run_script(PARSE, job)


def test_the_launchers_list_of_openrlhfs_estimators_is_openrlhfs_own():
    """The launcher refuses an estimator outside gigpo_algo's and OpenRLHF's list before Ray
    starts: that list must be the choices of OpenRLHF's own parser."""
    choices = _parse({"estimator_choices": True})
    assert sorted(choices) == sorted(OPENRLHF_CHOICES)
    assert "rloo" in choices and len(OPENRLHF_ESTIMATORS) == len(choices) - 1


@pytest.mark.slow
def test_every_launcher_command_passes_openrlhfs_own_parser_and_checks():
    # every registered environment with gigpo_algo's estimators; OpenRLHF's own on one
    cases = [(env, est) for env in ENVS for est in ESTIMATORS]
    cases += [("gigpo/Sokoban-v0", est) for est in OPENRLHF_ESTIMATORS]
    argvs = []
    for env, est in cases:
        critic = ["--critic.model_name_or_path", "Qwen/Qwen2.5-1.5B"] if est == "gae" else []
        flags = ("--env", env, "--algo.advantage.estimator", est, "--group_size", "4", *critic)
        argvs.append(_resolved(*flags)[0])
    parsed = _parse({"parse_only": argvs})
    for (env, est), got in zip(cases, parsed, strict=True):
        assert "error" not in got, (env, est, got)
        # gigpo_algo's estimators ride on group_norm (its argument checks); others are OpenRLHF's
        expected = "group_norm" if est in ESTIMATORS else est
        assert got["estimator"] == expected, (env, est)
        assert got["n_samples_per_prompt"] == 4
        assert got["agent_func_path"].endswith("training/openrlhf/agent_func.py")
        assert got["remote_url"] == ["agent"] or got["remote_url"] == "agent"
        assert got["prompt_dataset"].endswith("tasks.jsonl") and got["kl_use_loss"]
    # and what OpenRLHF refuses is refused by its own checks, not hidden by ours
    # (under the episode layout: the step layout refuses this micro-batch size itself)
    bad = _resolved("--env", "gigpo/NumberLine-v0", "--rollout.micro_batch_size", "1024",
                    "--gigpo.layout", "episode")[0]  # fmt: skip
    (refused,) = _parse({"parse_only": [bad]})
    assert "AssertionError" in refused["error"]


def _columns(start: int, end: int) -> range:
    """Mask columns of the response tokens ``start..end-1`` (OpenRLHF drops token 0)."""
    return range(start - 1, end - 1)


#: What the vLLM stand-in answers: NumberLine's two moves and an invalid text.
SCRIPT = ["<action>+</action>", "<action>-</action>", "hmm"]


def _train_one_step(
    model_dir: Path,
    estimator: str,
    *flags: str,
    script=SCRIPT,
    async_: bool = False,
    unchecked: tuple[str, ...] = (),
) -> dict:
    """The launcher's run (2 NumberLine tasks x 4 rollouts, micro-batches of 3 so a group is
    split across experiences) through one OpenRLHF training step; see openrlhf_real_run.py.
    ``flags`` come after the defaults here and replace them. ``async_``: OpenRLHF's
    asynchronous trainer instead, over every training step of the task dataset.
    ``unchecked``: OpenRLHF flags added after the launcher's checks (which refuse them)."""
    # Ray's socket paths must stay under 107 bytes: a short temporary folder, not tmp_path.
    work = Path(tempfile.mkdtemp(prefix="orl", dir="/tmp"))
    try:
        result = dry_run(
            "--env", "gigpo/NumberLine-v0",
            "--env.kwargs", '{"max_position": 3, "max_steps": 3}',
            "--env.num_tasks", "2", "--group_size", "4",
            "--algo.advantage.estimator", estimator,
            "--actor.model_name_or_path", str(model_dir),
            "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1",
            "--vllm.num_engines", "1",
            "--ds.attn_implementation", "sdpa",  # flash-attn is GPU only
            "--rollout.batch_size", "2", "--rollout.micro_batch_size", "3",
            "--train.batch_size", "8", "--train.micro_batch_size", "2",
            "--data.max_len", "1024", "--rollout.max_new_tokens", "16",
            "--env.max_new_tokens", "16",
            "--actor.adam.lr", "1e-3", "--actor.lr_warmup_ratio", "0",
            "--gigpo.dataset_dir", str(work),
            "--ckpt.path", str(work / "ckpt"), "--ckpt.output_dir", str(work / "final"),
            *flags,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        job = {"args": submitted_args(result.stdout), "script": script, "ray_tmp": str(work / "r"),
               "async": async_, "unchecked_args": list(unchecked)}  # fmt: skip
        out = _run_script(RUN, job, cwd=work)
        # the rollouts the estimator saved (--gigpo.save_rollouts_every defaults to 1)
        out["rollouts"] = [read_rollouts(path) for path in rollout_files(work).values()]
        out["dry_run"] = result.stdout
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _episodes(out: dict) -> tuple[list, list, list, list]:
    rewards, trajs, groups, anchors = [], [], [], []
    for r in out["records"]:
        rewards += r["rewards"]
        trajs += [r["traj"]] * len(r["rewards"])
        groups += [r["group"]] * len(r["rewards"])
        anchors += r["anchors"]
    return rewards, trajs, groups, anchors


def _expected(out: dict, estimator: str) -> np.ndarray:
    """gigpo_algo's advantage of every turn of the records, in record order (GraphGPO: with
    the next states the executor recorded)."""
    rewards, trajs, groups, anchors = _episodes(out)
    more = {}
    if estimator == "graphgpo":
        more["next_anchors"] = [a for r in out["records"] for a in r["next_anchors"]]
        assert len(more["next_anchors"]) == len(rewards)
    return estimator_advantages(estimator, rewards, trajs, groups, anchors, **more).advantages


def _sample_of(out: dict) -> list[int]:
    """For each row the PPO actor trained on, the rollout sample it is (by label and tokens:
    within a group, equal tokens mean equal turns, so equal advantages)."""
    index: dict[tuple, list[int]] = {}
    for i, (label, tokens) in enumerate(out["keys"]):
        index.setdefault((label, tuple(tokens)), []).append(i)
    return [index[(row["label"], tuple(row["tokens"]))].pop() for row in out["train_rows"]]


def _by_episode(records: list[dict]) -> dict[tuple, dict]:
    """The samples' turn records joined per episode (a step-layout episode spans samples;
    filler samples hold none): turns, won, return."""
    episodes: dict[tuple, dict] = {}
    for r in records:
        if r["rewards"]:
            one = episodes.setdefault((r["group"], r["traj"]), {"turns": 0, "won": False, "ret": 0})
            one["turns"] += len(r["rewards"])
            one["won"] |= r["won"]
            one["ret"] += sum(r["rewards"])
    return episodes


def _check_shared_metrics(out: dict) -> None:
    """OpenRLHF's usual metrics and ours, as its trainer and PPO actor reduced them: ours
    per episode, whatever the layout; group_reward_std per sample, as OpenRLHF logs it."""
    status, records = out["status"], out["records"]
    assert {k for k, v in status.items() if not np.isfinite(v)} == set()  # fillers make no NaN
    assert np.isfinite(status["policy_loss"]) and status["actor_grad_norm"] > 0
    assert out["policy_moved"] > 0  # the optimizer step changed the policy
    episodes = _by_episode(records)
    assert status["gigpo/episodes"] == len(episodes) == out.get("episodes", 8)
    turns = np.mean([e["turns"] for e in episodes.values()])
    assert status["gigpo/episode_turns"] == pytest.approx(turns)
    assert status["gigpo/won"] == pytest.approx(np.mean([e["won"] for e in episodes.values()]))
    assert status["gigpo/samples"] == sum(1 for r in records if r["rewards"])
    assert status["gigpo/filler_samples"] == sum(1 for r in records if not r["rewards"])
    totals: dict[str, list[float]] = {}
    for (group, _), e in episodes.items():
        totals.setdefault(group, []).append(e["ret"])
    stds = {g: np.std(v, ddof=1) for g, v in totals.items()}
    per_sample = [stds[r["group"]] for r in records if r["rewards"]]
    assert status["group_reward_std"] == pytest.approx(np.mean(per_sample), abs=1e-5)
    assert not any(k.startswith("gigpo_turns") for k in status)
    # the vLLM stand-in refuses to generate while asleep: every engine generated, awake
    assert out["engines"] and all(e["generated"] > 0 for e in out["engines"])


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_gigpo_algo_estimators_through_openrlhfs_training_step(tiny_model_dir, estimator):
    # gigpo with OpenRLHF's reward clip: it applies to the value every token gets
    clip = ["--reward.clip_range", "-1", "1"] if estimator == "gigpo" else []
    out = _train_one_step(tiny_model_dir, estimator, "--gigpo.layout", "episode", *clip)
    assert out["estimator"] == "group_norm"  # ours ride on its group estimator's checks
    _check_episode_layout(out, estimator, clip=1.0 if clip else None)
    _check_shared_metrics(out)
    _check_saved_rollouts(out, estimator)
    # the launcher's defaults colocate the models with sleeping vLLM engines: OpenRLHF woke
    # them to generate (the stand-in refuses otherwise) and put them back to sleep
    assert all(e["enable_sleep_mode"] for e in out["engines"])
    assert all(e["asleep"] == ["kv_cache", "weights"] for e in out["engines"])


#: OpenRLHF's default ``--reward.clip_range`` bound, (-10, 10): it clips the value every token
#: of a turn gets, also without the flag. A step group of many rows with a small spread can
#: give a turn more than 10 (walks that repeat a state many times: one row's step-level
#: z-score reaches (n - 1)/sqrt(n), over 8 from n = 66 rows, and the episode level adds to
#: it), so a check against gigpo_algo clips its values as the run did.
OPENRLHF_CLIP = 10.0


def _clipped(expected: np.ndarray, clip: float | None) -> np.ndarray:
    """``expected`` clipped as the run clipped it (``clip`` None: OpenRLHF's default)."""
    bound = OPENRLHF_CLIP if clip is None else clip
    return np.clip(expected, -bound, bound)


def _check_episode_layout(out: dict, estimator: str, clip: float | None = None) -> None:
    """Under the episode layout: every episode reached ``training_step`` once, as one
    sample, each turn's tokens holding exactly that turn's gigpo_algo advantage computed over
    the whole batch (clipped to ``[-clip, clip]``; None: OpenRLHF's default, 10), every other
    token 0."""
    records = out["records"]
    assert len(out["train_rows"]) == len(records)
    rewards, trajs, groups, anchors = _episodes(out)
    assert len(set(groups)) * 4 == len(records)
    if out.get("multi_turn", True):
        assert len(rewards) > len(records)
    expected = _expected(out, estimator)
    if clip is not None:
        assert np.abs(expected).max() > clip  # the clip changes something here
    expected = _clipped(expected, clip)
    assert np.abs(expected).max() > 0
    starts = np.cumsum([0] + [len(r["rewards"]) for r in records])
    samples = _sample_of(out)  # each sample trained on once
    assert sorted(samples) == list(range(len(records)))
    for row, i in zip(out["train_rows"], samples, strict=True):
        advantages, mask = np.array(row["advantages"]), np.array(row["action_mask"])
        covered = np.zeros_like(mask, dtype=bool)
        for k, (start, end) in enumerate(records[i]["action_ranges"]):
            cols = list(_columns(start, end))
            assert mask[cols].all()
            assert np.allclose(advantages[cols], expected[starts[i] + k], atol=1e-5)
            covered[cols] = True
        assert not advantages[~covered].any()  # environment and padding tokens get nothing


def _check_saved_rollouts(
    out: dict,
    estimator: str,
    script: list[str] = SCRIPT,
    observation: str = "Target:",
    iteration: int = 0,
) -> None:
    """The step records the driver saved for the viewer hold every turn of the step, with
    the texts the executor recorded in its Ray worker and the values trained on (unclipped)."""
    [(header, rows)] = out["rollouts"]
    assert (header["source"], header["iteration"], header["estimator"]) == (
        "openrlhf", iteration, estimator,
    )  # fmt: skip
    rewards, trajs, groups, anchors = _episodes(out)
    expected = _expected(out, estimator)
    seen: dict[str, int] = {}
    steps = []  # each turn's position in its episode (a step-layout episode spans samples)
    for t in trajs:
        steps.append(seen.get(t, 0))
        seen[t] = steps[-1] + 1
    want = {(t, k): (r, a) for t, k, r, a in zip(trajs, steps, rewards, expected, strict=True)}
    got = {(row["traj_id"], row["step"]): row for row in rows}
    assert set(got) == set(want)
    for key, (reward, advantage) in want.items():
        row = got[key]
        assert row["reward"] == pytest.approx(reward) and row["advantage"] == pytest.approx(
            advantage
        )
        assert row["observation"].startswith(observation)  # the env's own observation
        assert row["action"] in script  # what the vLLM stand-in answered
        # the estimator's own parts (training.advantages.estimator_extras)
        extras = {"hgpo": {"hgpo_levels"}, "graphgpo": {"graph_distance", "graph_next_distance"}}
        mine = extras.get(estimator, set())
        others = set().union(*extras.values()) - mine
        assert mine <= set(row) and not others & set(row)


def _check_step_layout(out: dict, model_dir: Path, estimator: str, script: list[str]) -> None:
    """Under the step layout: every step of every episode reached ``training_step`` once, as
    its own sample (its prompt exactly the env's K-step history prompt there, replayed here,
    its response within the cap), with exactly the gigpo_algo advantage of that step computed
    over the whole batch; filler samples trained nothing; the batch is whole."""
    from training.local.model import load_tokenizer
    from training.openrlhf.executor import make_task_env, parse_task, render_prompt

    records, keys, rows = out["records"], out["keys"], out["train_rows"]
    assert len(rows) == len(records) == len(keys)  # every sample trained on, fillers too
    assert len(records) % out["sample_multiple"] == 0
    real = [i for i, r in enumerate(records) if r["rewards"]]
    assert all(len(records[i]["rewards"]) == 1 for i in real)  # one step a sample
    expected = _clipped(_expected(out, estimator), None)  # the runs keep OpenRLHF's clip
    assert np.abs(expected).max() > 0
    want: dict[tuple, list[float]] = {}
    for value, i in zip(expected, real, strict=True):
        want.setdefault((keys[i][0], tuple(keys[i][1])), []).append(float(value))
    got: dict[tuple, list[float]] = {}
    empty = 0
    for row in rows:
        mask, advantages = np.array(row["action_mask"]), np.array(row["advantages"])
        assert not advantages[mask == 0].any()
        if not mask.any():
            empty += 1  # a filler
            continue
        assert np.allclose(advantages[mask > 0], advantages[mask > 0][0], atol=1e-6)
        got.setdefault((row["label"], tuple(row["tokens"])), []).append(advantages[mask > 0][0])
    assert empty == len(records) - len(real)
    # identical samples (same prompt and answer) are indistinguishable: compare their values
    assert set(got) == set(want)
    for key, values in want.items():
        assert sorted(got[key]) == pytest.approx(sorted(values), abs=1e-5), key
    # every step's prompt is the env's history prompt there; each episode ran to its end
    tokenizer = load_tokenizer(model_dir)
    episodes: dict[str, list[int]] = {}
    for i in real:
        episodes.setdefault(records[i]["traj"], []).append(i)
    for samples in episodes.values():
        task = parse_task(keys[samples[0]][0])
        env = make_task_env(task)
        _, info = env.reset(seed=task.seed)
        done = False
        for i in samples:
            assert not done
            (start, end), tokens = records[i]["action_ranges"][0], keys[i][1]
            assert tokens[:start] == render_prompt(tokenizer, info["messages"])
            assert start <= task.max_prompt_tokens and end - start <= task.max_new_tokens
            assert records[i]["actions"][0] in script
            _, reward, terminated, truncated, info = env.step(records[i]["actions"][0])
            assert reward == pytest.approx(records[i]["rewards"][0])
            done = terminated or truncated
        assert done


@pytest.mark.slow
# OpenRLHF's GRPO (group_norm), REINFORCE++ (reinforce_baseline), Dr. GRPO, REINFORCE,
# FlashREINFORCE, and PPO with a value model (gae): all its choices but rloo, which the
# launcher gives to gigpo_algo's
@pytest.mark.parametrize("estimator", OPENRLHF_ESTIMATORS)
def test_openrlhfs_own_estimators_train_with_the_executor(tiny_model_dir, estimator):
    critic = []
    if estimator == "gae":
        critic = ["--critic.model_name_or_path", str(tiny_model_dir)]
        critic += ["--critic.num_gpus_per_node", "1", "--critic.lr_warmup_ratio", "0"]
    out = _train_one_step(tiny_model_dir, estimator, *critic)
    assert out["estimator"] == estimator
    assert len(out["train_rows"]) == 8
    values = {}
    for row, i in zip(out["train_rows"], _sample_of(out), strict=True):
        row_values = np.array(row["advantages"])[np.array(row["action_mask"]) > 0]
        assert np.isfinite(row_values).all()
        if estimator != "gae":  # one value per episode; gae's vary along it
            assert np.allclose(row_values, row_values[0], atol=1e-5)
        values[i] = row_values[0]
    assert any(values.values())  # (an episode at its baseline gets 0; not all of them)
    if estimator == "group_norm":  # its formula, on the executor's episode rewards
        totals = [sum(r["rewards"]) for r in out["records"]]
        for i, value in values.items():
            group = [t for t, r in zip(totals, out["records"], strict=True)
                     if r["group"] == out["records"][i]["group"]]  # fmt: skip
            want = (totals[i] - np.mean(group)) / (np.std(group, ddof=1) + 1e-9)
            assert value == pytest.approx(want, abs=1e-4)
    if estimator == "gae":
        assert np.isfinite(out["status"]["critic_loss"])  # the value model trained too
    _check_shared_metrics(out)


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
    try:
        result = _run_bounded([sys.executable, "-c", code], env={**ENV, "RAY_TMPDIR": str(ray_tmp)},
                              cwd=ray_tmp, ray_tmp=ray_tmp, timeout=600)  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True, True]


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_step_layout_trains_every_step_of_18_step_numberline_episodes(tiny_model_dir, estimator):
    # micro-batches of 4 (dp x rollout micro-batch must divide the optimizer step of 8)
    flags = ["--env.kwargs", '{"max_position": 9}', "--gigpo.max_prompt_tokens", "1000"]
    flags += ["--rollout.micro_batch_size", "4"]
    # rollout log-probs per sample (IS correction, clipped so that every token trains)
    flags += ["--history_length", "2", "--algo.advantage.is_correction_level", "token"]
    flags += ["--algo.advantage.is_correction_mode", "clip"]
    out = _train_one_step(tiny_model_dir, estimator, *flags)
    assert "# layout: step" in out["dry_run"]
    _check_step_layout(out, tiny_model_dir, estimator, SCRIPT)
    for row in out["train_rows"]:  # the stand-in's log-prob (-1) on each response token only
        mask, rollout = np.array(row["action_mask"]), np.array(row["rollout_log_probs"])
        assert np.all(rollout[mask > 0] == -1.0) and not rollout[mask == 0].any()
    assert max(e["turns"] for e in _by_episode(out["records"]).values()) == 18
    _check_shared_metrics(out)
    _check_saved_rollouts(out, estimator)


#: What the vLLM stand-in answers in ALFWorld: two admissible commands and an invalid text.
ALFWORLD_SCRIPT = ["<action>look</action>", "<action>inventory</action>", "no idea"]


@pytest.mark.slow
def test_step_layout_trains_every_step_of_50_step_alfworld_episodes(tiny_model_dir, tmp_path):
    from gigpo_envs.alfworld.generate import generate_games

    games = tmp_path / "games"
    generate_games(games, num_games=2, seed=8)
    kwargs = {"data_dir": str(games), "max_steps": 50, "invalid_action_penalty": -0.1}
    out = _train_one_step(
        tiny_model_dir, "gigpo",
        "--env", "gigpo/ALFWorld-v0", "--env.kwargs", json.dumps(kwargs),
        "--gigpo.max_prompt_tokens", "1500", "--data.max_len", "1516",
        "--train.micro_batch_size", "4", "--train.batch_size", "16",
        "--rollout.micro_batch_size", "8",
        script=ALFWORLD_SCRIPT,
    )  # fmt: skip
    episodes = _by_episode(out["records"])
    assert [e["turns"] for e in episodes.values()] == [50] * 8  # never won: 50 steps each
    assert len(out["records"]) == 400 + (-400) % 16
    _check_step_layout(out, tiny_model_dir, "gigpo", ALFWORLD_SCRIPT)
    _check_shared_metrics(out)
    _check_saved_rollouts(out, "gigpo", ALFWORLD_SCRIPT, observation="")


# ---------------------------------------------------------------------------------------
# The OpenRLHF modes users turn on (docs/openrlhf.md#openrlhf-modes): each runs a whole
# training step (asynchronous training: every step of the dataset) on OpenRLHF's real code,
# under both sample layouts, with gigpo_algo's three estimators spread over the modes (they
# share one code path from the turn records to the tokens).

#: flags, layout, estimator; LoRA's flags are added past the launcher's checks (which
#: accept them: test_openrlhf_lora.py runs the launcher and the merged weight sync)
MODES = {
    "gspo-step": (["--actor.policy_loss_type", "gspo"], "step", "gigpo"),
    "gspo-episode": (["--actor.policy_loss_type", "gspo"], "episode", "grpo"),
    "lora-step": ([], "step", "rloo"),
    "lora-episode": ([], "episode", "gigpo"),
    "packing-step": (["--ds.packing_samples"], "step", "gigpo"),
    "packing-episode": (["--ds.packing_samples"], "episode", "rloo"),
    "dynamic-batch-step": (
        ["--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", "700"], "step", "gigpo",
    ),
    "dynamic-batch-episode": (
        ["--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", "700"], "episode", "grpo",
    ),
    "prefix-caching-step": (["--vllm.enable_prefix_caching"], "step", "grpo"),
    "prefix-caching-episode": (["--vllm.enable_prefix_caching"], "episode", "gigpo"),
}  # fmt: skip
LORA = ("--ds.lora.rank", "8", "--ds.lora.alpha", "16")

#: the step layout's run in these tests: 3-step NumberLine episodes, micro-batches of 4
STEP_FLAGS = ["--gigpo.layout", "step", "--rollout.micro_batch_size", "4",
              "--gigpo.max_prompt_tokens", "1000"]  # fmt: skip


def _check_layout(out: dict, model_dir: Path, layout: str, estimator: str) -> None:
    if layout == "step":
        _check_step_layout(out, model_dir, estimator, SCRIPT)
    else:
        _check_episode_layout(out, estimator)


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_openrlhf_modes_train_every_turn_with_its_advantage(tiny_model_dir, mode):
    flags, layout, estimator = MODES[mode]
    layout_flags = STEP_FLAGS if layout == "step" else ["--gigpo.layout", "episode"]
    unchecked = LORA if mode.startswith("lora") else ()
    out = _train_one_step(tiny_model_dir, estimator, *layout_flags, *flags, unchecked=unchecked)
    _check_layout(out, tiny_model_dir, layout, estimator)
    _check_shared_metrics(out)
    _check_saved_rollouts(out, estimator)
    if mode.startswith("lora"):  # only the adapters train (and they did: the policy moved)
        assert out["lora"]["lora"] > 0 and out["lora"]["other"] == 0
    else:
        assert out["lora"]["lora"] == 0
    # packing (also under dynamic batches, which turn it on): OpenRLHF's packed forward
    # pass trained; the sdpa stand-in for flash-attn keeps packed samples apart
    packed = mode.startswith(("packing", "dynamic-batch"))
    assert out["packing_samples"] == packed
    if packed:
        assert out["packing_gap"] < 1e-4
    if mode.startswith("prefix-caching"):
        assert all(e["enable_prefix_caching"] for e in out["engines"])
    gspo = mode.startswith("gspo")  # the actor's loss is GSPO's, reduced per sample
    assert out["policy_loss"] == {"type": "gspo" if gspo else "ppo", "token_level": not gspo}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "estimator", "partial", "flags"),
    [
        # one generator call makes both training steps' groups: the queue splits its output
        ("step", "gigpo", False, ["--rollout.vllm_generate_batch_size", "4"]),
        ("episode", "gigpo", False, ["--rollout.vllm_generate_batch_size", "4"]),
        ("step", "rloo", True, ["--train.async_queue_size", "2"]),
        ("episode", "grpo", True, ["--train.async_queue_size", "2"]),
    ],
)
def test_async_training_keeps_each_group_in_one_advantage_computation(
    tiny_model_dir, layout, estimator, partial, flags
):
    layout_flags = STEP_FLAGS if layout == "step" else ["--gigpo.layout", "episode"]
    partial_flags = ["--train.partial_rollout_enable"] if partial else []
    out = _train_one_step(
        tiny_model_dir, estimator, *layout_flags, *flags, *partial_flags,
        "--train.async_enable", "--env.num_tasks", "4", "--train.num_episodes", "1",
        # the vLLM log-probs, and the correction of the sampler-trainer gap with them
        "--algo.advantage.is_correction_level", "token",
        "--algo.advantage.is_correction_mode", "clip",
        async_=True,
    )  # fmt: skip
    steps = out["steps"]
    assert len(steps) == 2  # 4 tasks, 2 a training step
    queue = 2 if partial else 1
    seen: set[str] = set()
    for k, step in enumerate(steps):
        step_out = {**out, **step, "rollouts": out["rollouts"][k : k + 1]}
        groups = {r["group"] for r in step["records"] if r["rewards"]}
        assert len(groups) == 2 and not groups & seen  # whole groups, each in one step
        seen |= groups
        _check_layout(step_out, tiny_model_dir, layout, estimator)  # over its own groups
        _check_shared_metrics(step_out)  # (the policy moved over the whole run)
        _check_saved_rollouts(step_out, estimator, iteration=k)
        # step k (from 0) trains after k weight syncs, on samples at most queue (+1 with
        # partial rollouts) syncs older
        versions = step["weights_versions"]
        assert versions and all(k - queue - int(partial) <= v <= k for v in versions), versions
        assert step["status"]["gigpo/episodes"] == 8
    if not partial:  # one generator call made both steps' groups: the second step's are stale
        assert [s["weights_versions"] for s in steps] == [[0.0], [0.0]]
    assert [e["weights_version"] for e in out["engines"]] == [2]  # a weight sync a step
    assert not any(e["enable_sleep_mode"] for e in out["engines"])  # displaced by async


@pytest.mark.slow
@pytest.mark.parametrize(("layout", "estimator"), [("step", "gigpo"), ("episode", "rloo")])
def test_dynamic_filtering_drops_only_groups_without_any_advantage(
    tiny_model_dir, layout, estimator
):
    # one-step walks: a task whose target is two cells away cannot be won
    kwargs = {"max_position": 3, "max_steps": 1}
    env = gym.make("gigpo/NumberLine-v0", **kwargs)
    starts = [env.reset(seed=seed)[0] for seed in range(6)]
    env.close()
    kept_start = "Target: 1\nCurrent: 3"  # two cells away: lost whatever the policy does
    kept_tasks = {seed for seed, start in enumerate(starts) if start == kept_start}
    assert kept_tasks == {0}  # the one task of the six with a signal: the batch never fills
    # its episodes answer "+" and "-" in turn (against the end of the line, and one step
    # closer: rewards -1 and 0, all lost); every other task only "hmm" (identical invalid
    # episodes: no advantage at either level)
    script = {kept_start: SCRIPT[:2], "": ["hmm"]}
    layout_flags = STEP_FLAGS if layout == "step" else ["--gigpo.layout", "episode"]
    out = _train_one_step(
        tiny_model_dir, estimator, *layout_flags, "--env.num_tasks", "6",
        "--env.kwargs", json.dumps(kwargs), "--algo.dynamic_filtering_enable",
        # the one kept group's 4 episodes are one whole optimizer step
        "--train.batch_size", "4",
        script=script,
    )  # fmt: skip
    status = out["status"]
    trained = {r["group"] for r in out["records"] if r["rewards"]}
    assert {int(g.split("#")[1]) for g in trained} == kept_tasks  # env#seed#kwargs
    # kept although every episode of it lost: OpenRLHF's score range would have dropped it
    assert not any(e["won"] for e in _by_episode(out["records"]).values())
    assert status["gigpo/groups_kept"] == 1
    # looking for a second group, the rounds read every other task and dropped it
    assert status["gigpo/groups_dropped"] == 5
    out["episodes"], out["multi_turn"] = 4 * len(trained), False
    _check_layout(out, tiny_model_dir, layout, estimator)
    _check_shared_metrics(out)


@pytest.mark.slow
def test_step_layout_micro_batches_of_fillers_only_train_and_log_finite_metrics(tiny_model_dir):
    # one task, 2 one-step episodes ("+" and "-" in turn: rewards -1 and 0), padded with 6
    # fillers to the optimizer step of 8: micro-batches of 2 hold fillers only, whatever
    # the shuffle (OpenRLHF's ppo_train divides each one's metrics by its token count)
    out = _train_one_step(
        tiny_model_dir, "gigpo", *STEP_FLAGS, "--rollout.micro_batch_size", "2",
        "--env.num_tasks", "1", "--group_size", "2", "--rollout.batch_size", "1",
        "--env.kwargs", json.dumps({"max_position": 3, "max_steps": 1}),
        script={"": SCRIPT[:2]},
    )  # fmt: skip
    assert [bool(r["rewards"]) for r in out["records"]].count(False) == 6
    out["episodes"] = 2
    _check_step_layout(out, tiny_model_dir, "gigpo", SCRIPT)
    _check_shared_metrics(out)


def test_gspo_loss_equals_openrlhfs_policy_loss_gspo():
    """gigpo_algo.losses.gspo_loss, reduced per sequence, against OpenRLHF's own
    ``PolicyLoss(policy_loss_type="gspo")`` on random batches: loss and gradient."""
    code = """
import json, torch
from openrlhf.models.loss import PolicyLoss
from gigpo_algo.losses import aggregate_loss, gspo_loss

gaps = []
for seed in range(6):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 11
    mask = (torch.rand(b, t, generator=g) < 0.7).float()
    mask[0] = 0.0  # a row without response tokens
    mask[1] = 1.0
    old = -torch.rand(b, t, generator=g) * 3
    rollout = old + 0.05 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, t, generator=g) * mask  # per-token (per-turn) advantages
    scale = [0.02, 0.3][seed % 2]  # inside the clip range, and well outside it
    lp0 = old + scale * torch.randn(b, t, generator=g)
    clip = [(0.2, 0.28), (3e-4, 4e-4), (0.1, 0.1)][seed % 3]
    dual = 3.0 if seed % 2 else None
    correction = "token" if seed in (4, 5) else "off"  # then OpenRLHF's ratio is to rollout
    theirs_fn = PolicyLoss(clip_eps_low=clip[0], clip_eps_high=clip[1], dual_clip=dual,
                           policy_loss_type="gspo", is_correction_level=correction)
    lp_a = lp0.clone().requires_grad_(True)
    theirs = theirs_fn(lp_a, old, adv, action_mask=mask, rollout_log_probs=rollout)[0]
    theirs.backward()
    lp_b = lp0.clone().requires_grad_(True)
    base = rollout if correction == "token" else old
    ours = aggregate_loss(gspo_loss(lp_b, base, adv, mask, clip_low=clip[0], clip_high=clip[1],
                                    dual_clip=dual), mask, mode="seq-mean-token-mean")
    ours.backward()
    gaps.append([float(theirs), float(ours), float((lp_a.grad - lp_b.grad).abs().max()),
                 float(lp_a.grad.abs().max())])
print(json.dumps(gaps))
"""
    result = _run_bounded([sys.executable, "-c", code], timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    gaps = json.loads(result.stdout.strip().splitlines()[-1])
    for theirs, ours, grad_gap, grad in gaps:
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7)
        assert grad_gap <= 1e-6 * max(grad, 1.0)
    assert any(grad > 0 for *_, grad in gaps) and len({round(t, 6) for t, *_ in gaps}) == 6

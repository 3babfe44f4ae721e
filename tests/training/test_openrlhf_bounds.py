"""``gigpo-openrlhf`` bounds every flag it reads before any work: an unknown ``--env``, a seed
outside ``[0, 2**32 - 1]``, a task count or size past its bound, each exits with status 2 and
one line naming the flag (``training.openrlhf.layout.FLAG_BOUNDS``). Runs without OpenRLHF."""

from __future__ import annotations

import pytest
from openrlhf_launcher import dry_run

from training.local.checks import LIMITS, MAX_SEED
from training.openrlhf import launch
from training.openrlhf.command import UsageError, plan
from training.openrlhf.layout import FLAG_BOUNDS, MAX_TASKS
from training.openrlhf.layout import MAX_SEED as OPENRLHF_MAX_SEED

KL = ["--algo.kl.use_loss"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "gigpo/Nope-v0"], "--env: unknown environment 'gigpo/Nope-v0'; registered: "),
        (["--env", "../../etc"], "--env: unknown environment '../../etc'"),
        (["--env.seed", str(2**64)], "--env.seed must be <= 4,294,967,295"),
        (["--env.seed", "-1"], "--env.seed must be >= 0"),
        (["--env.num_tasks", "3000000"], "--env.num_tasks must be <= 1,000,000"),
        (["--env.num_tasks", str(10**9)], "--env.num_tasks must be <= 1,000,000"),
        (["--env.seed", str(2**32 - 2), "--env.num_tasks", "3"], "the last task's seed"),
        (["--gigpo.env_timeout_s", "1e300"], "--gigpo.env_timeout_s must be a number > 0"),
        (["--ds.ring_attn_size", "0"], "--ds.ring_attn_size must be >= 1"),  # was 1/0
        (["--ds.tensor_parallel_size", "x"], "--ds.tensor_parallel_size must be an int"),
        (  # HGPO's level weights overflow float64: the run would stop at its first batch
            ["--algo.advantage.estimator", "hgpo", "--algo.gigpo.length_alpha", "1000"],
            "--algo.gigpo.length_alpha=1000.0 is too large",
        ),
    ],
)
def test_the_plan_refuses_before_any_task_is_made(argv, message):
    with pytest.raises(UsageError) as refused:
        plan(argv + KL)
    assert message in str(refused.value)
    assert "gigpo/Sokoban-v0" in str(refused.value) or not argv[0] == "--env"


@pytest.mark.parametrize("flag", sorted(FLAG_BOUNDS))
def test_every_integer_flag_the_launcher_reads_is_bounded_on_both_sides(flag):
    low, high = FLAG_BOUNDS[flag]
    for value in (low - 1, high + 1, 10**40):
        with pytest.raises(UsageError, match=flag.replace(".", r"\.")):
            plan([flag, str(value)] + KL)


def test_the_bounds_are_the_local_trainers_where_it_has_the_setting():
    assert OPENRLHF_MAX_SEED == MAX_SEED == 2**32 - 1
    same = {
        "--env.max_new_tokens": "rollout.max_new_tokens",
        "--group_size": "env.group_size",
        "--history_length": "env.history_length",
        "--gigpo.max_prompt_tokens": "rollout.max_prompt_tokens",
        "--gigpo.env_workers": "run.threads",
        "--gigpo.save_rollouts_every": "run.save_rollouts_every",
        "--gigpo.rollout_max_chars": "run.rollout_max_chars",
        "--train.batch_size": "algo.minibatch_size",
    }
    for flag, key in same.items():
        assert FLAG_BOUNDS[flag][1] == LIMITS[key], flag
    # the task count: as gigpo-verl's MAX_COUNT (tests/verl refuses 1,000,001 there)
    assert FLAG_BOUNDS["--env.num_tasks"] == (1, MAX_TASKS) and MAX_TASKS == 1_000_000


def test_the_limits_themselves_are_taken():
    run = plan(["--env.seed", str(2**32 - 2), "--env.num_tasks", "2"] + KL)
    assert [t.seed for t in run.tasks] == [2**32 - 2, 2**32 - 1]
    run = plan(["--env", "gigpo/NumberLine-v0", "--env.num_tasks", "1", "--group_size", "1024",
                "--gigpo.env_workers", "1024", "--gigpo.env_timeout_s", "86400"] + KL)  # fmt: skip
    assert run.tasks[0].env_workers == 1024 and run.tasks[0].env_timeout_s == 86400


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--env", "gigpo/Nope-v0"), "--env: unknown environment"),
        (("--env.seed", str(2**64)), "--env.seed must be <="),
        (("--env.num_tasks", "3000000"), "--env.num_tasks must be <="),
        (("--env.num_tasks", str(10**9)), "--env.num_tasks must be <="),
    ],
)
def test_the_launchers_dry_run_refuses_in_one_line_with_status_2(flags, message):
    result = dry_run(*flags)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("gpus", ["\u00b2", "0", "99999", "x"])
def test_the_launcher_bounds_gpus(monkeypatch, capsys, gpus):
    monkeypatch.setenv("GPUS", gpus)
    assert launch.main(["--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: GPUS must be an int >= 1 and <= 1024" in err and err.count("\n") == 1

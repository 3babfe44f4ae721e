"""The estimator study: runs differ only in estimator and seed; table, plot and numbers."""

from __future__ import annotations

import json
import math

import pytest

from training.cli.study import main, mean_ci, plan_runs
from training.local.config import ConfigError


def test_mean_and_95_percent_interval_by_hand():
    mean, half = mean_ci([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2 df) = 4.303
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3))
    assert mean_ci([0.5]) == (0.5, 0.0)
    mean, half = mean_ci([0.0, 1.0])  # sd 0.7071, t(1 df) = 12.706
    assert half == pytest.approx(12.706 * math.sqrt(0.5) / math.sqrt(2))


def _config(tmp_path, model_dir, extra: str = "") -> str:
    path = tmp_path / "tiny_line.yaml"
    path.write_text(
        f"model: {{name_or_path: {model_dir}}}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 3}\n"
        "  num_groups: 2\n  group_size: 2\n  history_length: 0\n"
        "  heldout_fraction: 0.25\n"
        "rollout: {max_new_tokens: 4}\neval: {groups: 2, every: 2}\n"
        f"algo: {{minibatch_size: 8{extra}}}\n"
        "run: {iterations: 2, checkpoint_every: 0}\n"
    )
    return str(path)


def test_only_estimator_and_seed_differ_between_runs(tmp_path, tiny_model_dir):
    config = _config(tmp_path, tiny_model_dir)
    runs = plan_runs([config], ["gigpo", "grpo", "rloo"], [0, 1], tmp_path / "study")
    assert len(runs) == 6
    assert {(r.estimator, r.seed) for r in runs} == {
        (e, s) for e in ("gigpo", "grpo", "rloo") for s in (0, 1)
    }
    stripped = {
        tuple(
            a
            for a in r.argv()
            if "estimator" not in a and "seed" not in a and "label" not in a and "--out" not in a
        )
        for r in runs
    }
    assert len(stripped) == 1  # everything else is the same command line
    quick = plan_runs([config], ["gigpo"], [0], tmp_path / "q", quick=True)
    assert "--run.iterations=2" in quick[0].argv()


def test_a_setting_an_estimator_ignores_stops_the_study_before_training(tmp_path, tiny_model_dir):
    config = _config(tmp_path, tiny_model_dir, extra=", step_weight: 0.5")
    with pytest.raises(ConfigError, match="algo.step_weight=0.5 is not used by"):
        plan_runs([config], ["gigpo", "grpo"], [0], tmp_path / "study")
    assert not (tmp_path / "study" / "runs").exists()
    with pytest.raises(ConfigError, match="algo.estimator='ppo'"):
        plan_runs([config], ["ppo"], [0], tmp_path / "study")
    with pytest.raises(ConfigError, match="--estimators"):
        plan_runs([config], ["a2c"], [0], tmp_path / "study")
    with pytest.raises(ConfigError, match="--seeds"):
        plan_runs([config], ["gigpo"], [1, 1], tmp_path / "study")


def test_a_small_study_writes_its_table_plot_and_numbers(tmp_path, tiny_model_dir, capsys):
    config = _config(tmp_path, tiny_model_dir)
    out = tmp_path / "study"
    argv = ["--config", config, "--estimators", "gigpo", "grpo", "--seeds", "0", "1"]
    assert main([*argv, "--out", str(out), "--jobs", "2"]) == 0
    table = (out / "study.md").read_text()
    assert "| gigpo | 2 |" in table and "| grpo | 2 |" in table
    assert (out / "study.png").stat().st_size > 10_000
    study = json.loads((out / "study.json").read_text())
    entry = study["tiny_line"]["grpo"]
    assert entry["seeds"] == [0, 1]
    for key in ("train_success", "heldout_success", "valid_action_rate", "step_group_coverage"):
        values = entry["per_seed"][key]
        assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
        assert entry["mean_ci"][key][0] == pytest.approx(sum(values) / 2)
    assert entry["per_seed"]["step_group_mean_size"][0] >= 1.0
    # Run again: every run is finished, so nothing trains and the numbers are the same.
    first = (out / "runs" / "tiny_line" / "grpo" / "seed1" / "metrics.jsonl").read_text()
    assert main([*argv, "--out", str(out)]) == 0
    assert (out / "runs" / "tiny_line" / "grpo" / "seed1" / "metrics.jsonl").read_text() == first
    assert (
        json.loads((out / "study.json").read_text())["tiny_line"]["grpo"]["per_seed"]
        == entry["per_seed"]
    )

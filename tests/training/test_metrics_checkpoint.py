"""Metrics lines, the learning-curve plot, checkpoints: damage gets a clear error or is skipped."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from training.local.checkpoint import load_checkpoint, save_checkpoint
from training.local.metrics import MetricsLog, plot_curves, read_metrics


def test_metrics_skip_a_torn_line_and_drop_rows_past_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"iteration": i, "success_rate": i / 10, "mean_return": i} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 4, "succ')
    assert read_metrics(tmp_path) == rows

    log = MetricsLog(tmp_path, completed=2)
    assert read_metrics(tmp_path) == rows[:2]
    log.write({**rows[2], "loss": float("nan")})
    assert read_metrics(tmp_path)[-1] == {**rows[2], "loss": None}


def test_plot_puts_several_runs_on_one_png(tmp_path):
    rows = [{"iteration": i, "success_rate": i / 4, "mean_return": i} for i in range(4)]
    rows[-1]["eval_success_rate"] = 0.5
    png = plot_curves({"gigpo": rows, "grpo": rows[:2]}, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def legacy_numpy_draw():
    return np.random.rand(2)  # noqa: NPY002  (the checkpoint saves the global RNG)


def _model_and_optimizer():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_checkpoint_restores_model_optimizer_and_every_rng(tmp_path):
    model, optimizer = _model_and_optimizer()
    generator = np.random.default_rng(5)
    generator.random(3)
    torch.manual_seed(11)
    np.random.seed(12)  # noqa: NPY002  (the checkpoint saves the global RNG)
    save_checkpoint(tmp_path, model=model, optimizer=optimizer, iteration=7, generator=generator)
    expected = (torch.rand(2), legacy_numpy_draw(), generator.random(2))

    other, other_opt = _model_and_optimizer()
    with torch.no_grad():
        other.weight.add_(1.0)
    other_gen = np.random.default_rng(0)
    torch.manual_seed(0)
    done = load_checkpoint(tmp_path, model=other, optimizer=other_opt, generator=other_gen)
    assert done == 7
    assert torch.equal(other.weight, model.weight)
    assert torch.equal(torch.rand(2), expected[0])
    assert np.array_equal(legacy_numpy_draw(), expected[1])
    assert np.array_equal(other_gen.random(2), expected[2])
    state = other_opt.state_dict()["state"][0]
    assert torch.equal(state["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    model, optimizer = _model_and_optimizer()
    generator = np.random.default_rng(0)
    assert load_checkpoint(tmp_path, model=model, optimizer=optimizer, generator=generator) is None


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    model, optimizer = _model_and_optimizer()
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.json").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="cannot resume from"):
        load_checkpoint(
            tmp_path, model=model, optimizer=optimizer, generator=np.random.default_rng()
        )


def test_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    model, optimizer = _model_and_optimizer()
    generator = np.random.default_rng(0)
    save_checkpoint(tmp_path, model=model, optimizer=optimizer, iteration=1, generator=generator)
    bigger = torch.nn.Linear(4, 2)
    with pytest.raises(RuntimeError, match="cannot resume from"):
        load_checkpoint(
            tmp_path,
            model=bigger,
            optimizer=torch.optim.AdamW(bigger.parameters()),
            generator=generator,
        )


def test_plot_cli_labels_runs_by_their_config(tmp_path, capsys):
    from training.local.plot import main

    for name, estimator in (("a", "gigpo"), ("b", "grpo")):
        run = tmp_path / name
        run.mkdir()
        (run / "metrics.jsonl").write_text(
            json.dumps({"iteration": 0, "success_rate": 0.5, "mean_return": 1.0}) + "\n"
        )
        config = {"run": {"label": ""}, "algo": {"estimator": estimator}}
        (run / "config.json").write_text(json.dumps(config))
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "empty")])
    assert "holds no metrics" in capsys.readouterr().err

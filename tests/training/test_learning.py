"""Learning happens: on a trivial task the success rate rises, and only with the real signal.

NumberLine on 0..1 in one step: the model must write a valid answer ("+" or "-") and the
right one for the position it is shown. The tiny random model of the test session (taught
the action tags now and then by its warm-up) starts at a success rate of about 0.15; 25
GiGPO iterations lift it by more than MARGIN. The same run with every advantage set to 0,
or with their signs flipped, does not rise (it stays flat, or collapses): the assertion
fails for a trainer whose signal is absent or backwards.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import training.local.train as train_module

#: Success rate over the last 5 iterations minus over the first 5, required of a real run.
MARGIN = 0.2
ITERATIONS = 25


def _rise(tiny_config, tmp_path, transform=None, monkeypatch=None) -> float:
    if transform is not None:
        real = train_module.critic_free_advantages

        def altered(records, algo, groups):
            result = real(records, algo, groups)
            return dataclasses.replace(result, advantages=transform(result.advantages))

        monkeypatch.setattr(train_module, "critic_free_advantages", altered)
    config = tiny_config(
        "gigpo/NumberLine-v0",
        "--env.kwargs={max_position: 1, max_steps: 1}",
        "--env.num_groups=8",
        "--env.group_size=4",
        "--env.history_length=0",
        "--eval.groups=0",
        "--env.template={task: 'Number line.', order: [current], current: '{observation}'}",
        "--rollout.max_new_tokens=3",
        "--rollout.response_prefix=<action>",
        "--rollout.stop_text=</action>",
        "--algo.invalid_penalty=1.0",
        "--algo.minibatch_size=16",
        "--algo.kl_coef=0",
        "--optim.lr=3e-3",
        f"--run.iterations={ITERATIONS}",
        "--run.checkpoint_every=0",
        out=tmp_path / "run",
    )
    rows = train_module.train(config)
    success = [r["success_rate"] for r in rows]
    return float(np.mean(success[-5:]) - np.mean(success[:5]))


def test_success_rises_on_a_trivial_task(tiny_config, tmp_path):
    assert _rise(tiny_config, tmp_path) > MARGIN


@pytest.mark.parametrize(
    "transform", [np.zeros_like, np.negative], ids=["advantages zeroed", "signs flipped"]
)
def test_the_rise_needs_the_real_signal(tiny_config, tmp_path, monkeypatch, transform):
    assert _rise(tiny_config, tmp_path, transform, monkeypatch) < MARGIN

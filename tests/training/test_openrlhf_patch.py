"""The version-pinned glue: version check, patch-on-import, and the estimator's tensor I/O."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from training.import_hooks import _PatchOnImport
from training.openrlhf import patch
from training.openrlhf.estimator import SETTINGS_ENV, GiGPOSettings
from training.openrlhf.turns import INFO_KEY, SampleTurns

# OpenRLHF's own Experience, length penalties and version: run where it is installed.
pytestmark = pytest.mark.openrlhf


def test_the_installed_openrlhf_is_the_pinned_one():
    assert patch.check_openrlhf_version() == "0.11.2"


@pytest.mark.parametrize("version", ["0.11.1", "0.11.3", "0.12.0", "0.11.2rc1"])
def test_another_openrlhf_version_is_a_clear_error(version):
    with pytest.raises(RuntimeError, match=r"supports exactly openrlhf==0\.11\.2, but"):
        patch.check_openrlhf_version(version)


def test_patches_run_when_the_module_is_first_imported(tmp_path, monkeypatch):
    (tmp_path / "gigpo_fake_target.py").write_text("class Maker:\n    value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def bump(module):
        seen.append(module.__name__)
        module.Maker.value += 1

    patch.install_patches({"gigpo_fake_target": bump})
    try:
        import gigpo_fake_target

        assert gigpo_fake_target.Maker.value == 2
        assert seen == ["gigpo_fake_target"]
        # Already imported: patched on the spot.
        patch.install_patches({"gigpo_fake_target": bump})
        assert gigpo_fake_target.Maker.value == 3
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PatchOnImport)]
        sys.modules.pop("gigpo_fake_target", None)


def test_setup_worker_hook_runs_in_a_fresh_process():
    code = textwrap.dedent(
        """
        import sys
        from training.import_hooks import _PatchOnImport
        from training.openrlhf.patch import setup_worker
        setup_worker()
        finders = [f for f in sys.meta_path if isinstance(f, _PatchOnImport)]
        assert finders and set(finders[0].patches) == {
            "openrlhf.trainer.ppo_utils.samples_generator",
            "openrlhf.trainer.ppo_utils.experience_maker",
            "openrlhf.trainer.ppo_trainer",
            "openrlhf.trainer.ppo_trainer_async",
            "openrlhf.trainer.ray.ppo_actor",
            "openrlhf.trainer.ppo_utils.replay_buffer",
        }
        import openrlhf.utils.agent  # other openrlhf modules import as before
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_trainer_patches_reach_rays_actor_classes_built_on_the_base():
    """``@ray.remote`` copies the base class's methods into the actor class it makes while
    OpenRLHF's module runs, before the patch: the ``PPOTrainer`` actor (and the asynchronous
    ``TrainingActor``) must get the wrapped methods too, or our metrics never reach
    OpenRLHF's status in a real run."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    path = [root / "tests" / "standins", root / "training" / "openrlhf" / "flash_attn_cpu", root]
    code = textwrap.dedent(
        """
        from training.openrlhf.patch import TRAINER_WRAPPERS, setup_worker
        setup_worker()
        from openrlhf.trainer import ppo_trainer, ppo_trainer_async
        base = ppo_trainer.BasePPOTrainer
        for actor in (ppo_trainer.PPOTrainer, ppo_trainer_async.TrainingActor):
            cls = actor.__ray_metadata__.modified_class
            for name in TRAINER_WRAPPERS:
                method = getattr(cls, name)
                assert method is getattr(base, name), (actor, name)
                assert method.__code__.co_filename.endswith("patch.py"), (actor, name)
        print("ok")
        """
    )
    env = {**__import__("os").environ, "PYTHONPATH": ":".join(map(str, path))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def _record(group, traj, rewards, ranges, length, anchors=None):
    return SampleTurns(
        group=group,
        traj=traj,
        rewards=rewards,
        anchors=anchors or [f"s{i}" for i in range(len(rewards))],
        anchor_texts=[None] * len(rewards),
        is_action_valid=[True] * len(rewards),
        action_ranges=ranges,
        sequence_length=length,
        max_len=2048,
    ).to_dict()


def _two_samples(rewards=None):
    """Two samples of one task, as OpenRLHF holds them after concatenation: one Experience
    (OpenRLHF's own class) whose info lists are chained, and the action mask of each turn."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    turns = [
        _record("t", "a", [0.0, 1.0], [(3, 5), (7, 9)], 9),
        _record("t", "b", [0.0, 0.0], [(3, 6), (8, 9)], 9, anchors=["s0", "s9"]),
    ]
    responses = [{"gigpo": {"layout": "episode", "turns": t}} for t in turns]
    singles = [patch.attach_turns(Experience(info={}), r, max_len=2048) for r in responses]
    mask = torch.zeros(2, 8)
    mask[0, 2:4] = mask[0, 6:8] = 1  # a: turns on tokens 3-4 and 7-8 (columns shift by one)
    mask[1, 2:5] = mask[1, 7:8] = 1  # b: tokens 3-5 and 8
    experience = Experience(
        info={INFO_KEY: singles[0].info[INFO_KEY] + singles[1].info[INFO_KEY]},
        action_mask=mask,
        kl=torch.ones(2, 8),
        rewards=rewards,
        response_length=torch.tensor([8.0, 6.0]),
        truncated=torch.tensor([False, True]),
    )
    return experience, mask


def _on_tokens(turn_values):
    """The four turns' values on the token grid of :func:`_two_samples`."""
    grid = torch.zeros(2, 8)
    grid[0, 2:4], grid[0, 6:8], grid[1, 2:5], grid[1, 7:8] = (float(v) for v in turn_values)
    return grid


# GiGPO by hand for _two_samples (gamma 0.95, step weight 1, std unbiased, and norm
# "mean_std", named: the default is "mean"). Whenever a's episode return beats b's (and a's
# first-turn discounted return beats b's), the episode advantages of a group of two are
# +-1/sqrt(2), and so are the step advantages at s0, the one state both visited; s1 and s9
# are seen once, step advantage 0.
# Per turn (a0, a1, b0, b1): A_E + A_S.
ROOT_HALF = 2**-0.5
BY_HAND = [2 * ROOT_HALF, ROOT_HALF, -2 * ROOT_HALF, -ROOT_HALF]
MEAN_STD = GiGPOSettings(norm="mean_std")


def test_attach_then_apply_writes_each_turns_gigpo_advantage_on_its_tokens():
    experience, mask = _two_samples()
    patch.apply_gigpo([experience], MEAN_STD)

    # returns: a 1, b 0; at s0 a's discounted return is 0.95, b's 0
    expected = _on_tokens(BY_HAND)
    assert torch.allclose(experience.advantages, expected, atol=1e-4)
    assert torch.equal(experience.returns, experience.advantages)
    assert experience.info["return"].tolist() == [1.0, 0.0]
    assert INFO_KEY not in experience.info and experience.kl is None
    assert experience.advantages[0, 2] != experience.advantages[0, 6]  # turns differ


def test_the_default_norm_is_mean_on_the_tokens_too():
    # norm "mean": episode advantages 1 - 0.5 = +-0.5; at s0 the discounted returns 0.95 and
    # 0 lie +-0.475 from their mean; s1 and s9 are seen once, step advantage 0
    experience, _ = _two_samples()
    patch.apply_gigpo([experience], GiGPOSettings())
    expected = _on_tokens([0.5 + 0.475, 0.5, -0.5 - 0.475, -0.5])
    assert torch.allclose(experience.advantages, expected, atol=1e-6)


def test_gigpo_gets_openrlhfs_length_penalties_reward_clip_and_group_std(monkeypatch):
    # OpenRLHF's own shaping, through the patched method: its overlong penalty (buffer 4 of 8
    # new tokens: sample a, 8 tokens long, loses 1; b, 6 long, loses 0.5), then its stop
    # properly penalty (b was cut: scaled by 0.5), then the clip of the advantage.
    experience, mask = _two_samples(rewards=torch.tensor([1.0, 0.0]))
    reward = SimpleNamespace(
        overlong_buffer_len=4.0,
        overlong_penalty_factor=1.0,
        stop_properly_penalty_coef=0.5,
        clip_range=(-0.5, 0.5),
    )
    args = SimpleNamespace(reward=reward, rollout=SimpleNamespace(max_new_tokens=8), data=None)
    maker = SimpleNamespace(strategy=SimpleNamespace(args=args))
    monkeypatch.setenv(SETTINGS_ENV, MEAN_STD.to_json())
    wrapped = patch._wrap_compute_advantages(lambda self, experiences: pytest.fail("not gigpo"))
    wrapped(maker, [experience])

    # episode rewards: a 1 - 1 = 0; b (0 - 0.5) * 0.5 = -0.25, on each episode's last turn
    assert experience.rewards.tolist() == [0.0, -0.25]
    # returns: a 0, b -0.25; at s0, a 0 and b 0.95 * -0.25: BY_HAND, then clipped
    expected = _on_tokens(np.clip(BY_HAND, -0.5, 0.5))
    assert torch.allclose(experience.advantages, expected, atol=1e-6)
    assert experience.advantages.max() == 0.5  # the clip bound was reached
    assert experience.info["return"].tolist() == [0.0, -0.25]
    std = float(np.std([0.0, -0.25], ddof=1))
    assert experience.info["group_reward_std"].tolist() == pytest.approx([std, std])


def test_gigpo_without_turn_records_is_a_clear_error():
    experience = SimpleNamespace(info={}, action_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="needs the gigpo agent executor"):
        patch.apply_gigpo([experience], GiGPOSettings())


def test_wrapped_estimator_defers_to_openrlhf_unless_gigpo_is_on(monkeypatch):
    calls = []

    def original(self, experiences):
        calls.append("openrlhf")
        return experiences

    wrapped = patch._wrap_compute_advantages(original)
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    assert wrapped(None, []) == [] and calls == ["openrlhf"]

    monkeypatch.setenv(SETTINGS_ENV, GiGPOSettings().to_json())
    from openrlhf.trainer.ppo_utils.experience import Experience

    record = _record("t", "a", [1.0], [(2, 4)], 4)
    experience = Experience(
        info={INFO_KEY: [record]}, action_mask=torch.ones(1, 3), rewards=torch.tensor([1.0])
    )
    reward = SimpleNamespace(clip_range=(-10.0, 10.0))  # OpenRLHF's defaults: no penalties
    maker = SimpleNamespace(strategy=SimpleNamespace(args=SimpleNamespace(reward=reward)))
    wrapped(maker, [experience])
    assert calls == ["openrlhf"]
    assert np.allclose(experience.advantages.numpy(), 0.0)  # a lone rollout: advantage 0
    assert "group_reward_std" not in experience.info  # a group of one has no std


def test_a_micro_batch_of_fillers_only_reports_finite_metrics_and_a_nonzero_weight():
    status = {
        "metrics": {"policy_loss": torch.tensor(float("nan")), "reward": torch.tensor([0.5])},
        "weights": {"policy_loss": "token", "reward": "sample"},
        "num_samples": 2.0,
        "num_action_tokens": 0.0,
    }
    fixed = patch.fix_filler_status(status)
    assert fixed["metrics"]["policy_loss"].item() == 0.0
    assert fixed["metrics"]["reward"].tolist() == [0.5]
    # OpenRLHF's ppo_train divides each token-weighted metric by this count: not by 0
    assert 0 < fixed["num_action_tokens"] < 1e-6
    real = {"metrics": {"policy_loss": torch.tensor(1.0)}, "weights": {"policy_loss": "token"},
            "num_samples": 2.0, "num_action_tokens": 7.0}  # fmt: skip
    assert patch.fix_filler_status(real) is real and real["num_action_tokens"] == 7.0

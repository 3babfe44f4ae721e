"""verl 0.9.1's real actor update on GiGPO's advantages of a batch of step rows.

The batch is laid out as verl-agent's multi-turn rollout leaves it: one row per environment
step, a left-padded prompt and a right-padded response of random tokens, the step columns in
``non_tensor_batch`` (``uid``, ``traj_uid``, ``anchor_obs``, ``rewards``, ``is_action_valid``,
``active_masks``) and each row's episode reward on its last response token (no invalid-action
penalty).
:func:`training.verl.compute_advantage` sets its advantages; then verl's own actor worker
(``ActorRolloutRefWorker(role="actor")``: its FSDP2 engine, ``ppo_loss``, AdamW) computes the
old log-probs and takes one PPO step on the batch as it comes out, as ``RayPPOTrainer`` drives
the worker (``_compute_old_log_prob``, ``_update_actor``) minus Ray.

The worker runs in a child process (this file run as a script, :func:`main`) on verl's CPU
platform (``VERL_PLATFORM=cpu``: :mod:`training.verl.cpu`, which the plugin registers when
verl is imported, with the worker's process group on gloo): the platform and the process
group last for the life of a process.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.verl

VOCAB = 128
PROMPT_LEN = 8
RESPONSE_LEN = 6
#: Rows per micro batch in the worker; the mini batch is the whole batch (one optimizer step).
MICRO_BATCH = 6
#: Each group (uid): its episodes as (number of steps, won). A won episode's last step earns
#: 10.0; every other step 0.
GROUPS = {
    "u0": [(2, True), (3, False), (4, False)],
    "u1": [(4, True), (3, True), (2, False)],
}
ALGORITHM = {"adv_estimator": "gigpo", "gamma": 0.95, "gigpo": {"mode": "mean_norm"}}
#: How long one child may take (it takes about 10 s on 2 cores).
CHILD_TIMEOUT_S = 240


def save_tiny_qwen2(path: Path) -> Path:
    """A random 2-layer Qwen2 (91K parameters) saved at ``path``; no tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path


def step_batch(seed: int = 0) -> Any:
    """A verl ``DataProto`` of step rows (:data:`GROUPS`) as verl-agent's rollout lays them out.

    Episode ``t`` of a group visits states ``s0, s1, ...`` except that a lost episode's later
    steps are in states of its own, so step groups (equal ``anchor_obs``) have 1 to 3 members.
    """
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    columns: dict[str, list[Any]] = {
        key: [] for key in ("uid", "traj_uid", "anchor_obs", "rewards", "is_action_valid")
    }
    scores = []
    for uid, episodes in GROUPS.items():
        for t, (steps, won) in enumerate(episodes):
            rewards = [10.0 if won and k == steps - 1 else 0.0 for k in range(steps)]
            for k in range(steps):
                columns["uid"].append(uid)
                columns["traj_uid"].append(f"{uid}-t{t}")
                columns["anchor_obs"].append(f"s{k}" if won or k < 2 else f"s{k}-{uid}-t{t}")
                columns["rewards"].append(rewards[k])
                columns["is_action_valid"].append(k != 1 or won)
                scores.append(sum(rewards))
    rows = len(scores)
    prompt_pad = torch.randint(0, 3, (rows,), generator=gen)
    response_len = torch.randint(2, RESPONSE_LEN + 1, (rows,), generator=gen)
    positions = torch.arange(PROMPT_LEN)
    prompt_mask = (positions >= prompt_pad[:, None]).long()
    response_mask = (torch.arange(RESPONSE_LEN) < response_len[:, None]).long()
    prompts = torch.randint(3, VOCAB, (rows, PROMPT_LEN), generator=gen) * prompt_mask
    responses = torch.randint(3, VOCAB, (rows, RESPONSE_LEN), generator=gen) * response_mask
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    token_level_rewards = torch.zeros(rows, RESPONSE_LEN)
    token_level_rewards[torch.arange(rows), response_len - 1] = torch.tensor(scores)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "token_level_rewards": token_level_rewards,
        },
        non_tensors={
            **{key: np.array(values, dtype=object) for key, values in columns.items()},
            "active_masks": np.ones(rows, dtype=bool),
        },
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_actor_step(batch: Any, model_dir: Path, folder: Path) -> dict[str, Any]:
    """One update of verl's actor on ``batch`` in a child process: :func:`main`'s report."""
    batch.save_to_disk(folder / "batch.pkl")
    env = {
        **os.environ,
        # What torchrun or verl's Ray worker group sets for rank 0 of 1.
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "VERL_LOGGING_LEVEL": "WARN",
        "VERL_PLATFORM": "cpu",  # the plugin's CPU platform (training/verl/cpu.py)
    }
    done = subprocess.run(
        [sys.executable, __file__, str(folder / "batch.pkl"), str(model_dir), str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((folder / "report.json").read_text())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture(scope="module")
def advantaged_batch() -> Any:
    from training.verl import compute_advantage

    return compute_advantage(step_batch(), ALGORITHM)


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean of ``values`` (N, L) over the tokens where ``mask`` (N, L) is 1."""
    return float((values * mask).sum() / mask.sum())


def test_advantages_are_on_the_response_tokens_only(advantaged_batch: Any) -> None:
    advantages = advantaged_batch.batch["advantages"]
    on_response = advantaged_batch.batch["response_mask"].bool()
    assert advantages.shape == (len(advantaged_batch), RESPONSE_LEN)
    assert (advantages[on_response] != 0).all()
    assert (advantages[~on_response] == 0).all()
    per_row = [advantages[row, on_response[row]] for row in range(len(advantaged_batch))]
    assert all((values == values[0]).all() for values in per_row), "one advantage per step"
    # Row 0 is the first step of u0's won episode, row 2 the first step of a lost one.
    assert per_row[0][0] > 0 > per_row[2][0]


def test_verl_actor_steps_on_gigpo_advantages(
    advantaged_batch: Any, model_dir: Path, tmp_path: Path
) -> None:
    report = run_actor_step(advantaged_batch, model_dir, tmp_path)
    # One value per optimizer step; the mini batch is the whole batch, so there is one.
    metrics = {key: value for key, (value,) in report["metrics"].items()}
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    # The old log-probs come from the same weights, so every ratio is 1 and verl's token-mean
    # PPO loss is minus the token mean of the advantages.
    expected = -token_mean(
        advantaged_batch.batch["advantages"], advantaged_batch.batch["response_mask"]
    )
    assert expected != 0
    assert metrics["actor/pg_loss"] == pytest.approx(expected, rel=1e-4)
    assert metrics["actor/loss"] == pytest.approx(expected, rel=1e-4)
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/grad_norm"] > 0
    assert report["changed"] == report["total"] > 0


def test_verl_actor_stands_still_on_zero_advantages(
    advantaged_batch: Any, model_dir: Path, tmp_path: Path
) -> None:
    batch = advantaged_batch.select(deepcopy=True)
    batch.batch["advantages"] = torch.zeros_like(batch.batch["advantages"])
    batch.batch["returns"] = torch.zeros_like(batch.batch["returns"])
    report = run_actor_step(batch, model_dir, tmp_path)
    metrics = {key: value for key, (value,) in report["metrics"].items()}
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    assert metrics["actor/pg_loss"] == 0.0
    assert metrics["actor/grad_norm"] == 0.0
    # No entropy bonus, no KL loss, no weight decay: only the advantages move AdamW.
    assert report["changed"] == 0 < report["total"]


# -- the child process --------------------------------------------------------------------


def actor_config(model_dir: str, rows: int) -> Any:
    """verl's ``ppo_trainer`` config (composed by Hydra as ``main_ppo`` does) for one PPO step
    on ``rows`` step rows with the tiny model, on CPU."""
    from hydra import compose, initialize_config_dir
    from verl.trainer import main_ppo

    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "+actor_rollout_ref.model.load_tokenizer=False",
        # verl's default is flash-attn, which needs a GPU.
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        # torch's FSDP1 refuses CPU parameters; FSDP2 (fully_shard) takes them.
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO_BATCH}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={MICRO_BATCH}",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        # Only the policy gradient moves the weights, so zero advantages must leave them.
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.use_kl_loss=False",
    ]
    folder = Path(main_ppo.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Each parameter, whole (FSDP2 shards them into DTensors), as a float32 copy."""
    from torch.distributed.tensor import DTensor

    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().clone()
        for name, p in module.named_parameters()
    }


def main(batch_path: str, model_dir: str, folder: str) -> None:
    """Compute the old log-probs and update verl's actor once on the batch at ``batch_path``;
    write the update's metrics and how the weights moved to ``folder/report.json``."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.py_functional import rename_dict
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    batch = DataProto.load_from_disk(batch_path)
    config = actor_config(model_dir, len(batch))
    actor = config.actor_rollout_ref.actor
    worker = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
    worker.init_model()
    batch.meta_info["temperature"] = config.actor_rollout_ref.rollout.temperature

    # RayPPOTrainer._compute_old_log_prob
    batch_td = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(batch_td, calculate_entropy=True, compute_loss=False)
    output = worker.compute_log_prob(batch_td)
    log_probs = no_padding_2_padding(tu.get(output, "log_probs"), batch_td)
    batch.batch["old_log_probs"] = log_probs.float()

    # RayPPOTrainer._update_actor
    batch.meta_info["multi_turn"] = config.actor_rollout_ref.rollout.multi_turn.enable
    batch_td = left_right_2_no_padding(batch.to_tensordict())
    mini_batch = actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    tu.assign_non_tensor(
        batch_td,
        calculate_entropy=actor.calculate_entropy or actor.entropy_coeff != 0.0,
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=mini_batch,
        mini_batch_size=mini_batch,
        epochs=actor.ppo_epochs,
        seed=actor.data_loader_seed,
        dataloader_kwargs={"shuffle": actor.shuffle},
        compute_loss=True,
    )
    before = parameters(worker.actor.engine.module)
    metrics = tu.get(worker.update_actor(batch_td), "metrics")
    after = parameters(worker.actor.engine.module)

    report = {
        # As RayPPOTrainer._update_actor names them; a list of one value per optimizer step.
        "metrics": {
            key: [float(value) for value in values]
            for key, values in rename_dict(metrics, "actor/").items()
        },
        "changed": sum(not torch.equal(before[name], after[name]) for name in before),
        "total": len(before),
    }
    (Path(folder) / "report.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])

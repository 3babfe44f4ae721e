"""verl-agent's recipe per environment, and the batch sizes it makes in verl 0.9.1's counting.

In the step layout a verl row is one environment step, and an episode has as many rows as it
has steps. verl 0.9.1's v1 trainer counts its batch sizes so:

* ``data.train_batch_size``: tasks (dataset rows, prompt groups) a training step; each is
  played ``actor_rollout_ref.rollout.n`` times (the group), and every episode adds one row
  per step, so a training step holds ``tasks x n`` episodes and between ``tasks x n`` and
  ``tasks x n x max_steps`` rows;
* ``actor_rollout_ref.actor.ppo_mini_batch_size``: an optimizer step takes
  ``ppo_mini_batch_size x rollout.n`` **rows** (``trainer_base._update_actor``; the worker
  splits the batch into mini-batches of that many rows, ``engine_workers.train_mini_batch``),
  so a training step takes ``ceil(rows / (ppo_mini_batch_size x n))`` optimizer steps. verl
  first pads the batch with masked rows (no loss) to a multiple of that and of the GPU count
  (``padding_utils.upsample_batch_to_divisible_size``);
* micro-batches (gradient accumulation, and the log-prob passes of the actor and the
  reference) are by tokens here (``use_dynamic_bsz``): at most ``*_max_token_len_per_gpu``
  tokens a GPU, whatever the rows' lengths.

verl-agent (GiGPO's official code, an older verl) keeps ``actor_rollout_ref.rollout.n`` at 1
and the group in ``env.rollout.n``, so its ``ppo_mini_batch_size`` is in rows: 256 on ALFWorld
is 256 step rows an optimizer step. :func:`batch_overrides` sets verl 0.9.1's keys so a run
takes what verl-agent's script takes: the same tasks and group a training step, the same
rows an optimizer step (``ppo_mini_batch_size = rows / n``, rounded to a multiple that the
group and the GPUs divide), and micro-batches of at most the tokens verl-agent's largest
micro-batch holds (its rows per micro-batch x the longest prompt and answer). Fixed
micro-batches cannot express it: verl 0.9.1 refuses ``train_batch_size`` below
``ppo_mini_batch_size`` (16 < 32 on ALFWorld) unless micro-batches are by tokens.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """An env's run in verl-agent's example script (``examples/gigpo_trainer/run_*.sh`` at
    verl-agent 1df19bd): rows are environment steps."""

    prompt_tokens: int  #: data.max_prompt_length
    history_length: int  #: env.history_length, the K past steps in each prompt
    tasks: int  #: data.train_batch_size (verl-agent's train_data_size)
    group_size: int  #: env.rollout.n
    mini_batch_rows: int  #: actor.ppo_mini_batch_size: step rows an optimizer step
    micro_batch_rows: int  #: actor.ppo_micro_batch_size_per_gpu
    log_prob_rows: int  #: rollout and ref log_prob_micro_batch_size_per_gpu
    script: str  #: verl-agent's script


RECIPES = {
    "gigpo/ALFWorld-v0": Recipe(2048, 2, 16, 8, 256, 32, 32, "run_alfworld.sh"),
    "gigpo/WebShop-v0": Recipe(4096, 2, 16, 8, 64, 8, 16, "run_webshop.sh"),
    "gigpo/Sokoban-v0": Recipe(1024, 2, 32, 8, 64, 8, 16, "run_sokoban.sh"),
    "gigpo/SearchQA-v0": Recipe(4096, 4, 256, 5, 512, 16, 32, "run_search.sh"),
    "gigpo/NumberLine-v0": Recipe(1024, 2, 16, 8, 16, 4, 8, "run_numberline.sh"),
    "gigpo/EZPoints-v0": Recipe(1024, 2, 16, 8, 128, 8, 16, "run_ezpoints.sh"),
    "gigpo/Blackjack-v0": Recipe(1024, 2, 32, 8, 32, 8, 16, "run_blackjack.sh"),
}
#: The other envs (Points24): EZPoints' script, the nearest game.
DEFAULT_RECIPE = RECIPES["gigpo/EZPoints-v0"]


def recipe(env_id: str) -> Recipe:
    """The recipe of ``env_id`` (:data:`DEFAULT_RECIPE` for an env verl-agent has none for)."""
    return RECIPES.get(env_id, DEFAULT_RECIPE)


def mini_batch_size(rows: int, group_size: int, gpus: int) -> int:
    """verl 0.9.1's ``ppo_mini_batch_size`` for about ``rows`` step rows an optimizer step:
    ``rows / group_size``, with ``ppo_mini_batch_size x group_size`` the multiple of both the
    group and the GPU count (verl's worker splits a mini-batch evenly over the GPUs) nearest
    to ``rows`` (the larger on a tie), at least one."""
    step = math.lcm(group_size, gpus)
    below = max(step, rows // step * step)
    above = below + step
    best = above if rows - below >= above - rows else below
    return best // group_size


def batch_overrides(
    env_id: str, group_size: int, gpus: int, prompt_tokens: int, response_tokens: int
) -> dict[str, str]:
    """verl's batch keys for a run of ``env_id`` as verl-agent's script runs it (module doc):
    the tasks a step, the rows an optimizer step, micro-batches by tokens."""
    r = recipe(env_id)
    sequence = prompt_tokens + response_tokens
    return {
        "data.train_batch_size": str(r.tasks),
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(
            mini_batch_size(r.mini_batch_rows, group_size, gpus)
        ),
        "actor_rollout_ref.actor.use_dynamic_bsz": "True",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": str(r.micro_batch_rows * sequence),
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "True",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": str(r.log_prob_rows * sequence),
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "True",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": str(r.log_prob_rows * sequence),
    }


def episode_steps(env_id: str, kwargs: dict[str, Any]) -> int | None:
    """The most steps an episode of ``env_id`` takes (its ``max_steps``: given, registered,
    or the env's default); None where it cannot be read without building the env."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    given = kwargs.get("max_steps")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    spec = gym.registry.get(env_id)
    if spec is None:
        return None
    registered = (spec.kwargs or {}).get("max_steps")
    if isinstance(registered, int) and registered > 0:
        return registered
    try:
        entry = spec.entry_point
        cls = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
        default = inspect.signature(cls).parameters["max_steps"].default
    except (ImportError, KeyError, TypeError, ValueError, AttributeError):
        return None
    return default if isinstance(default, int) and default > 0 else None


def batch_plan(resolved: dict[str, str], max_steps: int | None) -> list[str]:
    """What a training step of the resolved run holds, in lines for the dry run: episodes,
    step rows, optimizer steps, micro-batch tokens (verl's counting, module doc); one line
    saying why where a size is no positive integer (verl's checks name it)."""
    try:
        tasks, n, mini, per_node, nodes = (
            _positive(resolved, key) for key in (
                "data.train_batch_size", "actor_rollout_ref.rollout.n",
                "actor_rollout_ref.actor.ppo_mini_batch_size", "trainer.n_gpus_per_node",
                "trainer.nnodes",
            )
        )  # fmt: skip
    except ValueError as exc:
        return [f"# batch: not counted ({exc})"]
    gpus = per_node * nodes
    episodes, mini_rows = tasks * n, mini * n
    if max_steps is None:
        rows = f"{episodes:,} or more step rows (one per env step)"
        updates = f"ceil(rows / {mini_rows:,}) optimizer steps"
    else:
        most = episodes * max_steps
        rows = (
            f"{episodes:,} to {most:,} step rows (one per env step, {max_steps} at most an episode)"
        )
        updates = f"1 to {math.ceil(most / mini_rows):,} optimizer steps"
    lines = [
        f"# batch: {tasks} tasks x {n} episodes = {episodes:,} episodes a training step; {rows}",
        f"# update: {mini_rows:,} step rows an optimizer step (ppo_mini_batch_size {mini} x "
        f"rollout.n {n}); {updates} a training step; rows padded (masked) to a multiple of "
        f"{math.lcm(mini_rows, gpus):,}",
    ]
    if resolved.get("actor_rollout_ref.actor.use_dynamic_bsz", "").lower() == "true":
        update = _tokens(resolved, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
        log_probs = _tokens(resolved, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu")
        lines.append(
            f"# micro-batches: by tokens, up to {update} a GPU (update), {log_probs} (log-probs)"
        )
    return lines


def _positive(resolved: dict[str, str], key: str) -> int:
    text = resolved.get(key, "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{key}={text[:40]!r} is no integer") from None
    if value < 1:
        raise ValueError(f"{key}={value} is below 1")
    return value


def _tokens(resolved: dict[str, str], key: str) -> str:
    text = resolved.get(key, "?")
    return f"{int(text):,}" if text.isdigit() else text

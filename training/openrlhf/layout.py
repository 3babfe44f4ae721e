"""Which sample layout a run uses, and the sizes that follow from it (pure).

``--gigpo.layout step`` (one OpenRLHF sample per env step) is the default with gigpo_algo's
estimators; ``episode`` (one sample per episode, one growing sequence) is the only layout of
OpenRLHF's own estimators. gigpo_algo's estimators run under both: every one reads the
batch's turns as step records in rollout order, whatever the samples (HGPO's history is the
earlier turns of the same episode; GraphGPO's graph edges are each turn's state and the
state it led to, recorded by the executor in either layout). Under the episode layout the
policy sees the whole episode, so HGPO's ``history_length`` keeps its own default (2) rather
than the step layout's prompt window. Under the step layout every step's prompt is the env's history
prompt with the last ``--history_length`` steps, at most ``--gigpo.max_prompt_tokens``
tokens, so ``--data.max_len`` must hold that prompt plus ``--env.max_new_tokens``; the
defaults per env are :data:`ENV_DEFAULTS`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from gigpo_algo.estimators import ESTIMATORS
from training.env_tasks import LAYOUTS
from training.openrlhf.samples import padding_multiple


class UsageError(ValueError):
    """A flag combination GiGPO on OpenRLHF cannot run with."""


@dataclass(frozen=True)
class EnvDefaults:
    """The step layout's settings of one environment, from the GiGPO paper and verl-agent's
    scripts (the env's own ``max_steps`` default is the paper's episode length)."""

    history_length: int
    max_prompt_tokens: int


#: Per env: ALFWorld 50 steps (its own default), K = 2, prompts up to 2,048 tokens (the
#: paper); WebShop 15 steps, K = 2, 4,096 (verl-agent's WebShop runs); Sokoban 15 steps,
#: K = 2; search 4 turns, K = 4 (verl-agent's search runs); the small games K = 2.
ENV_DEFAULTS: dict[str, EnvDefaults] = {
    "gigpo/ALFWorld-v0": EnvDefaults(history_length=2, max_prompt_tokens=2048),
    "gigpo/WebShop-v0": EnvDefaults(history_length=2, max_prompt_tokens=4096),
    "gigpo/Sokoban-v0": EnvDefaults(history_length=2, max_prompt_tokens=1024),
    "gigpo/SearchQA-v0": EnvDefaults(history_length=4, max_prompt_tokens=4096),
}
OTHER_ENV_DEFAULTS = EnvDefaults(history_length=2, max_prompt_tokens=1024)
#: OpenRLHF 0.11.2's own advantage estimators: the choices of its
#: ``--algo.advantage.estimator`` (``openrlhf/cli/train_ppo_ray.py``; a test of the openrlhf
#: tox env reads them there). Its ``rloo`` is taken by gigpo_algo's.
OPENRLHF_ESTIMATORS = (
    "gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce",
)  # fmt: skip
#: The seeds a task may have: ``[0, 2**32 - 1]``, as the local trainer's ``run.seed``
#: (``training.local.checks.MAX_SEED``): every task's seed, ``--env.seed`` to
#: ``--env.seed + --env.num_tasks - 1``, is in it.
MAX_SEED = 2**32 - 1
#: The most tasks a run's dataset holds (``--env.num_tasks``): 1,000,000, as ``gigpo-verl``'s
#: (``training.verl.launch.MAX_COUNT``; Search-R1's 169,615 questions are the largest set
#: here), about 1,000 times the default. Each is an object in memory and a line of
#: ``tasks.jsonl``: a million resolve in about 4 s and 260 MB; 10**9 would never finish.
MAX_TASKS = 1_000_000
#: The most nodes, GPUs per node, engines or ranks of a parallel group a flag may name.
MAX_DEVICES = 1024
#: The longest ``--gigpo.env_timeout_s``: a day (an env call past it is stuck).
MAX_ENV_TIMEOUT_S = 86_400.0
#: ``flag -> (low, high)``: every integer flag the launcher reads, ours and OpenRLHF's. The
#: local trainer's bound of the same setting where it has one (``training.local.checks.LIMITS``:
#: ``rollout.max_new_tokens``, ``env.group_size``, ``env.history_length``,
#: ``rollout.max_prompt_tokens``, ``run.threads``, ``run.save_rollouts_every``,
#: ``run.rollout_max_chars``, ``algo.minibatch_size``); ``--data.max_len`` holds one step.
FLAG_BOUNDS: dict[str, tuple[int, int]] = {
    "--env.num_tasks": (1, MAX_TASKS),
    "--env.seed": (0, MAX_SEED),
    "--env.max_new_tokens": (1, 32_768),
    "--group_size": (2, 1024),
    "--history_length": (0, 1000),
    "--gigpo.max_prompt_tokens": (1, 1_048_576),
    "--gigpo.env_workers": (0, 1024),
    "--gigpo.save_rollouts_every": (0, 10_000_000),
    "--gigpo.rollout_max_chars": (0, 100_000_000),
    "--data.max_len": (1, 1_048_576 + 32_768),
    "--train.batch_size": (1, 1_000_000),
    "--train.micro_batch_size": (1, 1_000_000),
    "--rollout.micro_batch_size": (1, 1_000_000),
    **{
        flag: (1, MAX_DEVICES)
        for flag in (
            "--actor.num_nodes",
            "--actor.num_gpus_per_node",
            "--ref.num_nodes",
            "--ref.num_gpus_per_node",
            "--vllm.num_engines",
            "--vllm.tensor_parallel_size",
            "--ds.ring_attn_size",
            "--ds.tensor_parallel_size",
        )  # fmt: skip
    },
}
#: Our integer flags (:data:`FLAG_BOUNDS`) -> their attribute in the parsed namespace;
#: ``--gigpo.env_workers`` (``auto`` or an int) is read apart.
OUR_NUMBERS = {
    "--env.num_tasks": "num_tasks",
    "--env.seed": "seed",
    "--env.max_new_tokens": "max_new_tokens",
    "--group_size": "group_size",
    "--history_length": "history_length",
    "--gigpo.max_prompt_tokens": "max_prompt_tokens",
    "--gigpo.save_rollouts_every": "save_rollouts_every",
    "--gigpo.rollout_max_chars": "rollout_max_chars",
}
#: OpenRLHF's integer flags the launcher reads (:data:`FLAG_BOUNDS`), checked where given.
THEIR_NUMBERS = tuple(f for f in FLAG_BOUNDS if f not in OUR_NUMBERS and f.startswith(
    ("--data.", "--train.", "--rollout.", "--actor.", "--ref.", "--vllm.", "--ds.")))  # fmt: skip
#: ``--data.max_len`` of the episode layout when none is given.
EPISODE_MAX_LEN = 4096
#: OpenRLHF's learning-rate schedules that stay flat after the warmup.
FLAT_SCHEDULES = ("constant", "constant_with_warmup")


def env_defaults(env_id: str) -> EnvDefaults:
    """The step layout's defaults of ``env_id`` (:data:`ENV_DEFAULTS`)."""
    return ENV_DEFAULTS.get(env_id, OTHER_ENV_DEFAULTS)


def in_bounds(flag: str, value: int) -> int:
    """``value`` if it is in ``flag``'s :data:`FLAG_BOUNDS`, else :class:`UsageError`."""
    low, high = FLAG_BOUNDS[flag]
    if not low <= value <= high:
        side = f">= {low:,}" if value < low else f"<= {high:,}"
        raise UsageError(f"{flag} must be {side} (in [{low:,}, {high:,}]), got {_cut(value)}")
    return value


def _cut(value: int) -> str:
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} digits)"


def check_numbers(ours: argparse.Namespace, theirs: list[str]) -> None:
    """Refuses, naming the flag, an integer flag outside :data:`FLAG_BOUNDS` (ours as parsed,
    OpenRLHF's that the launcher reads where given), and task seeds past :data:`MAX_SEED`."""
    for flag, dest in OUR_NUMBERS.items():
        value = getattr(ours, dest)
        if value is not None:
            in_bounds(flag, value)
    for flag in THEIR_NUMBERS:
        if has_flag(theirs, flag):
            text = flag_value(theirs, flag, "")
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"{flag} must be an int, got {text[:40]!r}") from None
            in_bounds(flag, value)
    if ours.seed + ours.num_tasks - 1 > MAX_SEED:
        raise UsageError(
            f"--env.seed {ours.seed} + --env.num_tasks {ours.num_tasks}: the last task's seed "
            f"would be past {MAX_SEED} (2**32 - 1)"
        )


def check_env(env_id: str) -> None:
    """Refuses an ``--env`` that Gymnasium does not know, listing the registered ``gigpo/``
    ids (importing :mod:`gigpo_envs` registers them; no env is built)."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    try:
        gym.spec(env_id)
    except (gym.error.Error, ModuleNotFoundError, ValueError):
        known = sorted(k for k in gym.registry if k.startswith("gigpo/"))
        raise UsageError(
            f"--env: unknown environment {env_id[:200]!r}; registered: {known}"
        ) from None


def check_estimator(estimator: str) -> None:
    """Refuses an ``--algo.advantage.estimator`` that is neither gigpo_algo's nor one of
    OpenRLHF 0.11.2's own (which its parser would refuse only inside the Ray job).

    Raises:
        UsageError: naming the flag and the valid values.
    """
    if estimator in ESTIMATORS or estimator in OPENRLHF_ESTIMATORS:
        return
    own = [e for e in OPENRLHF_ESTIMATORS if e not in ESTIMATORS]
    raise UsageError(
        f"--algo.advantage.estimator must be one of gigpo_algo's {list(ESTIMATORS)} or "
        f"OpenRLHF 0.11.2's own {own}, got {estimator!r}"
    )


def resolve_layout(ours: argparse.Namespace, theirs: list[str]) -> str:
    """The sample layout: given, else ``step`` for gigpo_algo's estimators and ``episode``
    for OpenRLHF's own; refuses what cannot run."""
    own = ours.estimator not in ESTIMATORS
    layout = ours.layout or ("episode" if own else "step")
    if layout not in LAYOUTS:
        raise UsageError(f"--gigpo.layout must be one of {list(LAYOUTS)}, got {layout!r}")
    if layout == "step" and own:
        raise UsageError(
            f"--gigpo.layout step: OpenRLHF's own --algo.advantage.estimator {ours.estimator} "
            "takes one sample per episode (its baselines reshape the batch into "
            "n_samples_per_prompt samples per prompt); use --gigpo.layout episode, or "
            f"gigpo_algo's {sorted(ESTIMATORS)}"
        )
    return layout


def resolve_sizes(
    ours: argparse.Namespace,
    theirs: list[str],
    layout: str,
    env_kwargs: dict[str, Any],
    warnings: list[str],
) -> tuple[int, int | None]:
    """``(history_length, max_prompt_tokens)`` of the tasks; adds ``--data.max_len`` (and,
    under the step layout, a flat learning-rate schedule) when not given, and refuses a
    ``--data.max_len`` that cannot hold one step."""
    max_new = ours.max_new_tokens
    given_len = flag_value(theirs, "--data.max_len", "")
    if given_len:
        try:
            max_len = int(given_len)
        except ValueError:
            raise UsageError(f"--data.max_len must be an int, got {given_len!r}") from None
    if layout == "episode":
        if not given_len:
            max_len = EPISODE_MAX_LEN
            theirs.extend(["--data.max_len", str(max_len)])
        if ours.max_prompt_tokens is not None:
            raise UsageError("--gigpo.max_prompt_tokens is the step layout's prompt cap")
        steps = _max_steps(ours.env_id, env_kwargs)
        if steps is not None and steps * max_new > max_len:
            warnings.append(
                f"--gigpo.layout episode: an episode of {ours.env_id} may play {steps} steps of "
                f"up to {max_new} response tokens ({steps * max_new:,} tokens before any "
                f"observation), more than --data.max_len {max_len}: the token budget may end "
                "episodes before the env does (counted in gigpo/budget_ended); "
                "--gigpo.layout step trains every step"
            )
        return ours.history_length or 0, None
    defaults = env_defaults(ours.env_id)
    history = defaults.history_length if ours.history_length is None else ours.history_length
    cap = ours.max_prompt_tokens
    if cap is not None and cap < 1:
        raise UsageError("--gigpo.max_prompt_tokens must be >= 1")
    if not given_len:
        cap = cap or defaults.max_prompt_tokens
        max_len = cap + max_new
        theirs.extend(["--data.max_len", str(max_len)])
    elif cap is None:
        cap = min(defaults.max_prompt_tokens, max_len - max_new)
    if cap < 1 or cap + max_new > max_len:
        raise UsageError(
            f"--data.max_len {max_len} cannot hold one step of the step layout: a prompt of up "
            f"to {cap} tokens (--gigpo.max_prompt_tokens) and a response of up to {max_new} "
            f"(--env.max_new_tokens); give --data.max_len {max(cap, 1) + max_new} or lower the cap"
        )
    try:  # OpenRLHF's defaults where a flag is not given
        padding_multiple(
            int(flag_value(theirs, "--actor.num_nodes", "1"))
            * int(flag_value(theirs, "--actor.num_gpus_per_node", "8"))
            // int(flag_value(theirs, "--ds.ring_attn_size", "1"))
            // int(flag_value(theirs, "--ds.tensor_parallel_size", "1")),
            int(flag_value(theirs, "--train.batch_size", "128")),
            int(flag_value(theirs, "--train.micro_batch_size", "1")),
            int(flag_value(theirs, "--rollout.micro_batch_size", "1")),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    schedule = flag_value(theirs, "--actor.lr_scheduler", "")
    if not schedule:
        theirs.extend(["--actor.lr_scheduler", "constant_with_warmup"])
    elif schedule not in FLAT_SCHEDULES:
        warnings.append(
            f"--actor.lr_scheduler {schedule} with --gigpo.layout step: OpenRLHF sizes the "
            "schedule in optimizer steps from the number of prompts (one sample per "
            "episode), and a step-layout batch has one sample per env step, so the schedule "
            "ends after a fraction of the run; constant_with_warmup (the default here, as "
            "the paper's constant learning rate) has no end"
        )
    return history, cap


def _max_steps(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The env's step limit: given in ``env_kwargs``, else read from a built env, else (no
    data on this machine) the default of its class and registration; None when unknown."""
    import inspect

    import gymnasium as gym

    import gigpo_envs  # noqa: F401

    given = env_kwargs.get("max_steps")
    if isinstance(given, int) and not isinstance(given, bool):
        return given
    try:
        env = gym.make(env_id, **env_kwargs)
    except Exception:  # noqa: BLE001  (e.g. ALFWorld's games are not on the launch machine)
        env = None
    if env is not None:
        try:
            return int(env.unwrapped.max_steps)
        except (AttributeError, TypeError, ValueError):
            return None
        finally:
            env.close()
    try:
        spec = gym.spec(env_id)
        if "max_steps" in spec.kwargs:
            return int(spec.kwargs["max_steps"])
        default = inspect.signature(gym.envs.registration.load_env_creator(spec.entry_point))
        value = default.parameters["max_steps"].default
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    except Exception:  # noqa: BLE001  (an env without a max_steps argument: no estimate)
        return None


def has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def flag_value(args: list[str], flag: str, default: str) -> str:
    """The value of ``flag`` in ``args`` (the last one, as argparse takes), else ``default``."""
    value = default
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            value = args[i + 1]
    return value


#: OpenRLHF's flags that may name a packaged model (:mod:`training.packaged`).
PACKAGED_FLAGS = ("--actor.model_name_or_path", "--critic.model_name_or_path")


def resolve_packaged(args: list[str], folder: str) -> tuple[list[str], tuple]:
    """``args`` with each packaged model name (``tiny-random``, ``smollm2``) of
    :data:`PACKAGED_FLAGS` replaced by the path the run makes it at, and ``((name, path),
    ...)`` of those to make (the run's folder ``folder`` holds ``tiny-random``)."""
    from training.packaged import PACKAGED_MODELS, packaged_path

    out, made = list(args), []
    for flag in PACKAGED_FLAGS:
        name = flag_value(out, flag, "")
        if name not in PACKAGED_MODELS:
            continue
        path = packaged_path(name, folder)
        out = [a for i, a in enumerate(out) if not _is_flag_at(out, i, flag)]
        out += [flag, str(path)]
        made.append((name, path))
    return out, tuple(made)


def _is_flag_at(args: list[str], i: int, flag: str) -> bool:
    """Whether ``args[i]`` is ``flag`` (``flag=value``), or the value after a bare ``flag``."""
    return args[i] == flag or args[i].startswith(flag + "=") or (i > 0 and args[i - 1] == flag)

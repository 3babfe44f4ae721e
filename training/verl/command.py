"""``gigpo-verl``'s command line to a resolved verl command: our flags and verl's Hydra
overrides, the defaults (one node of 8 GPUs, Qwen2.5-1.5B-Instruct, verl-agent's recipe for
the env: :mod:`training.verl.recipes`), on ``trainer.device=cpu`` the CPU's
(:data:`training.verl.cpu.CPU_OVERRIDES`), and the estimator's settings, each checked here
before verl's own checks (:mod:`training.verl.checks`) run on the whole."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from training.packaged import PACKAGED_MODELS, packaged_path
from training.verl import recipes
from training.verl.config import VERL_ESTIMATORS, algorithm_settings

#: verl 0.9.1's own estimators (its ``AdvantageEstimator`` and registry); a test checks
#: this list against the installed verl.
VERL_OWN_ESTIMATORS = (
    "gae", "gdpo", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo",
    "optimal_token_baseline", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
    "rloo", "rloo_vectorized", "tir_optimal_token_baseline",
)  # fmt: skip
#: Our flags, with their defaults (None: per env, :mod:`training.verl.recipes`, or under
#: ``--run_dir``).
FLAGS: dict[str, Any] = {
    "--env": "gigpo/Sokoban-v0",
    "--env.kwargs": "{}",
    "--env.num_tasks": 256,
    "--env.val_tasks": 32,
    "--env.max_new_tokens": 512,
    "--env.workers": None,
    "--group_size": None,
    "--history_length": None,
    "--run_dir": "runs/verl_gigpo",
    "--dataset_dir": None,
}
#: The estimators' discount when ``algorithm.gamma`` is not given (verl's own default is
#: 1.0; verl-agent's GiGPO and HGPO scripts set 0.95, GraphGPO's ALFWorld script 0.1).
DEFAULT_GAMMA = {"gigpo": 0.95, "hgpo": 0.95, "graphgpo": 0.1}
#: The most tasks a launch takes: a dataset row is a task, and Search-R1's training set, the
#: largest here, has 169,615 questions (training seeds stay below the validation ones).
MAX_COUNT = 1_000_000
#: ``flag -> (low, high)`` of our integer flags: the task counts up to :data:`MAX_COUNT`, the
#: rest the local trainer's bound of the same setting (``training.local.checks.LIMITS``).
BOUNDS = {
    "--env.num_tasks": (1, MAX_COUNT),
    "--env.val_tasks": (1, MAX_COUNT),
    "--env.max_new_tokens": (1, 32_768),
    "--group_size": (1, 1024),
    "--history_length": (0, 1000),
    "--env.workers": (0, 1024),
}
#: verl's integer keys this launcher reads, with their upper bounds (at least 1 each).
INT_KEYS = {
    "data.max_prompt_length": 1 << 20,
    "data.max_response_length": 1 << 20,
    "data.train_batch_size": MAX_COUNT,
    "trainer.n_gpus_per_node": 1024,
    "trainer.nnodes": 1024,
    "actor_rollout_ref.actor.ppo_mini_batch_size": MAX_COUNT,
}
#: verl's keys that name a folder or a file: a relative one is made absolute (verl's Ray
#: workers do not start in the launcher's folder).
PATH_KEYS = (
    "data.train_files", "data.val_files", "trainer.default_local_dir",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
)  # fmt: skip
#: verl's key of the group size, which ``--group_size`` sets.
GROUP_KEY = "actor_rollout_ref.rollout.n"
#: Keys our defaults add that verl's config does not have (Hydra's ``+``).
NEW_KEYS = {
    "actor_rollout_ref.model.override_config.attn_implementation",
    "actor_rollout_ref.rollout.enable_sleep_mode",
    "ray_kwargs.ray_init.num_gpus",
}
#: Values that Hydra and OmegaConf read as true for a boolean setting.
TRUE_WORDS = ("true", "yes", "on", "1", "y")
USAGE = """usage: gigpo-verl [--dry-run] [--env ID] [--env.kwargs JSON] [--env.num_tasks N]
                  [--env.val_tasks N] [--env.max_new_tokens N] [--env.workers N]
                  [--group_size N] [--history_length K] [--run_dir DIR] [--dataset_dir DIR]
                  [verl's key=value ...]
GiGPO, HGPO and GraphGPO on verl 0.9.1 (docs/verl.md). trainer.device=cpu runs on a CPU
machine; actor_rollout_ref.model.path=tiny-random or smollm2 takes a packaged model."""


class UsageError(ValueError):
    """A flag or an override the launcher refuses (exit 2)."""


def parse(argv: list[str]) -> tuple[dict[str, Any], dict[str, str], set[str], bool]:
    """``(ours, overrides, added, dry_run)`` of the command line: ``added`` holds the keys
    given with Hydra's ``+``; :class:`UsageError` naming the argument for anything
    malformed."""
    ours = dict(FLAGS)
    overrides: dict[str, str] = {}
    added: set[str] = set()
    dry_run = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--dry-run":
            dry_run = True
        elif arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name not in FLAGS:
                raise UsageError(f"unknown flag {name} (ours: {sorted(FLAGS)}; verl's own "
                                 "settings are Hydra overrides, key=value)")  # fmt: skip
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = argv[i]
            ours[name] = value
        elif "=" in arg and not arg.lstrip("+").startswith("="):
            key, _, value = arg.partition("=")
            bare = key.lstrip("+")
            if not bare or any(c.isspace() for c in bare) or bare.startswith("~"):
                raise UsageError(f"{arg[:60]!r} is no Hydra override key=value")
            overrides[bare] = value
            if key != bare:
                added.add(bare)
        else:
            raise UsageError(f"{arg!r} is neither one of our flags nor a Hydra override key=value")
        i += 1
    for name, (low, high) in BOUNDS.items():
        value = ours[name]
        if value is None:
            continue
        try:
            ours[name] = int(value)
        except (TypeError, ValueError):
            raise UsageError(f"{name} must be an int, got {str(value)[:40]!r}") from None
        if not low <= ours[name] <= high:
            raise UsageError(f"{name} must be in [{low}, {high}], got {str(value)[:40]}")
    for name in ("--run_dir", "--dataset_dir"):
        if ours[name] is not None and not str(ours[name]).strip():
            raise UsageError(f"{name} must name a folder, got an empty path")
    from training.guarded import GuardError, ParseError, load_json

    try:  # the guarded reader: size, depth, integer digits, no NaN
        kwargs = load_json(ours["--env.kwargs"], "--env.kwargs")
    except ParseError as exc:
        raise UsageError(f"--env.kwargs is not JSON: {exc}") from None
    except GuardError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(kwargs, dict):
        raise UsageError("--env.kwargs must be a JSON object")
    ours["--env.kwargs"] = kwargs
    return ours, overrides, added, dry_run


def folders(ours: dict[str, Any]) -> tuple[Path, Path]:
    """The run's folder and the datasets' (``RUN_DIR/data`` unless ``--dataset_dir``), both
    absolute: verl's processes start elsewhere."""
    run_dir = Path(ours["--run_dir"]).expanduser().absolute()
    data = ours["--dataset_dir"]
    return run_dir, Path(data).expanduser().absolute() if data else run_dir / "data"


def defaults(ours: dict[str, Any], prompt_cap: int) -> dict[str, str]:
    """verl's overrides for a run of ``ours`` that do not depend on the user's (one node of
    8 GPUs, Qwen2.5-1.5B-Instruct, the paper's learning rate and KL loss)."""
    run_dir, data = folders(ours)
    return {
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "val.parquet"),
        "data.prompt_key": "prompt",
        "data.max_prompt_length": str(prompt_cap),
        "data.max_response_length": str(ours["--env.max_new_tokens"]),
        "data.return_raw_chat": "True",
        "actor_rollout_ref.model.path": "Qwen/Qwen2.5-1.5B-Instruct",
        "actor_rollout_ref.actor.optim.lr": "1e-6",
        "actor_rollout_ref.actor.use_kl_loss": "True",
        "actor_rollout_ref.actor.kl_loss_coef": "0.01",
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.rollout.name": "vllm",
        GROUP_KEY: str(ours["--group_size"]),
        "actor_rollout_ref.rollout.agent.default_agent_loop": "gigpo",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.6",
        # the rollout's own log-probs, so that verl reports their gap to the actor's
        # (training/rollout_probs_diff_*, rollout_corr/*): weights that did not sync show
        "actor_rollout_ref.rollout.calculate_log_probs": "True",
        "algorithm.adv_estimator": "gigpo",
        "algorithm.use_kl_in_reward": "False",
        "trainer.n_gpus_per_node": "8",
        "trainer.nnodes": "1",
        "trainer.total_epochs": "1",
        "trainer.logger": "['console']",
        "trainer.project_name": "gigpo_verl",
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        # Hydra's log folder, under the run's and not the current folder's outputs/
        "hydra.run.dir": str(run_dir / "hydra" / "${now:%Y-%m-%d_%H-%M-%S}"),
    }


def resolve(
    ours: dict[str, Any], overrides: dict[str, str], added: set[str] | None = None
) -> tuple[dict[str, str], Any]:
    """The full overrides (defaults the user did not give, then the user's; the CPU's and the
    recipe's batch sizes where the user gave none) and the estimator settings they make
    (None for verl's own estimators); :class:`UsageError`."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)
    from training.verl.cpu import CPU_OVERRIDES

    known = sorted(i for i in gym.registry if i.startswith("gigpo/"))
    if ours["--env"] not in known:
        raise UsageError(f"--env must be one of {known}, got {ours['--env']!r}")
    recipe = recipes.recipe(ours["--env"])
    _group_size(ours, overrides, recipe.group_size)
    if ours["--history_length"] is None:
        ours["--history_length"] = recipe.history_length
    resolved = {**defaults(ours, recipe.prompt_tokens), **overrides}
    if resolved.get("trainer.device", "").strip().lower() == "cpu":
        for key, value in CPU_OVERRIDES.items():
            if key not in overrides:  # the user's own value wins
                resolved[key] = value
    for key, high in INT_KEYS.items():
        if key in resolved:
            _bounded(key, resolved[key], 1, high)
    gpus = _int(resolved.get("trainer.n_gpus_per_node"), 8)
    gpus *= _int(resolved.get("trainer.nnodes"), 1)
    batch = recipes.batch_overrides(
        ours["--env"], ours["--group_size"], max(1, gpus),
        int(resolved["data.max_prompt_length"]), int(resolved["data.max_response_length"]),
    )  # fmt: skip
    for key, value in batch.items():
        resolved.setdefault(key, value)
    if ours["--env.num_tasks"] < int(resolved["data.train_batch_size"]):
        raise UsageError(
            f"--env.num_tasks {ours['--env.num_tasks']} is below data.train_batch_size "
            f"{resolved['data.train_batch_size']}: verl would take no training step"
        )
    _model_path(resolved, ours)
    for key in PATH_KEYS:  # verl's processes start in other folders
        value = resolved.get(key)
        if value and "://" not in value and not value.startswith("$"):
            resolved[key] = str(Path(value).expanduser().absolute())
    _check_sections(resolved)
    estimator = resolved["algorithm.adv_estimator"]
    if estimator not in VERL_ESTIMATORS:
        if estimator not in VERL_OWN_ESTIMATORS:
            raise UsageError(
                f"algorithm.adv_estimator={estimator!r} is neither gigpo_algo's "
                f"{list(VERL_ESTIMATORS)} nor verl 0.9.1's {list(VERL_OWN_ESTIMATORS)}"
            )
        _no_other_settings(resolved, estimator)
        return resolved, None
    resolved.setdefault("algorithm.gamma", str(DEFAULT_GAMMA[estimator]))
    if estimator == "hgpo":  # its deepest level: the prompt's window, as verl-agent ties them
        resolved.setdefault("algorithm.hgpo.history_length", str(ours["--history_length"]))
    if resolved["algorithm.use_kl_in_reward"].strip().lower() in TRUE_WORDS:
        raise UsageError(
            f"algorithm.use_kl_in_reward={resolved['algorithm.use_kl_in_reward']} changes the "
            "reward the gigpo estimators read: use actor_rollout_ref.actor.use_kl_loss=True"
        )
    _no_other_settings(resolved, estimator)
    section: dict[str, Any] = {
        "adv_estimator": estimator,
        "gamma": _value(resolved["algorithm.gamma"]),
    }
    for key, value in resolved.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "algorithm" and parts[1] == estimator:
            section.setdefault(estimator, {})[parts[2]] = _value(value)
    try:
        settings = algorithm_settings(section)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return resolved, settings


def _group_size(ours: dict[str, Any], overrides: dict[str, str], default: int) -> None:
    """``--group_size`` and verl's ``actor_rollout_ref.rollout.n`` are one setting: given
    both, they must agree; the key alone sets it (bounded as the flag)."""
    if GROUP_KEY in overrides:
        low, high = BOUNDS["--group_size"]
        text = overrides[GROUP_KEY]
        try:
            given = int(text)
        except ValueError:
            raise UsageError(f"{GROUP_KEY} must be an int, got {text[:40]!r}") from None
        if not low <= given <= high:
            raise UsageError(f"{GROUP_KEY} (--group_size) must be in [{low}, {high}], got {given}")
        if ours["--group_size"] is not None and ours["--group_size"] != given:
            raise UsageError(
                f"--group_size {ours['--group_size']} and {GROUP_KEY}={given} disagree: give one"
            )
        ours["--group_size"] = given
    elif ours["--group_size"] is None:
        ours["--group_size"] = default


def _bounded(key: str, text: str, low: int, high: int) -> None:
    """``key=text`` must be an integer in [low, high] (:class:`UsageError` naming it)."""
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{key} must be an int, got {text[:40]!r}") from None
    if not low <= value <= high:
        raise UsageError(f"{key} must be in [{low}, {high}], got {value}")


def _int(text: str | None, fallback: int) -> int:
    try:
        return int(str(text))
    except ValueError:
        return fallback  # verl's checks name the bad value


def _model_path(resolved: dict[str, str], ours: dict[str, Any]) -> None:
    """A packaged model's name as the folder the run makes it in (:func:`prepare_model`)."""
    name = resolved["actor_rollout_ref.model.path"]
    if name in PACKAGED_MODELS:
        resolved["actor_rollout_ref.model.path"] = str(packaged_path(name, folders(ours)[0]))


def _check_sections(resolved: dict[str, str]) -> None:
    """An estimator's settings are ``algorithm.<est>.<name>``: a whole section, a deeper key
    or a bare ``algorithm`` is refused by name."""
    for key in resolved:
        parts = key.split(".")
        if parts[0] != "algorithm":
            continue
        if len(parts) == 1:
            raise UsageError(f"{key}: give verl's algorithm settings as algorithm.<name>=value")
        if parts[1] in VERL_ESTIMATORS and len(parts) != 3:
            raise UsageError(f"{key}: the estimator's settings are algorithm.{parts[1]}.<name>")


def _no_other_settings(resolved: dict[str, str], estimator: str) -> None:
    """The settings of an estimator that is not the selected one are refused by name."""
    for key in resolved:
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "algorithm" and parts[1] in VERL_ESTIMATORS:
            if parts[1] != estimator:
                raise UsageError(f"{key} is a setting of {parts[1]}, the estimator is {estimator}")


def _value(text: str) -> Any:
    """A Hydra override's value as YAML reads it (numbers, true/false, null, strings)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def hydra_args(resolved: dict[str, str], added: set[str] | None = None) -> list[str]:
    """The overrides as Hydra's arguments: keys verl's config does not have (the estimators'
    subsections, :data:`NEW_KEYS`, the user's ``+`` keys) get ``+``."""
    args = []
    for key, value in resolved.items():
        parts = key.split(".")
        new = (
            key in NEW_KEYS
            or key in (added or set())
            or (parts[0] == "algorithm" and len(parts) == 3 and parts[1] in VERL_ESTIMATORS)
        )
        args.append(f"{'+' if new else ''}{key}={value}")
    return args


def command(resolved: dict[str, str], python: str, added: set[str] | None = None) -> list[str]:
    """``python -m verl.trainer.main_ppo`` with the overrides (:func:`hydra_args`)."""
    return [python, "-m", "verl.trainer.main_ppo", *hydra_args(resolved, added)]


def run_env(resolved: dict[str, str]) -> dict[str, str]:
    """The environment verl runs in: ours, plus on ``trainer.device=cpu`` the CPU platform's
    variables (:data:`training.verl.cpu.CPU_ENV`) where not set."""
    from training.verl.cpu import CPU_ENV

    env = dict(os.environ)
    if resolved.get("trainer.device", "").strip().lower() == "cpu":
        for key, value in CPU_ENV.items():
            env.setdefault(key, value)
        env["VERL_PLATFORM"] = "cpu"
    return env

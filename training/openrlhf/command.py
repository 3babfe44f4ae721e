"""Our flags for GiGPO on OpenRLHF, separated from OpenRLHF's own, and the resolved command.

``python -m training.openrlhf.train`` takes OpenRLHF 0.11's dotted flags unchanged, plus:

==============================  ===========================================================
``--env``                       environment id (``gigpo/Sokoban-v0``)
``--env.kwargs``                JSON object passed to ``gymnasium.make``
``--env.num_tasks``             tasks (start seeds) in the generated prompt dataset
``--env.seed``                  first task seed
``--env.max_new_tokens``        tokens per response
``--env.format_instruction``    replaces the prompt template's format instruction
``--group_size``                samples per task: sets ``--rollout.n_samples_per_prompt``
``--gigpo.layout``              ``step`` (one OpenRLHF sample per env step, the default with
                                gigpo_algo's estimators) or ``episode`` (one sample per
                                episode, one growing sequence; the only layout of
                                OpenRLHF's own estimators)
``--history_length``            past steps restated in each prompt (K); under the step
                                layout default per env (``layout.ENV_DEFAULTS``), under
                                the episode layout 0
``--gigpo.max_prompt_tokens``   step layout: the longest prompt of a step; default per env,
                                lowered to fit ``--data.max_len`` when that is given
``--gigpo.env_workers``         env worker processes per rollout actor (``auto``: up to 16
                                for CPU-heavy envs, else 0 = threads)
``--gigpo.env_timeout_s``       the longest one env call in a worker may take (default 600;
                                ``none``: no limit); past it the worker is killed and the
                                episode fails with an error naming it
``--gigpo.dataset_dir``         the run's folder: the task dataset, and ``rollouts/``
``--gigpo.save_rollouts_every`` save the step records of every this many training steps
                                for ``gigpo-view`` (default 1; 0 never)
``--gigpo.rollout_max_chars``   characters kept of each saved text (default 2000)
``--gigpo.device``              ``cuda`` (default) or ``cpu``: the whole loop on a CPU
                                machine (:mod:`training.openrlhf.cpu`)
``--algo.gigpo.*``              gigpo_algo's settings, by its names, one flag per
                                critic-free setting of the settings table
                                (:func:`training.settings.flag_settings`): ``gamma``,
                                ``step_weight``, ``norm``, ``episode_stats``,
                                ``similarity``, ``similarity_metric``,
                                ``invalid_penalty``, HGPO's ``history_length`` (default:
                                the step layout's ``--history_length``), ``length_alpha``,
                                ``base_group``, GraphGPO's ``normalize_distance``,
                                ``episode_weight`` (a bool flag alone means true); the
                                table's aliases (verl-agent's ``step_advantage_w``,
                                ``mode`` with ``mean_std_norm`` / ``mean_norm``,
                                ``similarity_thresh``, ``length_weight_alpha``,
                                ``episode_advantage_w``) are flags too
==============================  ===========================================================

``--algo.advantage.estimator`` ``gigpo`` (the default here), ``grpo``, ``rloo``, ``hgpo`` or
``graphgpo`` runs gigpo_algo's estimator of that name on the executor's per-turn records
(one episode score for all); one of OpenRLHF 0.11.2's own others
(:data:`~training.openrlhf.layout.OPENRLHF_ESTIMATORS`) runs untouched, and then no
``--algo.gigpo.*`` flag may be given; any other value is refused before Ray starts.
Everything in this module is pure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gigpo_algo.estimators import ESTIMATORS
from training.env_tasks import Task, task_label
from training.guarded import GuardError, ParseError, load_json
from training.openrlhf.cpu import resolve_device
from training.openrlhf.estimator import FLAG_PREFIX, SETTINGS_ENV, GiGPOSettings
from training.openrlhf.layout import (
    MAX_ENV_TIMEOUT_S,
    UsageError,
    check_env,
    check_estimator,
    check_numbers,
    flag_value,
    has_flag,
    in_bounds,
    resolve_layout,
    resolve_packaged,
    resolve_sizes,
)
from training.openrlhf.modes import check_modes
from training.settings import EstimatorSettings, flag_settings

AGENT_FUNC = Path(__file__).resolve().parent / "agent_func.py"
SETUP_HOOK = "training.openrlhf.patch.setup_worker"
OPENRLHF_MODULE = "openrlhf.cli.train_ppo_ray"
#: OpenRLHF parses the estimator with fixed choices; GiGPO runs under this group estimator's
#: argument checks (it needs n_samples_per_prompt > 1, as GiGPO does) and replaces its math.
CARRIER_ESTIMATOR = "group_norm"
#: The env vars OpenRLHF's own ``ray.init`` sets, kept since ours runs first.
OPENRLHF_ENV_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
}


@dataclass(frozen=True)
class Plan:
    """Everything a run needs: OpenRLHF's argv, our settings, the dataset to write, Ray's
    env, and the warnings to print before it starts."""

    openrlhf_args: list[str]
    settings: GiGPOSettings | None
    dataset_path: Path | None
    tasks: list[Task]
    runtime_env: dict
    layout: str = "step"
    warnings: tuple[str, ...] = ()
    #: packaged models to make before OpenRLHF loads them: ``(name, path)``
    #: (:mod:`training.packaged`)
    packaged: tuple[tuple[str, Path], ...] = ()

    def command(self, python: str = "python") -> list[str]:
        """OpenRLHF's command line as it runs (inside ``training.openrlhf.train``)."""
        return [python, "-m", OPENRLHF_MODULE, *self.openrlhf_args]


def _parser() -> argparse.ArgumentParser:
    # exit_on_error=False: a bad value raises ArgumentError (its message naming the flag),
    # which plan() reports as one line, instead of argparse printing the usage and exiting
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    p.add_argument("--env", dest="env_id", default="gigpo/Sokoban-v0")
    p.add_argument("--env.kwargs", dest="env_kwargs", default="{}")
    p.add_argument("--env.num_tasks", dest="num_tasks", type=int, default=1024)
    p.add_argument("--env.seed", dest="seed", type=int, default=0)
    p.add_argument("--env.max_new_tokens", dest="max_new_tokens", type=int, default=512)
    p.add_argument("--env.format_instruction", dest="format_instruction", default=None)
    p.add_argument("--group_size", type=int, default=None)
    p.add_argument("--history_length", type=int, default=None)
    p.add_argument("--gigpo.layout", dest="layout", default=None)
    p.add_argument("--gigpo.max_prompt_tokens", dest="max_prompt_tokens", type=int, default=None)
    p.add_argument("--gigpo.env_workers", dest="env_workers", default="auto")
    p.add_argument("--gigpo.env_timeout_s", dest="env_timeout_s", default="600")
    # The estimator settings' flags, from their one table (training.settings), by gigpo_algo's
    # names; verl-agent's are aliases (ALIASES), read into the same settings. Values are
    # read as text and converted by the field's type (_flag_value), so that an error names
    # the flag; a bool flag alone means true. (Their dests are prefixed: --history_length,
    # the prompt's window, is not --algo.gigpo.history_length, HGPO's.)
    for f in flag_settings():
        switch = {"nargs": "?", "const": "true"} if _kind(f) is bool else {}
        p.add_argument(FLAG_PREFIX + f.name, dest=f"setting_{f.name}", default=f.default,
                       help=f.metadata["doc"], **switch)  # fmt: skip
        for alias in f.metadata["aliases"]:
            p.add_argument(FLAG_PREFIX + alias, dest=f"alias_{alias}", default=None, **switch)
    p.add_argument("--algo.advantage.estimator", dest="estimator", default="gigpo")
    p.add_argument("--gigpo.dataset_dir", dest="dataset_dir", default="runs/openrlhf_gigpo")
    p.add_argument("--gigpo.save_rollouts_every", dest="save_rollouts_every", type=int, default=1)
    p.add_argument("--gigpo.rollout_max_chars", dest="rollout_max_chars", type=int, default=2000)
    p.add_argument("--gigpo.device", dest="device", default="cuda")
    return p


def plan(argv: list[str]) -> Plan:
    """Splits ``argv`` into our flags and OpenRLHF's, and resolves the run.

    Raises:
        UsageError: bad values, or flags that contradict GiGPO.
    """
    try:
        ours, theirs = _parser().parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise UsageError(str(exc)) from None
    except SystemExit:
        raise UsageError(
            "could not parse the gigpo flags (see the --help of this module)"
        ) from None
    try:  # the guarded reader: size, depth, integer digits, no NaN
        env_kwargs = load_json(ours.env_kwargs, "--env.kwargs", expect=None)
    except ParseError as exc:
        raise UsageError(f"--env.kwargs is not JSON: {exc}") from None
    except GuardError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(env_kwargs, dict):
        raise UsageError("--env.kwargs must be a JSON object")
    check_numbers(ours, theirs)  # before any task is made: --env.num_tasks is bounded
    check_env(ours.env_id)
    env_workers = _env_workers(ours.env_workers)
    env_timeout_s = _env_timeout(ours.env_timeout_s)
    theirs = list(theirs)
    if has_flag(theirs, "--env.max_turns"):
        raise UsageError(
            "--env.max_turns is gone: an episode ends at the env's own max_steps; set it with "
            "--env.kwargs '{\"max_steps\": N}'"
        )
    if ours.group_size is not None:
        if ours.group_size < 2:
            raise UsageError("--group_size must be >= 2 (a GiGPO group needs two rollouts)")
        if has_flag(theirs, "--rollout.n_samples_per_prompt"):
            raise UsageError("give either --group_size or --rollout.n_samples_per_prompt")
        theirs += ["--rollout.n_samples_per_prompt", str(ours.group_size)]

    settings = None
    given = [a.split("=", 1)[0] for a in argv if a.startswith(FLAG_PREFIX)]
    check_estimator(ours.estimator)
    if ours.estimator in ESTIMATORS:
        try:
            settings = GiGPOSettings(
                estimator=ours.estimator,
                **_settings_from_flags(ours),
                save_rollouts_every=ours.save_rollouts_every,
                rollouts_dir=str(Path(ours.dataset_dir).resolve()),
                rollout_max_chars=ours.rollout_max_chars,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not has_flag(theirs, "--algo.kl.use_loss") and flag_value(
            theirs, "--algo.kl.init_coef", "0.01"
        ) not in ("0", "0.0"):
            raise UsageError(
                "gigpo writes advantages directly: put the KL in the loss (--algo.kl.use_loss) "
                "or turn it off (--algo.kl.init_coef 0)"
            )
        theirs += ["--algo.advantage.estimator", CARRIER_ESTIMATOR]
    else:
        if given:
            raise UsageError(
                f"{sorted(set(given))} set gigpo_algo's estimators, which "
                f"--algo.advantage.estimator {ours.estimator} (OpenRLHF's own) does not use"
            )
        theirs += ["--algo.advantage.estimator", ours.estimator]

    if settings is not None and settings.similarity is not None:
        _require_state_text(ours.env_id, env_kwargs)
    layout = resolve_layout(ours, theirs)
    warnings: list[str] = []
    check_modes(theirs, layout, settings is not None, warnings)
    history_length, max_prompt_tokens = resolve_sizes(ours, theirs, layout, env_kwargs, warnings)
    if settings is not None and settings.estimator == "hgpo" and settings.history_length is None:
        # verl-agent's one env.history_length: HGPO's deepest level is the prompt's window
        # (the step layout's; an episode-layout prompt holds the whole episode: HGPO's 2)
        if layout == "step":
            settings = dataclasses.replace(settings, history_length=history_length)
    tasks = [
        Task(
            env_id=ours.env_id,
            seed=ours.seed + i,
            env_kwargs=env_kwargs,
            history_length=history_length,
            max_new_tokens=ours.max_new_tokens,
            format_instruction=ours.format_instruction,
            layout=layout,
            max_prompt_tokens=max_prompt_tokens,
            env_workers=env_workers,
            env_timeout_s=env_timeout_s,
        )
        for i in range(ours.num_tasks)
    ]
    dataset_path = None
    if not has_flag(theirs, "--data.prompt_dataset"):
        dataset_path = Path(ours.dataset_dir).resolve() / "tasks.jsonl"
        theirs += ["--data.prompt_dataset", str(dataset_path)]
        theirs += ["--data.input_key", "input", "--data.label_key", "label"]
    if not has_flag(theirs, "--train.agent_func_path"):
        theirs += ["--train.agent_func_path", str(AGENT_FUNC)]
    try:
        theirs, device_env = resolve_device(ours.device, theirs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    theirs, packaged = resolve_packaged(theirs, ours.dataset_dir)
    env_vars = dict(OPENRLHF_ENV_DEFAULTS, **device_env)
    if settings is not None:
        env_vars[SETTINGS_ENV] = settings.to_json()
    runtime_env = {"env_vars": env_vars, "worker_process_setup_hook": SETUP_HOOK}
    return Plan(theirs, settings, dataset_path, tasks, runtime_env, layout, tuple(warnings),
                tuple(packaged))  # fmt: skip


def _env_workers(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"--gigpo.env_workers must be auto or an int >= 0, got {text!r}")
    return in_bounds("--gigpo.env_workers", value)


def _env_timeout(text: str) -> float | None:
    if text in ("none", "None", "null"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_ENV_TIMEOUT_S:
        raise UsageError(
            f"--gigpo.env_timeout_s must be a number > 0 or none, at most "
            f"{MAX_ENV_TIMEOUT_S:g} (a day), got {text[:40]!r}"
        )
    return value


#: verl-agent's names for our settings: ``flag -> (our name, value map or None)``, from the
#: settings table (:class:`training.settings.EstimatorSettings`, each field's ``aliases``).
ALIASES: dict[str, tuple[str, dict[str, str] | None]] = {
    alias: (f.name, value_map)
    for f in flag_settings()
    for alias, value_map in f.metadata["aliases"].items()
}


def _kind(f: Any) -> type:
    """The type a settings field holds (``float`` for ``float | None``): bool, int, float or
    str."""
    hint = typing.get_type_hints(EstimatorSettings)[f.name]
    kinds = [k for k in (typing.get_args(hint) or (hint,)) if k is not type(None)]
    return kinds[0]


def _flag_value(f: Any, text: Any, flag: str) -> Any:
    """A flag's text as the value of settings field ``f`` (``none`` is None where the field
    may be unset); a value that is not text (the field's default) is returned as it is.

    Raises:
        ValueError: naming ``flag``, when the text is not a value of the field's type.
    """
    if not isinstance(text, str):
        return text
    kind = _kind(f)
    if text in ("none", "None", "null") and f.default is None:
        return None
    if kind is bool:
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if text.lower() not in words:
            raise ValueError(f"{flag} must be true or false, got {text!r}")
        return words[text.lower()]
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            what = "an int" if kind is int else "a number"
            raise ValueError(f"{flag} must be {what}, got {text!r}") from None
    return text


def _settings_from_flags(ours: argparse.Namespace) -> dict[str, Any]:
    """Our settings from the parsed flags, aliases resolved; a setting given under both its
    name and its alias is an error."""
    fields = {f.name: f for f in flag_settings()}
    values: dict[str, Any] = {
        name: _flag_value(f, getattr(ours, f"setting_{name}"), FLAG_PREFIX + name)
        for name, f in fields.items()
    }
    for alias, (name, value_map) in ALIASES.items():
        value = getattr(ours, f"alias_{alias}")
        if value is None:
            continue
        if values[name] != fields[name].default:
            raise ValueError(
                f"give {FLAG_PREFIX}{name} or its alias {FLAG_PREFIX}{alias}, not both"
            )
        if value_map is not None:
            if value not in value_map:
                raise ValueError(
                    f"{FLAG_PREFIX}{alias} must be one of {sorted(value_map)}, got {value!r} "
                    f"(or give {FLAG_PREFIX}{name})"
                )
            value = value_map[value]
        values[name] = _flag_value(fields[name], value, FLAG_PREFIX + alias)
    return values


def _require_state_text(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Similarity grouping reads ``info["anchor_text"]``: refuse an env that gives none."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the ids)

    try:
        env = gym.make(env_id, **env_kwargs)
        try:
            _, info = env.reset(seed=0)
        finally:
            env.close()
    except Exception as exc:  # the env's own message says what is wrong
        raise UsageError(
            f"--env {env_id} with --env.kwargs {env_kwargs} cannot start: {exc}"
        ) from None
    if info.get("anchor_text") is None:
        raise UsageError(
            f"{FLAG_PREFIX}similarity: {env_id} gives no info['anchor_text'] (state text); "
            "similarity grouping never runs on state keys"
        )


def dataset_lines(tasks: list[Task]) -> list[str]:
    """The prompt dataset: one JSON line per task; the label is the task."""
    return [
        json.dumps({"input": f"{t.env_id} task {t.seed}", "label": task_label(t)}) for t in tasks
    ]

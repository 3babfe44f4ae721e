"""The local trainer: ``python -m training.local --config smoke`` (``gigpo-train``).

One module per concept, in the order one iteration meets them. Read :mod:`training.local.train`
first: the loop, top to bottom (``from training.local.train import train``).

- :mod:`~training.local.schema`: the config's sections as dataclasses;
  :mod:`~training.local.config`: loading them (YAML, CLI overrides, renamed keys);
  :mod:`~training.local.checks`: every value checked before a model is built
  (:mod:`~training.local.model_checks`: the model's name, revision, remote code, LoRA).
- :mod:`~training.local.model`: loading the policy, reference and critic (PPO's value
  model) (:mod:`training.tiny_model`, shared with the verl launcher: the random test model;
  :mod:`~training.local.critic`: the critic's GAE targets and its step;
  :mod:`~training.local.lora`: LoRA adapters through PEFT, the base as the reference);
  :mod:`~training.local.precision`: the compute dtype of every forward pass (bfloat16
  autocast where native; :mod:`~training.local.attention`: attention on a CPU under it);
  :mod:`~training.local.threads`: torch's thread count, from the cores left free;
  :mod:`~training.local.allocator`: freed memory kept for reuse (no page faults a step);
  :mod:`~training.local.memory`: the run's memory plan, checked before any weight loads
  (:mod:`~training.local.shapes`: the model's shape from its config alone;
  :mod:`~training.local.prompts`: the first prompt counted, a cap below it refused).
- :mod:`~training.local.tasks`: training and held-out task seeds;
  :mod:`~training.local.play`: playing them; :mod:`~training.local.rollout`: batched
  generation and env steps into step records (:mod:`~training.local.decoding`: sampling
  and the sampled tokens' log-probs in bounded memory, the static cache);
  :mod:`~training.local.prefix`: running a shared prompt start once;
  :mod:`~training.local.engine`: vLLM as the engine instead, in this process, the
  policy's weights loaded into it after each update (:mod:`~training.local.engine_settings`:
  ``rollout.engine``'s values, ``auto`` resolved).
- :mod:`~training.local.batch`: step records as token tensors (in micro-batches of a token
  budget) and their log-probs; :mod:`~training.local.policy`: the policy update every
  estimator runs.
- :mod:`~training.local.checkpoint`: exact resume (:mod:`~training.local.checkpoint_files`:
  the files it reads and writes); :mod:`~training.local.resume`: the config check on resume;
  :mod:`~training.local.trained`: a trained run's model for evaluation and export.
- :mod:`~training.local.metrics`: an iteration's metrics row, JSON lines and the curve
  (:mod:`~training.local.plot`: several runs on one plot); :mod:`~training.local.trackers`:
  the same scalars for the trackers of ``run.report_to`` (:mod:`~training.local.tensorboard`:
  TensorBoard's; Weights & Biases, trackio).

The advantages are :mod:`training.advantages` (shared with the OpenRLHF trainer).
"""

from training.local.config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config"]

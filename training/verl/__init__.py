"""GiGPO, HGPO and GraphGPO on upstream verl 0.9.1: a plugin (``pip install -e ".[verl]"``).

Read :mod:`training.verl.plugin` first (what ``import verl`` registers, and the one patch),
then :mod:`training.verl.agent_loop` (an episode through verl's rollout server, one output per
step) and :mod:`training.verl.advantage` (a batch's advantages, drop-in for verl-agent's).

Modules: :mod:`~training.verl.config` (verl's ``algorithm`` section, verl-agent's keys and
ours, to the estimator settings), :mod:`~training.verl.columns` (a batch's step columns as
step records), :mod:`~training.verl.advantage` (``compute_advantage`` and the registered
estimators), :mod:`~training.verl.agent_loop` (the ``gigpo`` agent loop),
:mod:`~training.verl.trainer` (the v1 trainers whose advantage step reads the step columns),
:mod:`~training.verl.plugin` (the ``verl.plugins`` entry point), :mod:`~training.verl.cpu`
(verl on a CPU machine: the ``cpu`` platform and what it patches; :mod:`~training.verl.vllm_cpu`:
vLLM's CPU build as verl's rollout server), ``gigpo-verl``'s
:mod:`~training.verl.launch` (the datasets, the packaged models, verl's command run),
:mod:`~training.verl.command` (flags and overrides resolved), :mod:`~training.verl.recipes`
(verl-agent's batch sizes per env, in verl's counting) and :mod:`~training.verl.checks`
(verl's own checks of a command). Only ``plugin``, ``cpu``, ``vllm_cpu``, ``agent_loop``,
``trainer`` and ``checks`` import verl, and only when verl loads them or a command is checked.
"""

from training.verl.advantage import compute_advantage

__all__ = ["compute_advantage"]

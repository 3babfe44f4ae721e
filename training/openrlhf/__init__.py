"""GiGPO on OpenRLHF 0.11.2 (Ray + vLLM + DeepSpeed): ``bash training/openrlhf_gigpo.sh``.

Read :mod:`training.openrlhf.launch` first (the flags to a resolved run), then
:mod:`training.openrlhf.executor` (an episode in a vLLM actor) and
:mod:`training.openrlhf.estimator` (a batch's advantages onto tokens).

Modules (beside the shared :mod:`training.env_tasks`: a task's label, where its env runs, a
step's prompt and record): :mod:`~training.openrlhf.executor` (our environments in
OpenRLHF's vLLM actors, in either sample layout, recording
:class:`~training.records.StepRecords`),
:mod:`~training.openrlhf.turns` (the turns each sample trains),
:mod:`~training.openrlhf.samples` (the step layout's samples, padding and fillers),
:mod:`~training.openrlhf.spans` (turn token ranges to action-mask columns),
:mod:`~training.openrlhf.estimator` (GiGPO advantages on OpenRLHF batches, written into its
experiences; the run's step-record files; its settings are :mod:`training.settings`'
table), :mod:`~training.openrlhf.metrics` (our metrics in OpenRLHF's status: per episode,
step groups, the engines' log-prob gap), :mod:`~training.openrlhf.filtering` (dynamic sampling:
which group trains nothing), :mod:`~training.openrlhf.order` (a batch's rows in rollout
order), :mod:`~training.openrlhf.modes` (the OpenRLHF modes a run turns on, checked),
:mod:`~training.openrlhf.layout` (the layout and its sizes, from the flags),
:mod:`~training.openrlhf.command` (flags and the resolved command),
:mod:`~training.openrlhf.patch` (the version-pinned glue, applied in every Ray worker),
:mod:`~training.openrlhf.lora_sync` (a LoRA actor's weights to vLLM, merged),
:mod:`~training.openrlhf.cpu` and :mod:`~training.openrlhf.cpu_engine` (``--gigpo.device
cpu``: the whole loop on a CPU machine, and the engines' side of its weight sync; with
``flash_attn_cpu/``, flash-attn's padding helpers where it is not installed),
:mod:`~training.openrlhf.checks` (OpenRLHF's own checks of a command, for the dry run),
:mod:`~training.openrlhf.train` (the entry point), :mod:`~training.openrlhf.launch` (the
launcher), ``agent_func.py`` (the file OpenRLHF's ``--train.agent_func_path`` loads).
Only ``patch``, ``lora_sync``, ``cpu``, ``checks`` and ``train`` touch OpenRLHF or Ray,
lazily; ``cpu_engine`` runs in vLLM's engine process and imports OpenRLHF's worker class.
"""

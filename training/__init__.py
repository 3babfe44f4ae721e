"""training: the only package where environments, algorithms and models meet.

In the layers of docs/design.md, lowest first:

- the shared modules here, which both trainers build on: :mod:`training.records` (the one
  step record), :mod:`training.settings` (the estimator settings), :mod:`training.advantages`
  (step records to advantages), :mod:`training.stats`, :mod:`training.record_files`,
  :mod:`training.text`, :mod:`training.files`, :mod:`training.smollm2`,
  :mod:`training.locks` (one writer per output folder), :mod:`training.folders` (which
  command made a folder, and the folder that owns another), :mod:`training.commands` (what
  every command line shares: one-line errors, the program named as typed, Ctrl-C);
- the trainers: :mod:`training.local` (one machine, ``gigpo-train``) and
  :mod:`training.openrlhf` (OpenRLHF across GPUs);
- the tools around them: :mod:`training.viewer` (``gigpo-view``), :mod:`training.evaluation`
  (``gigpo-evaluate``), :mod:`training.study` (``python -m training.study``);
- :mod:`training.cli`, their command lines.

Read :mod:`training.records` first, then :mod:`training.local.train`, the loop.
"""

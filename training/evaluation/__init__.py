"""Evaluation: held-out tasks of any gigpo env played by any model, and the pinned
evaluation suites with their paper-layout tables (``gigpo-evaluate``; its command line is
:mod:`training.cli.evaluate`).

Read :mod:`training.evaluation.heldout` first (one model on N held-out tasks, with the
trainer's own play loop), then :mod:`training.evaluation.suite` (a suite run, end to end).
The suites' parts:

- :mod:`training.evaluation.suite_file`: a suite file (``training/suites/*.yaml``) loaded and
  checked key by key, and its data roots (:mod:`training.evaluation.suite_paths`: every path
  it names under a data root, and each one an env reads hashed);
- :mod:`training.evaluation.data`: a suite's data, generated once where it has a recipe,
  hashed and checked against its pin;
- :mod:`training.evaluation.play`: a suite's tasks played in batches, resumably
  (``episodes.jsonl``);
- :mod:`training.evaluation.rows`: an episode row read back, checked field by field;
- :mod:`training.evaluation.table`: a suite's cells with their intervals, the paper-layout
  table, and paired comparisons of runs (``--compare``).
"""

"""The estimator study: one recipe trained under several arms (an estimator with some of
its settings) and seeds, then tabled with intervals and per-seed paired differences
(``python -m training.study``; its command line is :mod:`training.cli.study`).

Read :mod:`training.study.runs` first (train every planned run, write the report). The
other modules:

- :mod:`training.study.arms`: an arm (an estimator with some settings) from its string;
- :mod:`training.study.plan`: parts and study files (``training/studies/*.yaml``)
  checked, and every (config, arm, seed) run with its folder and trainer command;
- :mod:`training.study.parts`: the parts a command line asks for (a study file, shipped
  by name, or configs with estimators, arms, axes, seeds and pairs);
- :mod:`training.study.report`: a run's numbers, the arm tables, the paired differences
  and the curves (``study.md``, ``study.json``, ``study.png``).
"""

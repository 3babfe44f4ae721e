"""The command-line entry points that are not trainers, one module each:

- :mod:`training.cli.view`: a run's rollouts and curves as one HTML page (``gigpo-view``);
- :mod:`training.cli.view_checks`: the viewer's checks of a run's rollout files;
- :mod:`training.cli.view_html`: the HTML pieces of the viewer's page;
- :mod:`training.cli.view_assets`: the inline style sheet and script of the viewer's page;
- :mod:`training.cli.evaluate`: held-out tasks of any gigpo env played by any model
  (``gigpo-evaluate``);
- :mod:`training.cli.evaluate_suite`: ``gigpo-evaluate --suite``, a pinned suite played
  and tabled;
- :mod:`training.cli.suites`: the suite files (``training/suites/``), checked key by key;
- :mod:`training.cli.suite_data`: a suite's data, generated once, hashed and checked;
- :mod:`training.cli.suite_run`: a suite's tasks played in batches, resumably;
- :mod:`training.cli.suite_table`: a suite's cells with intervals, the paper-layout table;
- :mod:`training.cli.study`: one recipe trained under several arms (estimator + settings)
  and seeds (``python -m training.study``);
- :mod:`training.cli.study_plan`: the study's arms, parts, study files and runs;
- :mod:`training.cli.study_report`: the study's arm tables, paired differences and curves;
- :mod:`training.cli.quickstart`: GiGPO on SmolLM2-135M-Instruct, on CPU, in minutes
  (``gigpo-quickstart``).
"""

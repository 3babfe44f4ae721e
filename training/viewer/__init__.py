"""The viewer: a run's step records and learning curves as one static HTML page
(``gigpo-view RUN_DIR``; its command line is :mod:`training.cli.view`).

Read :mod:`training.viewer.page` first: it reads a run folder and assembles and writes the
page. The other modules:

- :mod:`training.viewer.checks`: every value read from a rollout file checked for type
  before the page uses it (a damaged file is an error naming the file, line and field);
- :mod:`training.viewer.html`: one iteration's HTML, a group's trajectories step by step,
  within the page's bounds (``MAX_PAGE_CHARS`` and the per-group limits beside it);
- :mod:`training.viewer.charts`: the curves as inline SVG and the step-group statistics;
- :mod:`training.viewer.assets`: the page's inline style sheet and script;
- :mod:`training.viewer.serve`: the page served alone on 127.0.0.1 (``--serve``).

It reads what the trainers write: the rollout files (:mod:`training.record_files`) and the
local trainer's ``metrics.jsonl`` (:func:`training.local.metrics.read_metrics`, the only
trainer code it imports).
"""

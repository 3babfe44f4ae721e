"""A run's rollouts and curves as one static HTML page (``gigpo-view RUN_DIR``, whose command
line is :mod:`training.cli.view`).

The page (``RUN_DIR/view.html`` unless ``-o``) needs no server and no network; open it from
disk, or add ``--serve`` to serve it (that one file, nothing else of its folder) on 127.0.0.1.
It shows:

* the learning curves of ``metrics.jsonl`` (success rate, return, valid-action rate, their
  held-out ``eval_*`` values, step-group coverage) as inline SVG;
* per saved iteration, the step-group statistics: share of records in step groups of size
  >= 2, the histogram of step-group sizes, and how often A_S and A_E disagree in sign;
* one iteration (``--iteration``, default the last saved) group by group: the group's
  trajectories side by side, step by step, each step with its action, reward, validity,
  A_E / A_S / A, its observation and the state it led to (collapsed; the latter where the
  file records it), its step group (the same label and colour for the same anchor state
  across trajectories) and, where the file has them, HGPO's group at each level and
  GraphGPO's steps to the goal; then the group's revisited states, each with the actions
  taken there ranked by A_S.

An ALFWorld-sized iteration (16 groups x 8 trajectories x 50 steps) stays usable because
each group is rendered into an inert ``<template>`` and only the group being looked at is
put into the page (from the list, or ``view.html#group=3``); the browser does no layout
for the others. ``--max-chars`` bounds the observation text shown per step.

Everything the page shows from a rollout file, its header included, is checked for type
before it is used and escaped where it is written: a hand-edited or damaged file is a
:class:`~training.record_files.RolloutFileError` that names the file, the line and the field
(the command exits 2 with that message), never markup in the page or a traceback.

This module reads the run and assembles and writes the page; :mod:`training.viewer.serve`
serves it, the checks of a rollout file are :mod:`training.viewer.checks`, the HTML pieces
:mod:`training.viewer.html` (the curves and statistics: :mod:`training.viewer.charts`), the
inline style and script :mod:`training.viewer.assets`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.files import atomic_write_text, check_writable_target
from training.guarded import read_json_file
from training.local.metrics import METRICS_FILE, read_metrics
from training.locks import FolderBusyError, FolderLockError, hold_file
from training.record_files import read_rollouts, read_summary, rollout_files
from training.text import bound_text
from training.viewer.assets import SCRIPT, STYLE
from training.viewer.charts import curves_html, stats_html
from training.viewer.checks import (
    SURROGATE,
    check_header,
    check_records,
    checked_summary,
    read_guarded,
)
from training.viewer.html import esc, iteration_html

VIEW_FILE = "view.html"


class ViewError(ValueError):
    """The run directory cannot be shown (missing, empty, unreadable, or an unknown
    iteration), or the page cannot be written."""


def _read_run_metrics(run: Path) -> list[dict[str, Any]]:
    try:
        return read_metrics(run)
    except RecursionError:
        raise ViewError(f"{run / METRICS_FILE}: a line is nested too deeply to read") from None
    except MemoryError:
        raise ViewError(f"{run / METRICS_FILE}: too large to read into memory") from None
    except (OSError, ValueError) as exc:
        raise ViewError(f"{run / METRICS_FILE} is not readable JSON lines: {exc}") from None


def build_page(
    run_dir: str | Path, iteration: int | None = None, max_chars: int = 1500
) -> tuple[str, dict[str, Any]]:
    """The HTML page of ``run_dir`` and what it holds (``{"iteration", "records", ...}``).

    Raises:
        ViewError: no such directory, nothing to show, an unreadable ``metrics.jsonl`` or
            folder, or ``iteration`` was not saved.
        training.record_files.RolloutFileError: a rollout file is damaged, or holds a value the
            page cannot show (the file, line and field named).
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise ViewError(f"no run directory {run}")
    metrics = _read_run_metrics(run)
    try:
        files = rollout_files(run)
    except OSError as exc:
        raise ViewError(f"cannot list the rollouts of {run}: {exc}") from None
    if not metrics and not files:
        raise ViewError(f"{run} has neither metrics.jsonl nor rollouts/: is it a run directory?")
    summaries = {
        it: checked_summary(path, read_guarded(path, read_summary)) for it, path in files.items()
    }
    config, what = _read_config(run)
    title = f"{run.resolve().name}: {what}" if what else f"gigpo run {run.resolve().name}"
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{esc(config)} &middot; {len(metrics)} iterations in metrics.jsonl '
        f"&middot; {len(files)} with saved rollouts</p>",
        "<h2>Learning curves</h2>",
        curves_html(metrics, summaries) if metrics or summaries else "<p>no metrics.jsonl</p>",
    ]
    stats = [
        f'<details class="stats" {"open" if len(summaries) <= 30 else ""}><summary>'
        f"<h2>Step groups per saved iteration</h2></summary>",
        stats_html(summaries) if summaries else "<p>no saved rollouts</p>",
        "</details>",
    ]
    info: dict[str, Any] = {"iteration": None, "records": 0, "iterations_saved": list(files)}
    if files:
        chosen, note = (
            (int(iteration), "") if iteration is not None else _worth_a_look(summaries, metrics)
        )
        if chosen not in files:
            raise ViewError(
                f"iteration {chosen} has no saved rollouts in {run}; saved: {list(files)}"
            )
        path = files[chosen]
        header, records = read_guarded(path, read_rollouts)
        check_header(path, header)
        check_records(path, records)
        body.append(iteration_html(chosen, header, records, max_chars, note))
        info.update(iteration=chosen, records=len(records))
    body.extend(stats)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + f"<script>{SCRIPT}</script></body></html>"
    )
    try:
        page.encode("utf-8")
    except UnicodeEncodeError:
        # lone surrogates, from JSON escapes or an undecodable folder name: no UTF-8 for them
        page = SURROGATE.sub("\ufffd", page)
    return page, info


def _worth_a_look(
    summaries: dict[int, dict[str, Any]], metrics: list[dict[str, Any]]
) -> tuple[int, str]:
    """The saved iteration the page opens on, and why: the latest one where some records
    have both a nonzero step and a nonzero episode advantage, else the latest whose success
    rate was neither 0 nor 1 (its groups' returns differ), else the latest saved."""
    last = max(summaries)
    rates = {r["iteration"]: r.get("success_rate") for r in metrics}
    tests = {
        "nonzero step and episode advantages": lambda it: summaries[it].get("both_nonzero", 0),
        "a success rate between 0 and 1": lambda it: (
            isinstance(rate := rates.get(it), float) and 0 < rate < 1
        ),
    }
    for why, test in tests.items():
        found = [it for it in summaries if test(it)]
        if found:
            chosen = max(found)
            if chosen == last:
                return chosen, ""
            return chosen, (
                f"Shown: iteration {chosen}, the latest saved with {why}; the last saved, "
                f"{last}, has none to show (--iteration {last} opens it)."
            )
    return last, ""


def _read_config(run: Path) -> tuple[str, str]:
    """One line of the run's ``config.json`` (read by the guarded reader; each value shown
    cut short), or ``"no readable config.json"``; and the page's title: the estimator and
    the env (``""`` without a config)."""
    try:
        config = read_json_file(run / "config.json", "config", nonfinite=True)
        env, algo, model = config["env"], config["algo"], config["model"]
        values = [env["id"], env["num_groups"], env["group_size"], algo["estimator"],
                  model["name_or_path"]]  # fmt: skip
        if not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
            return "no readable config.json", ""
        name, groups, size, estimator, path = (bound_text(v, 200) for v in values)
        rank, revision = model.get("lora_rank"), model.get("revision")
        if isinstance(revision, str):
            path += "@" + revision[:12]
        if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0:
            path += f", LoRA rank {rank}"
        line = f"env {name} ({groups} groups x {size}), estimator {estimator}, model {path}"
        return line, f"{bound_text(estimator, 40)} on {bound_text(name, 60)}"
    except (ValueError, KeyError, TypeError, MemoryError):  # GuardError is a ValueError
        return "no readable config.json", ""


def write_page(
    run_dir: str | Path,
    output: str | Path | None = None,
    iteration: int | None = None,
    max_chars: int = 1500,
) -> tuple[Path, dict[str, Any]]:
    """Writes the page; returns its path and what it holds (with ``bytes``).

    The run folder is only read, never locked: a run still training can be viewed. The page
    is held by one writer (:func:`training.locks.hold_file`, the lock file ``.view.html.lock``
    beside it) from reading the run to writing the page, and written atomically (a reader,
    or ``--serve``, sees the old page or the new one, never a part).

    Raises:
        ViewError: as :func:`build_page`, or the page cannot be written where asked.
        FolderBusyError: another process is writing the same page (its pid and command named).
        training.record_files.RolloutFileError: as :func:`build_page`.
    """
    path = Path(output) if output is not None else Path(run_dir) / VIEW_FILE
    if not Path(run_dir).is_dir():
        raise ViewError(f"no run directory {run_dir}")  # before any folder is made for -o
    try:  # a FIFO, device or link given as -o (or planted as view.html) is never replaced
        check_writable_target(path)
    except OSError as exc:
        raise ViewError(
            f"cannot write the page to {path}: it {str(exc).removeprefix(f'{path} ')}"
        ) from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = hold_file(path, "gigpo-view")
    except OSError as exc:
        raise ViewError(f"cannot write the page to {path}: {exc.strerror or exc}") from None
    except FolderLockError as exc:
        if isinstance(exc, FolderBusyError):
            raise
        raise ViewError(f"cannot write the page to {path}: {exc}") from None
    with lock:
        page, info = build_page(run_dir, iteration, max_chars)
        try:
            atomic_write_text(path, page)
        except OSError as exc:
            raise ViewError(f"cannot write the page to {path}: {exc.strerror or exc}") from None
        info["bytes"] = path.stat().st_size
    return path, info

"""A run's rollouts and curves as one static HTML page (``gigpo-view RUN_DIR``, whose command
line is :mod:`training.cli.view`).

The page (``RUN_DIR/view.html`` unless ``-o``) needs no server and no network; open it from
disk, or add ``--serve`` to serve it (that one file, nothing else of its folder) on 127.0.0.1.
It is never written inside a run or another gigpo command's folder (the folder whose files
it would replace: :func:`check_page_place`), but for ``view.html`` in the root of the run it
shows. It shows:

* the learning curves of ``metrics.jsonl`` (success rate, return, valid-action rate, their
  held-out ``eval_*`` values, step-group coverage) as inline SVG;
* per saved iteration, the step-group statistics: share of records in step groups of size
  >= 2, the histogram of step-group sizes, and how often A_S and A_E disagree in sign;
* one iteration (``--iteration``, default the last saved; the page says how to open
  another) group by group: the group's trajectories side by side, step by step, each step
  with its action, reward (and the run's invalid-action penalty where it applies), validity,
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
from training.folders import KINDS, owning_folder
from training.guarded import read_json_file
from training.local.metrics import METRICS_FILE, read_metrics
from training.locks import FolderBusyError, FolderLockError, hold_file
from training.record_files import read_rollouts, read_summary, rollout_files
from training.text import bound_text
from training.viewer.assets import SCRIPT, STYLE
from training.viewer.charts import curves_html, stats_html
from training.viewer.checks import (
    SURROGATE,
    as_float,
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
    name = run.resolve().name
    config, estimator, env, penalty = _read_config(run)
    title = page_title(name, estimator, env)
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">run folder {esc(name)} &middot; {esc(config)} &middot; '
        f"{len(metrics)} iterations in metrics.jsonl &middot; {len(files)} with saved rollouts</p>",
        "<h2>Learning curves</h2>",
        curves_html(metrics, summaries) if metrics or summaries else "<p>no metrics.jsonl</p>",
    ]
    stats = [
        f'<details class="stats" {"open" if len(summaries) <= 30 else ""}><summary>'
        f"<h2>Step groups per saved iteration</h2></summary>",
        "",  # the table, once the iteration shown is known
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
        notes = [note, *_iteration_notes(run, chosen, list(files), records, penalty)]
        body.append(iteration_html(chosen, header, records, max_chars, [n for n in notes if n],
                                   penalty))  # fmt: skip
        info.update(iteration=chosen, records=len(records))
    stats[1] = stats_html(summaries, info["iteration"]) if summaries else "<p>no saved rollouts</p>"
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


def _iteration_notes(
    run: Path,
    chosen: int,
    saved: list[int],
    records: list[dict[str, Any]],
    penalty: float | None,
) -> list[str]:
    """What the iteration shown needs said: that the page holds its step records alone and
    how to write another saved iteration's page; what an invalid step costs (the run's
    invalid-action penalty, which the step's reward does not hold), or that it is unknown."""
    notes, shown = [], bound_text(str(run), 200)
    others = [it for it in saved if it != chosen]
    if others:
        listed = ", ".join(map(str, others[-12:]))
        notes.append(
            f"This page holds the step records of iteration {chosen} alone; saved too: "
            f"{'..., ' if len(others) > 12 else ''}{listed}. To see one of them, write its page: "
            f"gigpo-view {shown} --iteration {others[-1]} (written to {shown}/{VIEW_FILE} "
            "unless -o names another file)."
        )
    if any(not r["is_action_valid"] for r in records):
        if penalty:
            notes.append(
                f"An invalid action costs the run's invalid-action penalty, {penalty:g} "
                "(algo.invalid_penalty): the trainer takes it off the step's return and its "
                "advantages, and the env's reward does not hold it, so a step shows it beside "
                "its reward."
            )
        elif penalty is None:
            notes.append(
                "The run's invalid-action penalty is not known here (no algo.invalid_penalty "
                "in a readable config.json): an invalid step's return and advantages may hold "
                "one that its reward does not show."
            )
    return notes


def _read_config(run: Path) -> tuple[str, str, str, float | None]:
    """What the page shows of the run's ``config.json`` (read by the guarded reader; each
    value cut short): one line of it, or ``"no readable config.json"``; the estimator and the
    env id (``""`` without them); the invalid-action penalty (``algo.invalid_penalty``, a
    number >= 0 that the trainer takes off an invalid step's return but the env's reward
    does not hold; None where the file does not say)."""
    unknown = "no readable config.json", "", "", None
    try:
        config = read_json_file(run / "config.json", "config", nonfinite=True)
        env, algo, model = config["env"], config["algo"], config["model"]
        values = [env["id"], env["num_groups"], env["group_size"], algo["estimator"],
                  model["name_or_path"]]  # fmt: skip
    except (ValueError, KeyError, TypeError, MemoryError):  # GuardError is a ValueError
        return unknown
    if not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
        return unknown
    penalty = as_float(algo.get("invalid_penalty"))
    name, groups, size, estimator, path = (bound_text(v, 200) for v in values)
    rank, revision = model.get("lora_rank"), model.get("revision")
    if isinstance(revision, str):
        path += "@" + revision[:12]
    if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0:
        path += f", LoRA rank {rank}"
    line = f"env {name} ({groups} groups x {size}), estimator {estimator}, model {path}"
    if penalty is not None and penalty >= 0:
        line += f", invalid-action penalty {penalty:g}"
    else:
        penalty = None
    return line, bound_text(estimator, 40), bound_text(name, 60), penalty


def page_title(name: str, estimator: str, env: str) -> str:
    """The page's title, ``RUN: ESTIMATOR on ENV``, no word in it twice: the env without the
    package's own ``gigpo/`` namespace, and the run folder's name left out where it is the
    estimator's or the env's (the quick start's ``runs/quickstart/gigpo`` of GiGPO on
    ``gigpo/NumberLine-v0``: "gigpo on NumberLine-v0"; the folder is named under the
    title). ``Run NAME`` without a readable config."""
    if not estimator or not env:
        return f"Run {name}"
    env = env.removeprefix("gigpo/")
    what = f"{estimator} on {env}"
    if name.casefold() in {estimator.casefold(), env.casefold()}:
        return what
    return f"{name}: {what}"


def write_page(
    run_dir: str | Path,
    output: str | Path | None = None,
    iteration: int | None = None,
    max_chars: int = 1500,
) -> tuple[Path, dict[str, Any]]:
    """Writes the page; returns its path and what it holds (with ``bytes``).

    The run folder is only read, never locked: a run still training can be viewed. The page
    is never written inside a run or another command's folder but as the run's own
    ``view.html`` (:func:`check_page_place`). It is held by one writer
    (:func:`training.locks.hold_file`, the lock file ``.view.html.lock`` beside it) from
    reading the run to writing the page, and written atomically (a reader, or ``--serve``,
    sees the old page or the new one, never a part).

    Raises:
        ViewError: as :func:`build_page`, or the page cannot be written where asked (inside
            a folder of a run, a study, an evaluation, ...; a FIFO, link or folder there).
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
    check_page_place(run_dir, path)  # before any folder is made for it
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


def check_page_place(run_dir: str | Path, path: str | Path) -> None:
    """Refuses a page ``path`` inside a folder whose files it could replace: a run, a study,
    an evaluation or any other command's folder (:func:`training.folders.owning_folder`:
    its kind file, or an older run's ``config.json`` beside ``metrics.jsonl`` or
    ``checkpoint/``), or the folder ``run_dir`` the page is made from. Every other command
    refuses an output there; ``-o RUN/checkpoint/state.json`` would replace the checkpoint
    with HTML. The one page allowed inside is the default, ``view.html`` in the root of
    ``run_dir`` (no command but the viewer writes that name). The page's folder is taken
    with its symlinks resolved, so a linked folder leads to where the page would land.

    Raises:
        ViewError: one line naming ``path`` and the folder it is inside.
    """
    path, run = Path(path), Path(run_dir).resolve()
    target = path.parent.resolve() / path.name  # the name itself: check_writable_target
    found = owning_folder(target)
    if target == run / VIEW_FILE and (found is None or found[0] == run):
        return
    if found is not None:
        folder, kind = found
        what = f"{KINDS.get(kind, kind)} and rewrites what is in it"
    elif run == target or run in target.parents:
        folder, what = run, "the run this page is made from"
    else:
        return
    default = f" (or the default, {run / VIEW_FILE})" if folder == run else ""
    raise ViewError(
        f"cannot write the page to {path}: it is inside {folder}, which holds {what}: "
        f"use an -o outside it{default}"
    )

"""Metrics to experiment trackers: ``run.report_to``, as transformers' ``report_to``.

``metrics.jsonl`` always gets every row (:mod:`training.local.metrics`). Besides it, each
tracker named in ``run.report_to`` gets the same scalars at the same step, ``iteration``
(:func:`~training.local.tensorboard.scalars`):

- ``tensorboard``: events in ``out/tensorboard/`` (:mod:`training.local.tensorboard`; a
  resumed run purges the events written after its checkpoint);
- ``wandb``: a Weights & Biases run named after the run (``run.label``, else ``out``'s
  folder name), in project ``$WANDB_PROJECT`` (default ``gigpo``), its files in
  ``$WANDB_DIR`` (default ``out``); ``iteration`` is logged too and is every chart's x axis
  (``define_metric``, as transformers does), so an iteration played again after a crash is a
  second point at that x, not a point wandb drops; ``WANDB_MODE=offline`` works as usual;
- ``trackio``: a trackio run named ``<name>-<id>`` in project ``$TRACKIO_PROJECT`` (default
  ``gigpo``), stored where trackio stores (``$TRACKIO_DIR``, by default in the Hugging Face
  cache), logged with ``step=iteration`` (an iteration played again after a crash is a
  second point at its step, as in wandb);
- ``all``: each of them that is installed; ``none`` (or ``[]``): none of them.

Unset (None), ``run.report_to`` is ``[tensorboard]`` where that package is installed, else
nothing (the behaviour of the old ``run.tensorboard: null``). A tracker named must be
installed: :func:`check_report_to` refuses it at load, naming the key and what to install.

The wandb and trackio runs get the run's config (``config.json``'s content) and an id kept in
``out/trackers.json``: a resumed run (one that loaded a checkpoint) continues the same tracker
run (wandb ``id`` with ``resume="allow"``; trackio ``resume="allow"`` on the same name); a
run that starts from iteration 0 gets a new one. A tracker is never a reason for the run to
stop: one that fails to start, or whose call fails mid-run, gets one warning and is dropped
for the rest of the run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import warnings
from pathlib import Path
from typing import Any, Protocol

from training.files import atomic_write_text, own_folder
from training.guarded import GuardError, read_json_file
from training.local.schema import ConfigError, TrainConfig
from training.local.tensorboard import ScalarLog, scalars
from training.text import show

__all__ = [
    "CHOICES", "STATE_FILE", "TRACKERS", "Tracker", "Trackers", "TrackioTracker",
    "WandbTracker", "check_report_to", "installed", "open_trackers", "resolve",
]  # fmt: skip

#: The trackers, in the order ``all`` lists them.
TRACKERS = ("tensorboard", "wandb", "trackio")
#: What ``run.report_to`` accepts.
CHOICES = (*TRACKERS, "all", "none")
#: What to install for each tracker.
INSTALL = {
    "tensorboard": "pip install 'gigpo[train]' (or pip install tensorboard)",
    "wandb": "pip install 'gigpo[trackers]' (or pip install wandb)",
    "trackio": "pip install 'gigpo[trackers]' (or pip install trackio)",
}
#: The file in the run folder that keeps the tracker runs' id for a resume.
STATE_FILE = "trackers.json"
#: The tracker project when ``$WANDB_PROJECT`` / ``$TRACKIO_PROJECT`` is unset.
PROJECT = "gigpo"


class Tracker(Protocol):
    """Where a run's metrics go, besides ``metrics.jsonl``."""

    name: str

    def write(self, row: dict[str, Any]) -> None:
        """Sends a metrics row's scalars at step ``row["iteration"]``."""

    def close(self) -> None:
        """Ends the tracker's run (flushes what it holds)."""


def installed(name: str) -> bool:
    """Whether tracker ``name``'s package can be imported here."""
    return importlib.util.find_spec(name) is not None


def check_report_to(report_to: Any) -> None:
    """Raises :class:`ConfigError` naming ``run.report_to`` when it is no list of
    :data:`CHOICES`, mixes ``all`` or ``none`` with others, or names a tracker that is not
    installed (saying what to install)."""
    if report_to is None:
        return
    if not isinstance(report_to, list) or not all(isinstance(n, str) for n in report_to):
        raise ConfigError(f"run.report_to must be a list of tracker names, got {show(report_to)}")
    for name in report_to:
        if name not in CHOICES:
            raise ConfigError(
                f"run.report_to: unknown tracker {show(name)}; accepted: {', '.join(CHOICES)}"
            )
    alone = [name for name in ("all", "none") if name in report_to]
    if alone and len(set(report_to)) > 1:
        raise ConfigError(
            f"run.report_to: {alone[0]!r} stands alone, got {show(report_to)}; list the "
            f"trackers instead ({', '.join(TRACKERS)})"
        )
    for name in report_to:
        if name in TRACKERS and not installed(name):
            raise ConfigError(
                f"run.report_to names {name}, which is not installed here: {INSTALL[name]}"
            )


def resolve(report_to: list[str] | None) -> list[str]:
    """The trackers ``run.report_to`` (checked by :func:`check_report_to`) writes to."""
    if report_to is None:
        return ["tensorboard"] if installed("tensorboard") else []
    if "none" in report_to:
        return []
    if "all" in report_to:
        return [name for name in TRACKERS if installed(name)]
    return list(dict.fromkeys(report_to))


class WandbTracker:
    """A Weights & Biases run (see the module doc)."""

    name = "wandb"

    def __init__(self, config: TrainConfig, out: Path, run_id: str) -> None:
        import wandb

        if not os.environ.get("WANDB_DIR"):  # wandb writes out/wandb/: never through a link
            own_folder(out, "wandb")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or PROJECT,
            name=run_name(config, out),
            id=run_id,
            resume="allow",
            dir=os.environ.get("WANDB_DIR") or str(out),
        )
        # A resumed run's config may differ in the keys a resume may change (run.iterations).
        self.run.config.update(config.to_dict(), allow_val_change=True)
        self.run.define_metric("iteration")
        self.run.define_metric("*", step_metric="iteration")

    def write(self, row: dict[str, Any]) -> None:
        self.run.log({**scalars(row), "iteration": int(row["iteration"])})

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """A trackio run (see the module doc)."""

    name = "trackio"

    def __init__(self, config: TrainConfig, out: Path, run_id: str) -> None:
        import trackio

        self.trackio = trackio
        trackio.init(
            project=os.environ.get("TRACKIO_PROJECT") or PROJECT,
            name=f"{run_name(config, out)}-{run_id}",
            config=config.to_dict(),
            resume="allow",
        )

    def write(self, row: dict[str, Any]) -> None:
        self.trackio.log(scalars(row), step=int(row["iteration"]))

    def close(self) -> None:
        self.trackio.finish()


def run_name(config: TrainConfig, out: Path) -> str:
    """The name a tracker shows: ``run.label``, else the run folder's name."""
    return config.run.label or Path(out).resolve().name


class Trackers:
    """The run's trackers, written to and closed together; a tracker whose call raises is
    warned about once (:class:`RuntimeWarning`) and dropped, and the run goes on."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = list(trackers)

    @property
    def names(self) -> list[str]:
        return [tracker.name for tracker in self.trackers]

    def write(self, row: dict[str, Any]) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.write(row)
            except Exception as exc:  # a tracker never stops the run
                self._drop(tracker, f"failed at iteration {row.get('iteration')}", exc)

    def close(self) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.close()
            except Exception as exc:  # the run's own files are written already
                self._drop(tracker, "failed to close", exc)
        self.trackers = []

    def _drop(self, tracker: Tracker, what: str, exc: BaseException) -> None:
        if tracker in self.trackers:
            self.trackers.remove(tracker)
        tracker_warning(tracker.name, what, exc)


def tracker_warning(name: str, what: str, exc: BaseException) -> None:
    """The one warning a tracker gets when it fails."""
    warnings.warn(
        f"run.report_to: {name} {what} ({type(exc).__name__}: {str(exc)[:300]}); the run "
        f"goes on without it (metrics.jsonl has every row)",
        RuntimeWarning,
        stacklevel=3,
    )


#: How each tracker is opened: (config, run folder, iterations done, run id) -> Tracker.
OPENERS: dict[str, Any] = {
    "tensorboard": lambda config, out, completed, run_id: ScalarLog(out, completed, True),
    "wandb": lambda config, out, completed, run_id: WandbTracker(config, out, run_id),
    "trackio": lambda config, out, completed, run_id: TrackioTracker(config, out, run_id),
}


def open_trackers(config: TrainConfig, out: Path, completed: int = 0) -> Trackers:
    """Opens the trackers of ``config.run.report_to`` for a run in ``out`` that has done
    ``completed`` iterations (loaded from its checkpoint; 0: a new run). One that fails to
    open is warned about and left out."""
    names = resolve(config.run.report_to)
    run_id = tracker_run_id(Path(out), completed) if set(names) - {"tensorboard"} else ""
    opened = []
    for name in names:
        try:
            opened.append(OPENERS[name](config, Path(out), completed, run_id))
        except Exception as exc:  # a tracker never stops the run
            tracker_warning(name, "failed to start", exc)
    return Trackers(opened)


def tracker_run_id(out: Path, completed: int) -> str:
    """The tracker runs' id: the one ``out/trackers.json`` holds when the run resumes
    (``completed`` > 0), else a new one, written there."""
    path = out / STATE_FILE
    if completed > 0 and path.is_file():
        try:
            run_id = read_json_file(path, "tracker state").get("id")
        except GuardError as exc:
            warnings.warn(f"{exc}; the trackers start new runs", RuntimeWarning, stacklevel=3)
            run_id = None
        if isinstance(run_id, str) and re.fullmatch(r"[0-9a-z]{1,64}", run_id):
            return run_id
    run_id = secrets.token_hex(4)
    atomic_write_text(path, json.dumps({"id": run_id}) + "\n")
    return run_id

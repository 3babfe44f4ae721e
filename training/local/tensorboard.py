"""Metrics as TensorBoard scalars: every number of a ``metrics.jsonl`` row, tag = its key.

One of the trackers of ``run.report_to`` (:mod:`training.local.trackers`), and what every
tracker is sent: :func:`scalars`. Events go to ``out/tensorboard/``; ``tensorboard --logdir
runs/`` shows every run under ``runs/``. The ``train`` extra brings the package.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"


def tensorboard_available() -> bool:
    """True when the ``tensorboard`` package is installed."""
    return importlib.util.find_spec("tensorboard") is not None


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's scalars, as every tracker gets them: each number but ``iteration``
    (which is the step), bools as 0/1, as a float; text, null, NaN and inf left out."""
    out = {}
    for key, value in row.items():
        if key != "iteration" and isinstance(value, int | float) and math.isfinite(value):
            out[key] = float(value)
    return out


class ScalarLog:
    """Writes each row's :func:`scalars` at step ``row["iteration"]``.

    Args:
        out: the run directory.
        completed: iterations already done (a resumed run): events at or past this step,
            written after the checkpoint and before a crash, are purged.
        enabled: False writes nothing; True without the package raises ``RuntimeError`` (the
            config check refuses it earlier, naming ``run.report_to``); None writes when the
            package is installed.
    """

    name = "tensorboard"

    def __init__(self, out: Path, completed: int = 0, enabled: bool | None = None) -> None:
        self.writer: Any = None
        if enabled is False or (enabled is None and not tensorboard_available()):
            return
        if not tensorboard_available():
            raise RuntimeError("run.report_to names tensorboard, which is not installed")
        from torch.utils.tensorboard import SummaryWriter

        from training.files import own_folder

        log_dir = own_folder(out, TENSORBOARD_DIR)  # a link planted there is refused
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=completed or None)

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def write(self, row: dict[str, Any]) -> None:
        if self.writer is None:
            return
        step = int(row["iteration"])
        for key, value in scalars(row).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

"""Metrics as TensorBoard scalars: every number of a ``metrics.jsonl`` row, tag = its key.

``run.tensorboard`` turns it on (true), off (false) or on when the ``tensorboard`` package is
installed (null, the default; the ``train`` extra brings it). Events go to
``out/tensorboard/``; ``tensorboard --logdir runs/`` shows every run under ``runs/``.
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


class ScalarLog:
    """Writes each row's numbers (ints, floats, bools as 0/1; not NaN or inf) as scalars at
    step ``row["iteration"]``.

    Args:
        out: the run directory.
        completed: iterations already done (a resumed run): events at or past this step,
            written after the checkpoint and before a crash, are purged.
        enabled: see the module doc; True without the package raises ``RuntimeError``
            (the config check refuses it earlier, naming ``run.tensorboard``).
    """

    def __init__(self, out: Path, completed: int = 0, enabled: bool | None = None) -> None:
        self.writer: Any = None
        if enabled is False or (enabled is None and not tensorboard_available()):
            return
        if not tensorboard_available():
            raise RuntimeError("run.tensorboard is true but tensorboard is not installed")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(
            log_dir=str(Path(out) / TENSORBOARD_DIR), purge_step=completed or None
        )

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def write(self, row: dict[str, Any]) -> None:
        if self.writer is None:
            return
        step = int(row["iteration"])
        for key, value in row.items():
            if key == "iteration" or not isinstance(value, int | float):
                continue
            value = float(value)
            if math.isfinite(value):
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

"""How many CPU threads torch should use, from the cores this process may run on and what
else keeps them busy.

torch's OpenMP threads busy-wait for each other: with one core taken by another process, two
threads on two cores run slower than one (a train step measured 26.8 s with 2 threads
against 18.6 s with 1, docs/benchmarks.md). :class:`ThreadGovernor` counts the cores of
``os.sched_getaffinity``, subtracts the CPU time other processes used on them since its
last look (``/proc/stat`` less this process's own time), and sets ``torch.set_num_threads``
to what is left, between iterations. ``run.threads`` fixes the count instead (a run's float
results may depend on the thread count: fix it for bit-exact reruns).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _busy_jiffies(cores: set[int] | None) -> float | None:
    """Busy time (clock ticks) of ``cores`` since boot from ``/proc/stat``; None off Linux."""
    try:
        lines = Path("/proc/stat").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    busy = 0.0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cores is not None and int(name[3:]) not in cores:
            continue
        values = [float(v) for v in rest.split()]
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
        busy += sum(values[:8]) - idle
    return busy


class ThreadGovernor:
    """Sets torch's thread count to the cores other processes left free (see the module
    doc). ``fixed`` > 0: always that many."""

    def __init__(self, fixed: int = 0) -> None:
        self.fixed = fixed
        self.cores = usable_cores()
        try:
            self._mask: set[int] | None = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._mask = None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, float, float] | None = None
        self._estimate: float | None = None
        self.threads = fixed or self.cores

    def _sample(self) -> tuple[float, float, float] | None:
        busy = _busy_jiffies(self._mask)
        if busy is None:
            return None
        return time.monotonic(), busy / self._tick, time.process_time()

    def others_busy(self, probe_seconds: float = 0.25) -> float | None:
        """Cores' worth of CPU time other processes used since the last call (the first
        call watches ``probe_seconds``; a call sooner than that after the last one repeats
        its answer, the clock ticks being too coarse); None where it cannot be measured."""
        if self._last is None:
            self._last = self._sample()
            if self._last is None:
                return None
            time.sleep(probe_seconds)
        now = self._sample()
        if now is None or self._last is None:
            return None
        wall, busy, own = (b - a for a, b in zip(self._last, now, strict=True))
        if wall < probe_seconds and self._estimate is not None:
            return self._estimate
        self._last = now
        self._estimate = max(0.0, (busy - own) / wall) if wall > 0 else 0.0
        return self._estimate

    def update(self) -> int:
        """Chooses and sets the thread count for the next stretch of work; returns it."""
        import torch

        if self.fixed:
            threads = self.fixed
        else:
            others = self.others_busy()
            free = self.cores if others is None else self.cores - others
            threads = int(min(self.cores, max(1, round(free))))
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        self.threads = threads
        return threads

"""What one request may ask for, how requests are batched, and the range of each setting.

Every setting has a range (:data:`BOUNDS`), checked where it is set: :class:`Limits` raises
``ValueError`` and the command line refuses the flag (exit status 2). The upper ends keep a
setting from being a denial of service by itself: a request body is held in memory, Lucene
allocates a queue of ``topk`` hits per query, and every request waits out the batch window.
This module needs neither FastAPI nor uvicorn, so the command line can check flags first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from retrieval_server.batcher import MAX_WINDOW_S

#: setting -> (lowest, highest) value, both allowed.
BOUNDS: dict[str, tuple[float, float]] = {
    "max_queries": (1, 100_000),
    "max_query_chars": (1, 1 << 20),
    "max_topk": (1, 10_000),
    "default_topk": (1, 10_000),
    "max_body_bytes": (1, 1 << 30),
    "max_batch": (1, 100_000),
    "batch_window_s": (0.0, MAX_WINDOW_S),
    "read_timeout_s": (0.1, 3600.0),
}


def problem_with(value: object, kind: type, low: float, high: float) -> str | None:
    """Says what is wrong with ``value`` as a ``kind`` (int or float) in ``[low, high]``.

    Returns None when nothing is: an int is a real int (not a bool), a float any finite
    number (an int too); both within the bounds.
    """
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"must be an integer in [{low}, {high}]"
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        return f"must be a finite number in [{low}, {high}]"
    return None


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how requests are batched.

    Attributes:
      max_queries: the most queries in one request.
      max_query_chars: the longest query, in characters.
      max_topk: the largest ``topk``.
      default_topk: ``topk`` when the request gives none (Search-R1 uses 3).
      max_body_bytes: the largest request body, in bytes.
      max_batch: the most queries in one backend call.
      batch_window_s: how long a request waits for others to batch with, in seconds.
      read_timeout_s: the longest a request may take to send its body, in seconds; a
        client still sending then gets a 408 and its connection is closed.

    Raises:
      ValueError: a setting outside its range in :data:`BOUNDS` (not finite included), or
        ``default_topk`` over ``max_topk``; the message names the setting.
    """

    max_queries: int = 512
    max_query_chars: int = 4096
    max_topk: int = 100
    default_topk: int = 3
    max_body_bytes: int = 4 << 20
    max_batch: int = 256
    batch_window_s: float = 0.002
    read_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for setting in fields(self):
            value = getattr(self, setting.name)
            kind = type(setting.default)  # int or float
            problem = problem_with(value, kind, *BOUNDS[setting.name])
            if problem is not None:
                raise ValueError(f"Limits.{setting.name} {problem}, got {value!r}")
        if self.default_topk > self.max_topk:
            raise ValueError(
                f"Limits.default_topk must be in [1, max_topk], got {self.default_topk}"
            )

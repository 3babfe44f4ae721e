"""Files a run writes, written so that a crash at any instant leaves the old file or the new
one, never a part of either.

A file is written next to its target under a hidden temporary name, flushed to disk, and
renamed over the target (``os.replace`` is atomic on POSIX and on Windows within one
volume). A temporary file left by a crash is ignored by every reader and overwritten by the
next write.
"""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically (see the module docstring); returns ``path``."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with temporary.open("wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))

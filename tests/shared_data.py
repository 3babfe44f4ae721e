"""Where the project's real test data lives: ``<repo>/../shared/data`` or ``$GIGPO_SHARED_DATA``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir(name: str, expected: str) -> Path:
    """The shared data folder ``name`` (e.g. ``"webshop"``), which must hold ``expected``.

    Fails the calling test (or its module's collection) with a clear message when the data
    is missing: the tests never skip for it.
    """
    root = os.environ.get("GIGPO_SHARED_DATA")
    path = (Path(root) if root else REPO.parent / "shared" / "data") / name
    if not (path / expected).exists():
        pytest.fail(
            f"the shared test data is missing: {path / expected} (put the project's shared/ "
            "beside the repository, or set $GIGPO_SHARED_DATA)",
            pytrace=False,
        )
    return path

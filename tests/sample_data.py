"""Where the tests find the real data samples the repository carries: ``<repo>/data/samples``."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "data" / "samples"


def sample_dir(name: str, expected: str) -> Path:
    """The sample folder ``data/samples/<name>`` (e.g. ``"webshop"``), which must hold ``expected``.

    Fails the calling test (or its module's collection) with a clear message when the file is
    missing (a broken checkout): the tests never skip for it.
    """
    path = SAMPLES / name
    if not (path / expected).exists():
        pytest.fail(f"a data sample is missing from the checkout: {path / expected}", pytrace=False)
    return path

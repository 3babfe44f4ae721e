"""tests/envs: the helpers beside the tests (numberline_checks.py) importable by name."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside the tests

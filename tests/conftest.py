import sys
from pathlib import Path

import pytest

# Test modules import helpers that live in tests/ (sample_data.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """``tox -e openrlhf`` collects tests/training only: an ``openrlhf`` test elsewhere would
    run nowhere (the py env deselects the mark), so it is an error."""
    training = Path(__file__).resolve().parent / "training"
    for item in items:
        if item.get_closest_marker("openrlhf") and training not in Path(item.path).parents:
            raise pytest.UsageError(f"{item.nodeid}: openrlhf tests must live in {training}")

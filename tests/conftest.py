import sys
from pathlib import Path

import pytest

# Test modules import helpers that live in tests/ (sample_data.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))


#: The folders whose every test carries a mark, each run by its own tox env.
MARKED_FOLDERS = ("verl", "verl_e2e", "openrlhf_e2e", "vllm")


def pytest_collection_modifyitems(config, items):
    """Marks every test in :data:`MARKED_FOLDERS` with its folder's name. ``tox -e openrlhf``
    collects tests/training only, ``tox -e verl`` tests/verl only, ``tox -e verl-e2e``
    tests/verl_e2e only, ``tox -e openrlhf-e2e`` tests/openrlhf_e2e only and ``tox -e vllm``
    tests/vllm only (the py env ignores them): a test marked for one of them elsewhere would
    run nowhere, so it is an error."""
    here = Path(__file__).resolve().parent
    for item in items:
        parents = Path(item.path).parents
        for mark in MARKED_FOLDERS:
            if here / mark in parents:
                item.add_marker(getattr(pytest.mark, mark))
        for mark, folder in (("openrlhf", here / "training"), ("verl", here / "verl"),
                             ("verl_e2e", here / "verl_e2e"),
                             ("openrlhf_e2e", here / "openrlhf_e2e"),
                             ("vllm", here / "vllm")):  # fmt: skip
            if item.get_closest_marker(mark) and folder not in parents:
                raise pytest.UsageError(f"{item.nodeid}: {mark} tests must live in {folder}")

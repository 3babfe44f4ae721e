"""The shape of ``training/`` (docs/design.md, "Layout"): small files, and a local trainer
that only its own modules and the command-line entry points import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("training", "gigpo_algo", "gigpo_envs", "retrieval_server")
#: The design's bound on a module's length, in lines.
MAX_LINES = 400


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, at the top or inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_training_module_is_over_the_line_bound():
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules("training")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_only_the_local_trainer_and_the_entry_points_import_it():
    allowed = (REPO / "training" / "local", REPO / "training" / "cli")
    offenders = []
    for package in PACKAGES:
        for path in _modules(package):
            if any(path.is_relative_to(folder) for folder in allowed):
                continue
            bad = sorted(n for n in _imported(path) if n == "training.local" or
                         n.startswith("training.local."))  # fmt: skip
            if bad:
                offenders.append(f"{path.relative_to(REPO)}: {bad}")
    assert not offenders, "\n".join(offenders)


def test_the_check_above_sees_imports_inside_functions(tmp_path):
    # The rule above can fail: a function-level import is found like a top-level one.
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from training.local.train import train\n")
    assert "training.local.train" in _imported(module)


def test_the_shared_layers_import_no_trainer():
    """records, settings, advantages, stats, record_files, text and files are what both
    trainers build on: they import neither trainer."""
    shared = ("records", "settings", "advantages", "stats", "record_files", "text", "files")
    for name in shared:
        imports = _imported(REPO / "training" / f"{name}.py")
        bad = sorted(n for n in imports if n.startswith(("training.local", "training.openrlhf")))
        assert not bad, f"training/{name}.py imports {bad}"


@pytest.mark.parametrize("folder", ["local", "openrlhf", "cli"])
def test_each_package_docstring_names_its_modules(folder):
    import importlib

    package = importlib.import_module(f"training.{folder}")
    names = {p.stem for p in (REPO / "training" / folder).glob("*.py")} - {"__init__", "__main__"}
    missing = sorted(n for n in names if n not in (package.__doc__ or ""))
    assert not missing, f"training/{folder}/__init__.py does not name {missing}"


def test_the_trainer_usage_lists_every_estimator():
    from training.local.__main__ import USAGE
    from training.settings import TRAINER_ESTIMATORS

    missing = [e for e in TRAINER_ESTIMATORS if e.upper() not in USAGE.upper()]
    assert not missing, f"python -m training.local's usage leaves out {missing}"

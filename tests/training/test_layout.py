"""The shape of the code (docs/design.md, "Layout" and "Direction of dependencies"): small
files in ``training/``, no import cycle anywhere, and imports only in the stated direction,
between the top-level packages and between ``training/``'s layers."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("training", "gigpo_algo", "gigpo_envs", "retrieval_server")
#: The design's bound on a module's length, in lines.
MAX_LINES = 400


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _imported(path: Path, package: str = "") -> set[str]:
    """Every module name ``path`` imports, at the top or inside functions; a relative import
    (``from .plan import x``) resolved against ``package``, the package ``path`` is in."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_no_training_module_is_over_the_line_bound():
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules("training")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


#: A command line only reads its arguments and calls into the package that does the work
#: (docs/design.md): its module stays short.
MAX_CLI_LINES = 200


def test_no_command_line_module_is_over_its_bound():
    long = {
        str(p.relative_to(REPO)): n
        for p in sorted((REPO / "training" / "cli").glob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_CLI_LINES
    }
    assert not long, f"over {MAX_CLI_LINES} lines: {long}"


#: Which top-level package may import which (docs/design.md, "Direction of dependencies").
TOP_ALLOWED = {
    "gigpo_algo": set(),
    "retrieval_server": set(),
    "gigpo_envs": {"retrieval_server"},
    "training": {"gigpo_algo", "gigpo_envs", "retrieval_server"},
}
#: training/'s layers, lowest first (docs/design.md, "Direction of dependencies"): a module
#: imports its own package and the layers below, never a sibling of its layer nor a layer
#: above. "training" is the shared modules at its top (records, settings, advantages, ...).
TRAINING_LAYERS = (
    ("training",),
    ("training.local", "training.openrlhf", "training.verl"),
    ("training.viewer", "training.evaluation", "training.study"),
    ("training.cli",),
)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (at the top or inside functions),
    for every module under ``root/<package>``."""
    paths = {
        _module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))
    }
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {n for n in _imported(path, package) if n in paths and n != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one
    module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _layer(module: str) -> tuple[int, str]:
    """(layer, package) of a training module: its subpackage's layer, or 0 for a shared
    module at the top of training/."""
    parts = module.split(".")
    package = ".".join(parts[:2])
    for level, names in enumerate(TRAINING_LAYERS):
        if package in names:
            return level, package
    if len(parts) <= 2:
        return 0, "training"
    raise AssertionError(f"{module}: {package} has no layer in TRAINING_LAYERS")


def _wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import against the stated direction: between top-level packages
    (:data:`TOP_ALLOWED`), and inside training/ to a sibling or a layer above
    (:data:`TRAINING_LAYERS`). A ``__main__`` module is an entry point (nothing imports it):
    it may import any layer."""
    bad = []
    for module, imports in sorted(graph.items()):
        top = module.split(".")[0]
        for name in sorted(imports):
            other = name.split(".")[0]
            if name.endswith(".__main__"):
                bad.append(f"{module} imports the entry point {name}")
            elif other != top and other not in TOP_ALLOWED[top]:
                bad.append(f"{module} imports {name}")
            elif top == other == "training" and not module.endswith(".__main__"):
                (mine, package), (theirs, their_package) = _layer(module), _layer(name)
                if theirs > mine or (theirs == mine and their_package != package):
                    bad.append(f"{module} (layer {mine}) imports {name} (layer {theirs})")
    return bad


def test_no_import_cycle():
    cycles = _cycles(_graph(REPO, PACKAGES))
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_imports_follow_the_stated_direction():
    bad = _wrong_way(_graph(REPO, PACKAGES))
    assert not bad, "\n".join(bad)


def test_every_training_package_has_a_layer():
    packages = {
        f"training.{p.name}" for p in (REPO / "training").iterdir() if (p / "__init__.py").is_file()
    }
    assert packages == {name for names in TRAINING_LAYERS for name in names} - {"training"}


def test_the_checks_above_can_fail(tmp_path):
    # A cycle through a function-level import, and an import of a layer above, are found.
    (tmp_path / "training" / "local").mkdir(parents=True)
    (tmp_path / "training" / "cli").mkdir()
    for folder in ("training", "training/local", "training/cli"):
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "training" / "records.py").write_text(
        "def f():\n    from training.stats import g\n"
    )
    (tmp_path / "training" / "stats.py").write_text("from training.records import f\n")
    (tmp_path / "training" / "local" / "train.py").write_text("import training.cli.view\n")
    (tmp_path / "training" / "cli" / "view.py").write_text("from ..local.train import x\n")
    (tmp_path / "training" / "cli" / "__main__.py").write_text("from training.local import train\n")
    (tmp_path / "training" / "text.py").write_text("import training.cli.__main__\n")
    graph = _graph(tmp_path, ("training",))
    assert _cycles(graph) == [
        ["training.cli.view", "training.local.train"],
        ["training.records", "training.stats"],
    ]
    assert _wrong_way(graph) == [
        "training.local.train (layer 1) imports training.cli.view (layer 3)",
        "training.text imports the entry point training.cli.__main__",
    ]


@pytest.mark.parametrize(
    "folder", ["local", "openrlhf", "verl", "cli", "viewer", "evaluation", "study"]
)
def test_each_package_docstring_names_its_modules(folder):
    """Each package says what it holds, module by module, and which module to read first
    (the packages made for the viewer, evaluation, the study and the command lines name
    their modules in full)."""
    package = importlib.import_module(f"training.{folder}")
    doc = package.__doc__ or ""
    names = {p.stem for p in (REPO / "training" / folder).glob("*.py")} - {"__init__", "__main__"}
    full = folder in ("cli", "viewer", "evaluation", "study")
    missing = sorted(n for n in names if (f"training.{folder}.{n}" if full else n) not in doc)
    assert not missing, f"training/{folder}/__init__.py does not name {missing}"
    assert re.search(rf"Read :mod:`training\.{folder}\.\w+`", doc), (
        f"training.{folder}: what to read first?"
    )


def test_the_trainer_usage_lists_every_estimator():
    from training.local.__main__ import USAGE
    from training.settings import TRAINER_ESTIMATORS

    missing = [e for e in TRAINER_ESTIMATORS if e.upper() not in USAGE.upper()]
    assert not missing, f"python -m training.local's usage leaves out {missing}"

"""A suite's data: generated once where the suite has a recipe, then every file hashed and
checked against its pin (:mod:`training.evaluation.suites` loads the suite and its data roots).

A pinned file that is missing or whose SHA-256 differs is an error naming it. Data that
could not be hashed when its suite was written is hashed here into a manifest, which
``--data-manifest`` compares with an earlier run's, file by file.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from training.evaluation.suites import Suite, SuiteError


def prepare_data(suite: Suite) -> dict[str, Any]:
    """Generates the suite's data if it has a recipe and none is there yet, then hashes
    every file it reads and checks each one it pins.

    Returns:
        ``{"sha256": digest of the manifest, "files": {path: sha256}, "pinned": bool}``;
        paths are relative to the data root they sit in, prefixed with its name.

    Raises:
        SuiteError: a missing file (with how to get it), or one whose hash is not its pin.
    """
    if "generate" in suite.data:
        _generate(suite, suite.data["generate"])
    pins: dict[str, str] | None = suite.data.get("files")
    if pins is not None:
        files = {name: _root_path(suite, name) for name in pins}
    else:
        files = {}
        for pattern in suite.data.get("read", []):
            files.update(_read_files(suite, pattern))
    manifest = {}
    for name, path in sorted(files.items()):
        if not path.is_file():
            raise SuiteError(f"suite {suite.name}: data file {path} is missing; {_hint(suite)}")
        manifest[name] = file_sha256(path)
        if pins is not None and manifest[name] != pins[name]:
            raise SuiteError(
                f"suite {suite.name}: data file {path} changed: sha256 {manifest[name]} is not "
                f"the suite's pin {pins[name]}; the suite measures the pinned data only"
            )
    return {"sha256": manifest_sha256(manifest), "files": manifest, "pinned": pins is not None}


def check_manifest(manifest: dict[str, str], expected_path: str | Path) -> None:
    """Raises :class:`SuiteError` naming the first file whose hash differs from
    ``expected_path``'s (a ``data_manifest.json`` an earlier run wrote)."""
    try:
        expected = json.loads(Path(expected_path).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SuiteError(f"--data-manifest {expected_path}: not a data manifest ({exc})") from exc
    for name in sorted(set(expected) | set(manifest)):
        if expected.get(name) != manifest.get(name):
            what = "missing here" if name not in manifest else (
                "not in the manifest" if name not in expected else "changed")  # fmt: skip
            raise SuiteError(f"data file {name} {what} (checked against {expected_path})")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_sha256(manifest: dict[str, str]) -> str:
    """One digest of a ``{path: sha256}`` manifest (sorted ``path\\tsha256`` lines)."""
    text = "".join(f"{name}\t{digest}\n" for name, digest in sorted(manifest.items()))
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------- internals


def _root_path(suite: Suite, name: str, key: str = "data path") -> Path:
    """``root/rest`` under the data root ``root`` names (``cache/...``, ``alfworld/...``)."""
    root, _, rest = name.partition("/")
    if not isinstance(suite.roots.get(root), Path):
        raise SuiteError(f"suite {suite.name}: {key} {name!r} starts with no data root")
    return Path(suite.roots[root]) / rest


def _read_files(suite: Suite, pattern: str) -> dict[str, Path]:
    """The files an unpinned ``data.read`` entry names: ``root/path`` or ``root/glob``."""
    target = _root_path(suite, pattern, "data.read")
    if not any(c in pattern for c in "*?["):
        return {pattern: target}
    root_name, _, rest = pattern.partition("/")
    root = Path(suite.roots[root_name])
    found = {f"{root_name}/{p.relative_to(root).as_posix()}": p for p in root.glob(rest)}
    if not found:
        raise SuiteError(f"suite {suite.name}: no file matches {root / rest}; {_hint(suite)}")
    return found


def _hint(suite: Suite) -> str:
    hints = {
        "alfworld": "run `alfworld-download` (or set $ALFWORLD_DATA, or pass --data-dir)",
        "webshop": "put WebShop's items_shuffle_1000.json, items_ins_v2_1000.json and "
        "items_human_ins.json in $WEBSHOP_DATA (or pass --data-dir)",
        "flashrag": "set $FLASHRAG_DATA to FlashRAG's dataset folder (<dataset>/<split>.jsonl) "
        "or pass --data-dir",
        "samples": "the sample suites read the repository's data/samples/ (or --data-dir)",
        "cache": "remove the cache folder to generate it again",
    }
    used = json.dumps([suite.env, suite.data, [p.kwargs for p in suite.parts]])
    return "; ".join(text for name, text in hints.items() if "{" + name + "}" in used
                     or f'"{name}/' in used) or "see docs/evaluation.md"  # fmt: skip


def _generate(suite: Suite, recipe: dict[str, Any]) -> None:
    """Writes generated data into ``{cache}`` once (in a temporary folder, then renamed,
    so a crash or a second process never leaves half a tree)."""
    target = Path(suite.roots["cache"])
    if target.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"suite {suite.name}: writing its data into {target} (once; 120 ALFWorld games "
          "take a few minutes)", file=sys.stderr)  # fmt: skip
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        kind = recipe.get("kind")
        if kind == "alfworld":
            from gigpo_envs.alfworld.generate import generate_games

            generate_games(staging, int(recipe["num_games"]), seed=int(recipe["seed"]),
                           split=str(recipe["split"]))  # fmt: skip
        elif kind == "webshop":
            from gigpo_envs.webshop.catalog import write_catalog

            write_catalog(staging / "webshop", int(recipe["num_products"]), int(recipe["seed"]))
        else:
            raise SuiteError(f"suite {suite.name}: data.generate.kind {kind!r} is unknown")
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # another process finished first: theirs is the same
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)

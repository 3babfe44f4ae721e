"""A suite's data: generated once where the suite has a recipe, then every file hashed and
checked against its pin (:mod:`training.evaluation.suite_file` loads the suite and its data roots).

A pinned file that is missing or whose SHA-256 differs is an error naming it. Data that
could not be hashed when its suite was written is hashed here into a manifest, which
``--data-manifest`` compares with an earlier run's, file by file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from training.evaluation.suite_file import DEFAULT_CACHE, Suite, SuiteError
from training.guarded import GuardError, read_json_file
from training.text import bound_text, show


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
    ``expected_path``'s (a ``data_manifest.json`` an earlier run wrote), or naming what
    makes that file no manifest: it is read by the guarded reader (size, depth, digits), its
    ``files`` must map paths to SHA-256 hex digests, and its ``sha256`` (when there) must be
    their digest (:func:`manifest_sha256`)."""
    where = f"--data-manifest {expected_path}"
    try:
        data = read_json_file(expected_path, "--data-manifest")
    except GuardError as exc:
        raise SuiteError(f"{exc}: not a data manifest") from None
    expected = data.get("files")
    if not isinstance(expected, dict):
        raise SuiteError(f"{where}: 'files' must be an object of path -> sha256, got "
                         f"{show(expected)}")  # fmt: skip
    for name, digest in expected.items():
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise SuiteError(f"{where}: files.{bound_text(name, 300)} must be a sha256 hex "
                             f"digest, got {show(digest)}")  # fmt: skip
    if "sha256" in data and data["sha256"] != manifest_sha256(expected):
        raise SuiteError(f"{where}: its sha256 {show(data['sha256'])} is not the digest of its "
                         "files (edited by hand?)")  # fmt: skip
    for name in sorted(set(expected) | set(manifest)):
        if expected.get(name) != manifest.get(name):
            what = "missing here" if name not in manifest else (
                "not in the manifest" if name not in expected else "changed")  # fmt: skip
            raise SuiteError(f"data file {bound_text(name, 300)} {what} (checked against "
                             f"{expected_path})")  # fmt: skip


_SHA256 = re.compile(r"[0-9a-f]{64}")


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


def _root_path(suite: Suite, name: str, key: str = "data.files") -> Path:
    """``root/rest`` under the data root ``root`` names (``cache/...``, ``alfworld/...``).

    Raises:
        SuiteError: ``name`` starts with no data root, or resolves (``..``, a symlink)
            outside it; the message names the suite key ``key``.
    """
    root, _, rest = name.partition("/")
    if not isinstance(suite.roots.get(root), Path):
        raise SuiteError(f"suite {suite.name}: {key} {show(name)} starts with no data root")
    return _inside(suite, Path(suite.roots[root]), Path(suite.roots[root]) / rest, key, name)


def _inside(suite: Suite, root: Path, path: Path, key: str, name: str) -> Path:
    """``path`` if it resolves (symlinks and ``..`` followed) inside ``root``; a file outside
    the data would be hashed into the manifest (``samples/../../etc/passwd``)."""
    resolved, top = path.resolve(), root.resolve()
    if resolved != top and top not in resolved.parents:
        raise SuiteError(
            f"suite {suite.name}: {key} {show(name)} resolves to {show(str(resolved))}, "
            f"outside its data root {top}; a suite reads only the files under its roots"
        )
    return path


def _read_files(suite: Suite, pattern: str) -> dict[str, Path]:
    """The files an unpinned ``data.read`` entry names: ``root/path`` or ``root/glob``."""
    target = _root_path(suite, pattern, "data.read")
    if not any(c in pattern for c in "*?["):
        return {pattern: target}
    root_name, _, rest = pattern.partition("/")
    root = Path(suite.roots[root_name])
    found = {}
    for path in root.glob(rest):  # each match checked: a symlink in the tree may lead out
        found[f"{root_name}/{path.relative_to(root).as_posix()}"] = _inside(
            suite, root, path, "data.read", pattern
        )
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
        "cache": f"remove {suite.roots.get('cache')} to generate it again (the cache is "
        f"$GIGPO_SUITE_CACHE/<suite>, default {DEFAULT_CACHE}/<suite>)",
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
    kind = recipe.get("kind")
    what = {
        "alfworld": f"{recipe.get('num_games')} ALFWorld games, about a second each",
        "webshop": f"{recipe.get('num_products')} WebShop products, about 20,000 a second",
    }.get(str(kind), "")
    print(f"suite {suite.name}: writing its data into {target} (once; {what})", file=sys.stderr)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as exc:
        raise SuiteError(f"suite {suite.name}: cannot write its data into {target} ({exc}); "
                         f"{_cache_variable()}") from exc  # fmt: skip
    try:
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
    except OSError as exc:  # a full disk, a folder made read-only meanwhile
        raise SuiteError(f"suite {suite.name}: cannot write its data into {target} ({exc}); "
                         f"{_cache_variable()}") from exc  # fmt: skip
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cache_variable() -> str:
    """Where the generated data goes, for a message: ``$GIGPO_SUITE_CACHE`` and its value."""
    value = os.environ.get("GIGPO_SUITE_CACHE")
    now = f"now {show(value)}" if value else f"unset, so {DEFAULT_CACHE}"
    return f"set $GIGPO_SUITE_CACHE to a writable folder ({now})"

"""The paths a suite may name: every data file under a data root, and every path an env
reads (a suite's ``env.kwargs`` and ``parts[i].kwargs``) under one too and covered by the
files the suite hashes, so that a suite's data manifest pins all that its numbers depend on.

Each check returns the problem in words (the caller raises it as a ``SuiteError`` naming the
suite file), or None.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from training.text import show

#: The roots a ``data.files`` or ``data.read`` path may start with.
DATA_ROOTS = ("samples", "cache", "alfworld", "webshop", "flashrag")
_ROOTED = re.compile(r"\{(" + "|".join(DATA_ROOTS) + r")\}(?:/(.*))?", re.S)


def data_path_problem(name: Any, key: str) -> str | None:
    """Why ``name`` is not ``root/relative/path`` inside one data root: an unknown root, an
    absolute rest or a ``..`` part (``samples/../../etc/passwd`` would hash a file outside
    the data; :mod:`training.evaluation.data` checks symlinks when it reads); None if it is."""
    root, _, rest = str(name).partition("/")
    if not isinstance(name, str) or root not in DATA_ROOTS or not rest.strip("/"):
        roots = ", ".join(DATA_ROOTS)
        return f"{key} must be a path under a data root ({roots}/...), got {show(name)}"
    if rest.startswith("/") or ".." in rest.split("/"):
        return (
            f"{key} {show(name)} leaves its data root {root}/: a relative path without '..' "
            "parts is expected"
        )
    return None


def kwarg_path_problem(value: Any, key: str, data: dict[str, Any]) -> str | None:
    """Why an env kwarg (``key``, its dotted name; lists and mappings searched) reads data
    the suite does not pin: a path not under a data root placeholder (``/data/x``,
    ``~/x``, ``../x``, ``a/b``), one that leaves its root, or one that no ``data.files`` or
    ``data.read`` entry covers (the file itself, a file under the folder it names, or a
    pattern that matches it); None when every path in it is covered."""
    if isinstance(value, dict):
        items = [(f"{key}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    else:
        return _one_path_problem(value, key, data) if isinstance(value, str) else None
    for child_key, child in items:
        if problem := kwarg_path_problem(child, child_key, data):
            return problem
    return None


def _one_path_problem(value: str, key: str, data: dict[str, Any]) -> str | None:
    rooted = _ROOTED.fullmatch(value)
    if rooted is None:
        if any("{" + root + "}" in value for root in DATA_ROOTS):
            return f"{key} {show(value)}: a data root placeholder must start the path"
        if "://" in value or not _looks_like_a_path(value):
            return None  # a URL (the retriever's) or plain text: no file the suite reads
        return (
            f"{key} {show(value)} is a path outside the suite's data roots: start it with a "
            f"data root ({', '.join('{' + r + '}' for r in DATA_ROOTS)}) so that it is hashed"
        )
    root, rest = rooted.group(1), (rooted.group(2) or "").strip("/")
    name = f"{root}/{rest}" if rest else root
    if rest and (problem := data_path_problem(name, key)):
        return problem
    entries = [*data.get("files", {}), *data.get("read", [])]
    if not any(_covers(entry, name) for entry in entries):
        return (
            f"{key} {show(value)} is read by the env but no data.files or data.read entry "
            f"covers {name}: the suite would not hash it; list its files there"
        )
    return None


def _looks_like_a_path(text: str) -> bool:
    return text.startswith(("/", "~", ".")) or "/" in text or "\\" in text


def _covers(entry: str, name: str) -> bool:
    """Whether the data entry ``entry`` (a file or a glob) is ``name`` or lies under it."""
    return entry == name or fnmatch.fnmatchcase(name, entry) or entry.startswith(name + "/")

"""The one guarded reader of the YAML and JSON the project reads: configs, study and suite
files, override values, and every file a command reads back (``run.json``, manifests,
summaries, episode and metrics rows, checkpoint states, a run's ``config.json``).

Every read holds to the same limits, and breaks them with one error, :class:`GuardError`,
whose message names the file (and line, for JSON lines) and the problem in a bounded
number of characters:

* **size**: at most :data:`MAX_YAML_BYTES` of YAML, :data:`MAX_JSON_BYTES` of a JSON file,
  :data:`MAX_LINE_BYTES` a JSON line and :data:`MAX_JSONL_BYTES` a JSON-lines file (a file
  is read up to its limit and one byte more, never whole when it is larger);
* **depth**: mappings and lists nested at most :data:`MAX_DEPTH` levels (the top-level
  value is level 1);
* **integers**: at most :data:`MAX_INT_DIGITS` digits (Python's own limit would otherwise
  raise a bare ``ValueError`` deep inside the parser, and a long one is slow to read);
* **YAML**: no anchors or aliases (``&name``, ``*name``: a few lines of aliases expand to
  gigabytes); no key twice in one mapping (PyYAML keeps the last silently; the error names
  the dotted key and both lines); PyYAML's safe loader only (no tags that build objects);
* **NaN and Infinity**: refused in JSON by default (``NaN``, ``Infinity``, and a number
  past float's range such as ``1e400``); a reader that may meet them (a run's
  ``config.json``, whose free-form ``env.kwargs`` may hold YAML's ``.inf``) passes
  ``nonfinite=True``. YAML's ``.nan`` and ``.inf`` are read as floats: the config's checks
  judge each setting's value.

This module imports nothing from ``training``'s subpackages; their errors (``ConfigError``,
``SuiteError``) wrap a :class:`GuardError` where a command reports it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from training.files import open_regular
from training.text import bound_text

__all__ = [
    "MAX_DEPTH", "MAX_INT_DIGITS", "MAX_JSONL_BYTES", "MAX_JSON_BYTES", "MAX_LINE_BYTES",
    "MAX_YAML_BYTES", "GuardError", "ParseError", "load_json", "load_json_line", "load_yaml",
    "read_json_file", "read_json_lines", "read_limited",
]  # fmt: skip

#: Mappings and lists nested deeper than this are refused (the project's files nest 2-4).
MAX_DEPTH = 32
#: An integer written with more digits than this is refused (a seed has at most 10).
MAX_INT_DIGITS = 100
#: The most bytes of YAML read (a config or study file is a few KB).
MAX_YAML_BYTES = 1 << 20
#: The most bytes of one JSON file (a manifest of every ALFWorld game is ~1 MB).
MAX_JSON_BYTES = 64 << 20
#: The most bytes of one JSON line (an episode row with its steps' texts is ~100 KB).
MAX_LINE_BYTES = 16 << 20
#: The most bytes of one JSON-lines file (a full suite's episodes are ~100 MB).
MAX_JSONL_BYTES = 1 << 30

_WHERE_CHARS = 300  # of a file name or other place named in a message


class GuardError(ValueError):
    """YAML or JSON that is not read: too large, too deep, an alias, an integer of too many
    digits, NaN where none is accepted, not YAML or JSON, or not the kind of value
    expected. The message names the file (and line) and the problem."""


class ParseError(GuardError):
    """Text that is not YAML (or not JSON) at all; an override's value then is plain text."""


def load_yaml(
    text: str, where: str, *, max_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """Parses YAML ``text`` (from ``where``: a file or an override) with PyYAML's safe
    loader under the module's limits.

    Raises:
        GuardError: over ``max_bytes``, an anchor or alias, nested deeper than
            ``max_depth``, an integer of over :data:`MAX_INT_DIGITS` digits (the message
            names the dotted key, line and column), or not YAML.
    """
    import yaml

    where = bound_text(where, _WHERE_CHARS)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise GuardError(f"{where}: {size} bytes of YAML, over the limit of {max_bytes}")
    loader = _yaml_loader()(text, where, max_depth)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ParseError(f"{where} is not valid YAML: {bound_text(exc, 500)}") from None
    except RecursionError:
        raise GuardError(f"{where}: nested too deeply to read") from None
    finally:
        loader.dispose()


def load_json(
    text: str | bytes,
    where: str,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_DEPTH,
    nonfinite: bool = False,
    expect: type | None = None,
) -> Any:
    """Parses JSON ``text`` (from ``where``) under the module's limits.

    Args:
        nonfinite: read ``NaN``, ``Infinity`` and numbers past float's range as floats
            (else each is refused).
        expect: the type the top-level value must be (``dict``: a JSON object), or None.

    Raises:
        GuardError: over ``max_bytes``, nested deeper than ``max_depth``, an integer of over
            :data:`MAX_INT_DIGITS` digits, a refused NaN or Infinity, not JSON (line and
            column named), or not an ``expect``.
    """
    where = bound_text(where, _WHERE_CHARS)
    if len(text) > max_bytes:
        raise GuardError(f"{where}: {len(text)} bytes of JSON, over the limit of {max_bytes}")
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float if not nonfinite else float,
            parse_constant=_refuse_constant if not nonfinite else float,
        )
    except _Refused as exc:
        raise GuardError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        raise GuardError(f"{where} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RecursionError:
        raise GuardError(f"{where}: nested too deeply to read (over {max_depth} levels)") from None
    depth = _depth(value, max_depth)
    if depth > max_depth:
        raise GuardError(f"{where}: nested deeper than {max_depth} levels")
    if expect is not None and not isinstance(value, expect):
        raise GuardError(
            f"{where}: expected {_KIND.get(expect, expect.__name__)}, got "
            f"{_KIND.get(type(value), type(value).__name__)}"
        )
    return value


def load_json_line(line: str | bytes, where: str, number: int, **limits: Any) -> Any:
    """One line of a JSON-lines file (``where``, line ``number`` from 1) under the limits
    (:data:`MAX_LINE_BYTES` unless ``max_bytes`` is given; other keywords as
    :func:`load_json`).

    Raises:
        GuardError: as :func:`load_json`, naming the file and line.
    """
    limits.setdefault("max_bytes", MAX_LINE_BYTES)
    return load_json(line, f"{bound_text(where, _WHERE_CHARS)} line {number}", **limits)


def read_limited(path: str | os.PathLike[str], what: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, read up to ``max_bytes`` and one more.

    Raises:
        GuardError: it cannot be read, or it is larger than ``max_bytes`` (the limit named).
    """
    where = _where(path, what)
    try:
        with open_regular(path) as handle:  # a FIFO or device is refused, never waited on
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise GuardError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise GuardError(f"{where}: over the limit of {max_bytes} bytes")
    return data


def read_json_file(
    path: str | os.PathLike[str],
    what: str = "",
    *,
    max_bytes: int = MAX_JSON_BYTES,
    nonfinite: bool = False,
    expect: type | None = dict,
) -> Any:
    """The JSON value of the file ``path`` (``what`` it is, for messages: ``"--data-manifest"``,
    ``"run file"``), under the limits; by default it must hold a JSON object.

    Raises:
        GuardError: as :func:`load_json` and :func:`read_limited`, naming ``what`` and the file.
    """
    data = read_limited(path, what, max_bytes)
    return load_json(
        data, _where(path, what), max_bytes=max_bytes, nonfinite=nonfinite, expect=expect
    )


def read_json_lines(
    path: str | os.PathLike[str],
    what: str = "",
    *,
    max_bytes: int = MAX_JSONL_BYTES,
    cut_short: bool = True,
    **limits: Any,
) -> list[tuple[int, Any]]:
    """``(line number, value)`` for every line of a JSON-lines file, under the limits (a
    missing file has none). With ``cut_short``, a last line without its newline (a write a
    crash cut short) is left out; every other line must be a JSON value (blank lines too).
    Nothing at ``path``: no lines; a folder there is an error.

    Raises:
        GuardError: as :func:`load_json_line` and :func:`read_limited`, naming the line.
    """
    if not Path(path).exists():
        return []
    data = read_limited(path, what, max_bytes)  # a folder there: "cannot read it"
    lines = data.split(b"\n")
    last = lines.pop()  # "" when the file ends with its newline
    if last and not cut_short:
        lines.append(last)
    where = _where(path, what)
    return [(n, load_json_line(line, where, n, **limits)) for n, line in enumerate(lines, 1)]


# ----------------------------------------------------------------------------- internals

_KIND = {dict: "a JSON object", list: "a JSON list", str: "a string", int: "an integer",
         float: "a number", bool: "true or false", type(None): "null"}  # fmt: skip


class _Refused(Exception):
    """Raised inside json's hooks (a ValueError would be read as a decoding error)."""


def _where(path: str | os.PathLike[str], what: str) -> str:
    return bound_text(f"{what} {os.fspath(path)}" if what else os.fspath(path), _WHERE_CHARS)


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits} digits; at most {MAX_INT_DIGITS} are read")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {bound_text(text, 40)} is past float's range")
    return value


def _refuse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number this file may hold (NaN and Infinity are refused)")


def _depth(value: Any, limit: int) -> int:
    """How deep ``value``'s lists and dicts nest (a scalar: 0), counted up to ``limit + 1``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


_LOADER: Any = None


def _yaml_loader() -> Any:
    """PyYAML's safe loader that refuses anchors and aliases, and checks depth and integer
    digits as it composes, with the dotted key of each node at hand (built once)."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    int_tag, merge_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:merge"

    class Loader(yaml.SafeLoader):
        def __init__(self, text: str, where: str, max_depth: int) -> None:
            super().__init__(text)
            self.where, self.max_depth, self.keys, self.depth = where, max_depth, [], 0

        def at(self, mark: Any) -> str:
            """``where: dotted.key (line L, column C)``: the place of the node at ``mark``."""
            dotted = "".join(k if k.startswith("[") else f".{k}" for k in self.keys[1:])
            place = f"line {mark.line + 1}, column {mark.column + 1}"
            key = bound_text(dotted.lstrip("."), 200)
            return f"{self.where}: {key} ({place})" if key else f"{self.where} ({place})"

        def refuse_duplicates(self, node: Any) -> None:
            """A mapping that names a key twice is refused (PyYAML would keep the last
            value and drop the first silently), naming the dotted key and both lines."""
            first: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == merge_tag:
                    continue
                if (key.tag, key.value) not in first:
                    first[key.tag, key.value] = key.start_mark.line + 1
                    continue
                self.keys.append(str(key.value))
                place = self.at(key.start_mark)
                self.keys.pop()
                raise GuardError(
                    f"{place}: duplicate key (first on line {first[key.tag, key.value]}); "
                    "name each key once"
                )

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise GuardError(
                    f"{self.at(event.start_mark)}: YAML anchors and aliases (&name, *name) "
                    "are not accepted; write the value out"
                )
            if isinstance(index, yaml.ScalarNode):
                self.keys.append(str(index.value))
            elif isinstance(index, int) and not isinstance(index, bool):
                self.keys.append(f"[{index}]")
            else:
                self.keys.append("(key)" if parent is not None else "")
            container = isinstance(event, yaml.CollectionStartEvent)
            self.depth += container
            try:
                if self.depth > self.max_depth:
                    raise GuardError(
                        f"{self.at(event.start_mark)}: nested deeper than {self.max_depth} levels"
                    )
                node = super().compose_node(parent, index)
                if isinstance(node, yaml.ScalarNode) and node.tag == int_tag:
                    text = node.value.lstrip("+-").replace("_", "")
                    digits = len(text) - (2 if text[:2].lower() in ("0x", "0o", "0b") else 0)
                    if digits > MAX_INT_DIGITS:
                        raise GuardError(
                            f"{self.at(node.start_mark)}: an integer of {digits} digits; at "
                            f"most {MAX_INT_DIGITS} are read"
                        )
                if isinstance(node, yaml.MappingNode):
                    self.refuse_duplicates(node)
                return node
            finally:
                self.keys.pop()
                self.depth -= container

    _LOADER = Loader
    return Loader

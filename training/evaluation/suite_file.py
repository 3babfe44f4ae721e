"""Pinned evaluation suites: exactly what ``gigpo-evaluate --suite NAME`` plays.

A suite is a versioned YAML file in ``training/suites/`` (``NAME.yaml``). It fixes the
env id and kwargs, the tasks (seeds, ALFWorld game paths or every game of a split), the
step limit, history length, prompt and answer budget, the decoding, and the data it reads
with a SHA-256 of every file. Before anything is played the files are hashed: a file that
differs from its pin is an error naming it, so a number always names what it measured.

Data roots are placeholders, resolved here (``--data-dir`` replaces the external ones):

* ``{samples}``: the repository's ``data/samples/`` (the shipped samples; see
  :func:`samples_dir`);
* ``{cache}``: ``$GIGPO_SUITE_CACHE/<suite>`` (default ``~/.cache/gigpo/suites/<suite>``),
  where a suite with a ``data.generate`` entry writes its generated data on first use;
* ``{alfworld}``: ``$ALFWORLD_DATA`` (else ``~/.cache/alfworld``, ``alfworld-download``'s);
* ``{webshop}``: ``$WEBSHOP_DATA``; ``{flashrag}``: ``$FLASHRAG_DATA``.

Data nobody could hash when the suite was written (the real ALFWorld splits, WebShop's and
FlashRAG's files) is pinned by its layout and size (``expect``: the number of games, goals
or questions) and hashed at run time; the manifest goes into the run's summary, and
``--data-manifest`` checks a machine's copy against an earlier run's, file by file.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.evaluation.suite_paths import data_path_problem, kwarg_path_problem
from training.guarded import GuardError, read_limited
from training.local.checks import MAX_SEED
from training.local.config import MAX_CONFIG_BYTES, ConfigError, read_yaml
from training.text import bound_text, did_you_mean, show

#: Where the shipped suites live.
SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"
#: Table layouts (columns): see :mod:`training.evaluation.table`.
LAYOUTS = ("alfworld", "webshop", "searchqa")
#: The config keys a suite fixes; ``--section.key`` overrides of them are refused.
PINNED_KEYS = (
    "env.id", "env.kwargs", "env.history_length", "env.format_instruction", "env.template",
    "rollout.max_new_tokens", "rollout.response_prefix", "rollout.stop_text",
)  # fmt: skip
_EXTERNAL = {"alfworld": "ALFWORLD_DATA", "webshop": "WEBSHOP_DATA", "flashrag": "FLASHRAG_DATA"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
_ROOTS = {"samples", "cache", "alfworld", "webshop", "flashrag", "retriever"}
#: Where generated suite data goes when ``$GIGPO_SUITE_CACHE`` is not set (``<suite>/`` in it).
DEFAULT_CACHE = "~/.cache/gigpo/suites"
#: The most games a suite's ``data.generate`` writes (ALFWorld's training set has 3,553).
MAX_GENERATED_GAMES = 100_000
_ENV_KEYS = {"id", "kwargs", "history_length", "format_instruction", "template"}
_ROLLOUT_KEYS = {"max_new_tokens", "response_prefix", "stop_text"}
_SUITE_KEYS = {"suite", "version", "layout", "description", "env", "rollout", "sampling",
               "data", "parts"}  # fmt: skip
_PART_KEYS = {"name", "kwargs", "tasks", "expect"}


class SuiteError(ConfigError):
    """A suite file that does not load, or data that is missing or not what it pins."""


@dataclass
class Part:
    """One column group of a suite: an env kwargs change and the tasks it plays.

    ``tasks`` is one of ``{"seeds": [...]}``, ``{"count": n}`` (seeds ``0..n-1``),
    ``{"games": [paths]}`` (ALFWorld: game paths relative to ``data_dir``) or
    ``{"all_games": true}`` (every game of the split, ``expect`` of them).
    """

    name: str
    kwargs: dict[str, Any]
    tasks: dict[str, Any]
    expect: int | None = None
    #: The number of games, goals or questions its data holds (set when its tasks are read).
    size: int | None = None


@dataclass
class Suite:
    """A loaded suite file (see the module docstring); ``path`` is where it was read."""

    name: str
    version: int
    layout: str
    description: str
    env: dict[str, Any]
    rollout: dict[str, Any]
    sampling: dict[str, float]
    data: dict[str, Any]
    parts: list[Part]
    path: Path
    roots: dict[str, Path | str] = field(default_factory=dict)

    def overrides(self) -> list[str]:
        """``--section.key=value`` overrides that put the suite's settings into a config
        (the env kwargs of its first part; :func:`set_roots` first)."""
        values = {
            "env.id": self.env["id"],
            "env.kwargs": self.part_kwargs(self.parts[0]),
            "env.history_length": self.env.get("history_length", 2),
            "env.format_instruction": self.env.get("format_instruction"),
            "env.template": self.env.get("template") or {},
            "env.heldout_fraction": 0.0,
            **{f"rollout.{k}": v for k, v in self.rollout.items()},
        }
        return [f"--{key}={json.dumps(value)}" for key, value in values.items()]

    def part_kwargs(self, part: Part) -> dict[str, Any]:
        """The env kwargs of ``part``, with the data roots put in."""
        return self.resolve({**self.env.get("kwargs", {}), **part.kwargs})

    def resolve(self, value: Any) -> Any:
        """``value`` with every ``{root}`` placeholder replaced by its directory."""
        if isinstance(value, str):
            for name, root in self.roots.items():
                value = value.replace("{" + name + "}", str(root))
            return value
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value


def suite_names() -> list[str]:
    """The shipped suites, by name."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def load_suite(name: str | Path) -> Suite:
    """Reads and checks a suite: a shipped name (``alfworld-gen-v1``) or a YAML file.

    Raises:
        SuiteError: an unknown name, a file that is not a suite, or a bad key (named with
            its dotted path).
    """
    path = Path(name)
    if not path.suffix:
        path = SUITES_DIR / f"{name}.yaml"
        if not path.is_file():
            raise SuiteError(f"unknown suite {show(str(name))}; shipped suites: {suite_names()}")
    try:  # the limit and a byte more at most: /dev/zero or a growing file never ends
        text = read_limited(path, "suite file", MAX_CONFIG_BYTES).decode("utf-8")
    except GuardError as exc:  # "suite file X: over the limit of N bytes" / "cannot read it"
        raise SuiteError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"cannot read the suite file {path}: {exc}") from None
    try:
        raw = read_yaml(text, str(path))
    except Exception as exc:  # yaml's scanner and parser errors, our depth and alias checks
        raise SuiteError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise SuiteError(f"{path}: a suite file is a mapping, got {type(raw).__name__}")
    _keys(raw, _SUITE_KEYS, {"suite", "version", "layout", "env", "parts"}, "", path)
    name = raw["suite"]
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name != path.stem:
        raise SuiteError(
            f"{path}: suite must be the file's name ({path.stem!r}), of letters, digits, '.', "
            f"'_' and '-', got {show(name)}"
        )
    _typed(raw["version"], int, "version", path, low=1)
    if raw["layout"] not in LAYOUTS:
        raise SuiteError(f"{path}: layout must be one of {LAYOUTS}, got {show(raw['layout'])}")
    env = _mapping(raw["env"], "env", path)
    _keys(env, _ENV_KEYS, {"id"}, "env.", path)
    _typed(env["id"], str, "env.id", path)
    _mapping(env.get("kwargs", {}), "env.kwargs", path)
    _typed(env.get("history_length", 2), int, "env.history_length", path, low=0)
    rollout = _mapping(raw.get("rollout", {}), "rollout", path)
    _keys(rollout, _ROLLOUT_KEYS, set(), "rollout.", path)
    for key in ("response_prefix", "stop_text"):  # a list would become its text "[1, 2]"
        if key in rollout and not isinstance(rollout[key], str):
            raise SuiteError(
                f"{path}: rollout.{key} must be a string, got {show(rollout[key])} (YAML reads "
                "[/INST] as a list: quote text that starts with '[')"
            )
    if "max_new_tokens" in rollout:
        _typed(rollout["max_new_tokens"], int, "rollout.max_new_tokens", path, low=1)
    sampling = _mapping(raw.get("sampling", {}), "sampling", path)
    _keys(sampling, {"temperature", "top_p"}, set(), "sampling.", path)
    temperature = _typed(sampling.get("temperature", 0.0), float, "sampling.temperature", path,
                         low=0)  # fmt: skip
    top_p = _typed(sampling.get("top_p", 1.0), float, "sampling.top_p", path, low=0)
    if not 0 < top_p <= 1:
        raise SuiteError(f"{path}: sampling.top_p must be in (0, 1], got {top_p}")
    data = _mapping(raw.get("data", {}), "data", path)
    _check_data(data, path)
    parts = raw["parts"]
    if not isinstance(parts, list) or not parts:
        raise SuiteError(f"{path}: parts must be a non-empty list")
    loaded: list[Part] = []
    for i, part in enumerate(parts):
        key = f"parts[{i}]"
        part = _mapping(part, key, path)
        _keys(part, _PART_KEYS, {"name", "tasks"}, f"{key}.", path)
        part_name = _typed(part["name"], str, f"{key}.name", path)
        if part_name in [p.name for p in loaded]:
            raise SuiteError(f"{path}: {key}.name {show(part_name)} is used twice")
        if part.get("expect") is not None:
            _typed(part["expect"], int, f"{key}.expect", path, low=1)
        loaded.append(
            Part(part_name, _mapping(part.get("kwargs", {}), f"{key}.kwargs", path),
                 _check_tasks(part["tasks"], f"{key}.tasks", path), part.get("expect"))
        )  # fmt: skip
    suite = Suite(
        name=name, version=raw["version"], layout=raw["layout"],
        description=str(raw.get("description", "")), env=env, rollout=rollout,
        sampling={"temperature": temperature, "top_p": top_p}, data=data, parts=loaded,
        path=path,
    )  # fmt: skip
    text = json.dumps([env, data, [p.kwargs for p in loaded]])
    for placeholder in sorted(set(_PLACEHOLDER.findall(text)) - _ROOTS):
        raise SuiteError(f"{path}: unknown placeholder {{{placeholder}}}; known: {sorted(_ROOTS)}")
    kwargs = [("env.kwargs", env.get("kwargs", {}))]
    kwargs += [(f"parts[{i}].kwargs", part.kwargs) for i, part in enumerate(loaded)]
    data_dir = env.get("kwargs", {}).get("data_dir")  # ALFWorld's games are read under it
    for i, part in enumerate(loaded):
        games = part.tasks.get("games", [])
        kwargs += [(f"parts[{i}].tasks.games[{j}]", f"{data_dir}/{g}") for j, g in enumerate(games)]
    for key, value in kwargs:  # every path the env reads is under a root and hashed
        if problem := kwarg_path_problem(value, key, data):
            raise SuiteError(f"{path}: {problem}")
    return suite


def samples_dir() -> Path:
    """The repository's shipped samples (``{samples}``): ``$GIGPO_SAMPLES`` if set, else
    ``data/samples`` of the checkout the code runs from, else ``./data/samples`` (an
    installed wheel carries no samples: run from a clone, or set the variable)."""
    if os.environ.get("GIGPO_SAMPLES"):
        return Path(os.environ["GIGPO_SAMPLES"]).expanduser()
    checkout = Path(__file__).resolve().parents[2] / "data" / "samples"
    here = Path.cwd() / "data" / "samples"
    return checkout if checkout.is_dir() or not here.is_dir() else here


def set_roots(
    suite: Suite, data_dir: str | Path | None = None, retriever_url: str | None = None
) -> None:
    """Fills ``suite.roots``; ``data_dir`` replaces every external root (and ``{samples}``);
    ``retriever_url`` is ``{retriever}``, the search suites' retrieval server.

    Raises:
        SuiteError: a suite that searches through a server, without ``retriever_url``.
    """
    cache = Path(os.environ.get("GIGPO_SUITE_CACHE") or DEFAULT_CACHE).expanduser()
    roots = {"cache": cache / suite.name, "samples": samples_dir()}
    for name, var in _EXTERNAL.items():
        default = "~/.cache/alfworld" if name == "alfworld" else ""
        value = os.environ.get(var, default)
        roots[name] = Path(value).expanduser() if value else Path(f"${var}-is-not-set")
    if data_dir is not None:
        for name in ("samples", *_EXTERNAL):
            roots[name] = Path(data_dir).expanduser()
    suite.roots = {k: v.resolve() if v.is_absolute() or v.exists() else v for k, v in roots.items()}
    if "{retriever}" in json.dumps([suite.env, [p.kwargs for p in suite.parts]]):
        if not retriever_url:
            raise SuiteError(
                f"suite {suite.name} searches through a retrieval server: pass --retriever-url "
                "URL (e.g. python -m retrieval_server serve ..., see docs/retrieval.md)"
            )
        suite.roots["retriever"] = retriever_url  # type: ignore[assignment]


# ----------------------------------------------------------------------------- internals


def _keys(raw: dict, allowed: set[str], required: set[str], prefix: str, path: Path) -> None:
    for key in raw:
        if key not in allowed:
            close = did_you_mean(key, allowed, prefix)
            raise SuiteError(
                f"{path}: unknown key {prefix}{key}{close}; expected {sorted(allowed)}"
            )
    for key in sorted(required - set(raw)):
        raise SuiteError(f"{path}: missing key {prefix}{key}")


def _typed(value: Any, kind: type, key: str, path: Path, low: float | None = None) -> Any:
    """``value`` if it is a ``kind`` (an int is a float; a bool is neither; a float is
    finite) and >= ``low``."""
    ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if ok and kind is float and not isinstance(value, bool):
        try:  # NaN compares False with every bound, inf passes >= low; 10**400 has no float
            value = float(value)
            ok = math.isfinite(value)
        except OverflowError:
            ok = False
    if not ok or isinstance(value, bool) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        what = {int: "an int", float: "a finite number", str: "a string"}[kind]
        raise SuiteError(f"{path}: {key} must be {what}{bound}, got {show(value)}")
    return value


def _check_tasks(tasks: Any, key: str, path: Path) -> dict[str, Any]:
    tasks = _mapping(tasks, key, path)
    kinds = ("seeds", "count", "games", "all_games")
    if len(tasks) != 1 or next(iter(tasks)) not in kinds:
        raise SuiteError(f"{path}: {key} must be one of {', '.join(kinds)}, got {show(tasks)}")
    kind, value = next(iter(tasks.items()))
    if kind == "count":
        _typed(value, int, f"{key}.count", path, low=1)
    elif kind == "all_games" and value is not True:
        raise SuiteError(f"{path}: {key}.all_games must be true, got {show(value)}")
    elif kind in ("seeds", "games"):
        item = int if kind == "seeds" else str
        if not isinstance(value, list) or not value:
            raise SuiteError(f"{path}: {key}.{kind} must be a non-empty list, got {show(value)}")
        for j, v in enumerate(value):
            _typed(v, item, f"{key}.{kind}[{j}]", path, low=0 if item is int else None)
            if item is int and v > MAX_SEED:  # an env's seed is run.seed's kind: 32 bits
                raise SuiteError(f"{path}: {key}.seeds[{j}] must be at most {MAX_SEED} "
                                 f"(2**32 - 1), got {show(v)}")  # fmt: skip
    return tasks


def _check_data(data: dict[str, Any], path: Path) -> None:
    _keys(data, {"generate", "files", "read"}, set(), "data.", path)
    if "generate" in data:
        recipe = _mapping(data["generate"], "data.generate", path)
        needed = {"alfworld": {"num_games", "seed", "split"}, "webshop": {"num_products", "seed"}}
        kind = recipe.get("kind")
        if kind not in needed:
            raise SuiteError(f"{path}: data.generate.kind must be one of {sorted(needed)}")
        _keys(recipe, needed[kind] | {"kind"}, needed[kind], "data.generate.", path)
        for k in sorted(needed[kind] - {"split"}):
            high = _generate_limit(k)
            value = _typed(recipe[k], int, f"data.generate.{k}", path, low=0 if high is None else 1)
            if high is not None and value > high:
                raise SuiteError(
                    f"{path}: data.generate.{k} must be at most {high:,} ({_LIMIT_WHY[k]}), "
                    f"got {show(value)}"
                )
    if "files" in data:
        files = _mapping(data["files"], "data.files", path)
        for name, digest in files.items():
            key = f"data.files.{bound_text(name, 200)}"
            _data_path(name, key, path)
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise SuiteError(f"{path}: {key} must be a sha256 hex digest, got {show(digest)}")
    if "read" in data:
        read = data["read"]
        if not isinstance(read, list) or not all(isinstance(r, str) for r in read):
            raise SuiteError(f"{path}: data.read must be a list of paths, got {show(read)}")
        for i, pattern in enumerate(read):
            _data_path(pattern, f"data.read[{i}]", path)


#: Why each generated-data size has its bound (see :func:`_generate_limit`).
_LIMIT_WHY = {
    "num_games": "ALFWorld's training set has 3,553 games; one takes about a second to generate",
    "num_products": "WebShop's full catalog has 1,181,436 products; a generated one takes "
    "about 5 kB of memory a product",
}


def _generate_limit(key: str) -> int | None:
    """The largest ``data.generate.<key>`` (None: no bound): far beyond the paper's sets
    (120 games, 1,000 products), so only a typo reaches it before memory or time runs out."""
    if key == "num_products":
        from gigpo_envs.webshop.catalog import MAX_PRODUCTS  # the generator's own bound

        return MAX_PRODUCTS
    return MAX_GENERATED_GAMES if key == "num_games" else None


def _data_path(name: Any, key: str, path: Path) -> None:
    if problem := data_path_problem(name, key):
        raise SuiteError(f"{path}: {problem}")


def _mapping(value: Any, key: str, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SuiteError(f"{path}: {key} must be a mapping, got {type(value).__name__}")
    return value

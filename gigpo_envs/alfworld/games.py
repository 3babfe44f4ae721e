"""Finding ALFWorld games on disk, and importing the optional ``alfworld`` dependency.

ALFWorld's data tree (what ``alfworld-download`` writes, and what
``python -m gigpo_envs.alfworld.generate`` writes) is::

    <data_dir>/json_2.1.1/<split>/<task_type>-<object>-<mrecep>-<parent>-<scene>/<trial>/
        game.tw-pddl     # {"pddl_domain", "pddl_problem", "grammar", "solvable"}
        traj_data.json   # {"task_type", "pddl_params", "turk_annotations", ...}

A game is listed when both files exist, ``game.tw-pddl`` says ``"solvable": true`` and its
task type (the task directory's name up to the first ``-``, as in ALFWorld) is requested.
Directories with ``movable`` or ``Sliced`` in their path are skipped, as ``AlfredTWEnv`` does.
The list is sorted by the game's path relative to ``data_dir``, so a game index means the same
game on every machine (``AlfredTWEnv`` keeps the file system's walk order instead).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

#: The six ALFRED task types that ALFWorld plays, in ALFWorld's numbering order (1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: The splits of ALFWorld's json_2.1.1 tree.
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
#: The directory under ``data_dir`` that holds the splits.
DATA_VERSION = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"

_INSTALL_HINT = 'pip install "gigpo[alfworld]"'


def require_alfworld() -> tuple[ModuleType, ModuleType]:
    """Imports and returns ``(textworld, alfworld_tw_env)``; a clear ImportError if missing.

    ``alfworld_tw_env`` is ``alfworld.agents.environment.alfred_tw_env`` (``AlfredDemangler``,
    ``AlfredInfos``, ``AlfredExpert``, ``AlfredTWEnv``).
    """
    try:
        import textworld
        from alfworld.agents.environment import alfred_tw_env
    except ImportError as error:
        raise ImportError(
            f"gigpo/ALFWorld-v0 needs the alfworld package (alfworld==0.4.2): {_INSTALL_HINT}"
            f" ({error})"
        ) from error
    return textworld, alfred_tw_env


def alfred_logic_files() -> tuple[Path, Path]:
    """Returns the paths of ALFRED's PDDL domain and TextWorld grammar inside ``alfworld``."""
    require_alfworld()
    import alfworld

    data = Path(alfworld.__file__).resolve().parent / "data"
    return data / "alfred.pddl", data / "alfred.twl2"


def default_data_dir() -> Path:
    """``$ALFWORLD_DATA`` if set, else ``~/.cache/alfworld`` (``alfworld-download``'s place)."""
    env = os.environ.get("ALFWORLD_DATA")
    return Path(env).expanduser() if env else Path("~/.cache/alfworld").expanduser()


def normalize_task_types(task_types: Any) -> tuple[str, ...]:
    """Validates ``task_types`` (names or ALFWorld's ids 1..6; None for all six)."""
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, str | int):
        task_types = [task_types]
    try:
        requested = list(task_types)
    except TypeError:
        raise ValueError(
            f"task_types must be a list of task type names, got {task_types!r}"
        ) from None
    names = []
    for item in requested:
        if isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= len(TASK_TYPES):
            item = TASK_TYPES[item - 1]
        if item not in TASK_TYPES:
            raise ValueError(f"unknown ALFWorld task type {item!r}; expected one of {TASK_TYPES}")
        if item not in names:
            names.append(item)
    if not names:
        raise ValueError("task_types must name at least one task type")
    return tuple(sorted(names, key=TASK_TYPES.index))


def task_type_of(task_dir_name: str) -> str:
    """Returns the task type encoded in an ALFWorld task directory name."""
    return task_dir_name.split("-", 1)[0]


def _is_solvable(game_file: Path) -> bool:
    try:
        with open(game_file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False  # a broken game file is not playable: skipped, like an unsolvable one
    return isinstance(data, dict) and data.get("solvable") is True


@functools.lru_cache(maxsize=32)
def _cached_games(
    root: str, split: str, task_types: tuple[str, ...], split_mtime_ns: int
) -> tuple[str, ...]:
    del split_mtime_ns  # part of the cache key only: a new task directory refreshes the list
    split_dir = Path(root) / DATA_VERSION / split
    games = []
    for task_dir in sorted(split_dir.iterdir()) if split_dir.is_dir() else ():
        if not task_dir.is_dir() or task_type_of(task_dir.name) not in task_types:
            continue
        if "movable" in task_dir.name or "Sliced" in task_dir.name:
            continue
        for trial_dir in sorted(task_dir.iterdir()):
            game_file = trial_dir / GAME_FILE
            if (trial_dir / TRAJ_FILE).is_file() and game_file.is_file():
                if _is_solvable(game_file):
                    games.append(game_file.relative_to(root).as_posix())
    return tuple(sorted(games))


def find_games(
    data_dir: str | os.PathLike[str], split: str = "train", task_types: Any = None
) -> list[str]:
    """Returns the playable games of a split, as sorted posix paths relative to ``data_dir``.

    Args:
      data_dir: the directory that holds ``json_2.1.1/``.
      split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"``.
      task_types: task type names (or ids 1..6) to keep; None keeps all six.

    Raises:
      ValueError: unknown split or task type, a missing directory, or no game found; the
        message says how to get games (``alfworld-download`` or the generator).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    types = normalize_task_types(task_types)
    root = Path(data_dir).expanduser().resolve()
    split_dir = root / DATA_VERSION / split
    hint = (
        "download the real games with `alfworld-download` (then data_dir=~/.cache/alfworld or "
        "$ALFWORLD_DATA), or generate some offline with "
        "`python -m gigpo_envs.alfworld.generate --out DIR --num-games N --seed S`"
    )
    if not split_dir.is_dir():
        inside = DATA_VERSION in root.parts
        raise ValueError(
            f"no ALFWorld split directory {split_dir}: "
            + (f"data_dir must be the directory that holds {DATA_VERSION}/, not " if inside else "")
            + (f"{root}; " if inside else "")
            + hint
        )
    games = _cached_games(str(root), split, types, split_dir.stat().st_mtime_ns)
    if not games:
        raise ValueError(
            f"no playable ALFWorld game of types {list(types)} under {split_dir}: {hint}"
        )
    return list(games)

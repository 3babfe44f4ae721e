"""Memoization of TextWorld's two slow, pure steps; the games play exactly as before.

* Every reset, TextWorld's PDDL engine translates the game's PDDL to fast-downward's SAS
  format twice (``fast_downward.pddl2sas``, plain and optimized), which takes most of a reset
  (0.5-1 s on a kitchen game). The translation is a pure function of (domain, problem), and
  TextWorld only reads its result, so the last :data:`TRANSLATION_CACHE_SIZE` translations
  are kept: resetting a game again (every member of a GiGPO group, every state restore)
  skips it.
* Every step, TextWorld parses the same grammar templates (``"take {o} from {r}"``, the
  feedback rules) with tatsu once per admissible command. The parse of a template string
  is kept and a deep copy handed out (derivations mutate the symbols they get): 2-3x more
  steps per second.

Both are switched on per process by :func:`enable_speedups` (``TextWorldSession`` does it)
and off by :func:`disable_speedups`; the tests play the same games with and without them
and compare every observation, command list and anchor.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from gigpo_envs.alfworld.games import require_alfworld

#: How many PDDL translations (one per game, two variants each) are kept.
TRANSLATION_CACHE_SIZE = 64
#: How many parsed grammar templates are kept (a game uses a few hundred).
GRAMMAR_CACHE_SIZE = 4096

_originals: dict[str, Any] = {}


def _memoize(function: Any, size: int, deep_copy: bool) -> Any:
    cache: OrderedDict[Any, Any] = OrderedDict()

    def memoized(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = function(*args, **kwargs)
            if len(cache) > size:
                cache.popitem(last=False)
        return copy.deepcopy(cache[key]) if deep_copy else cache[key]

    memoized.cache = cache  # type: ignore[attr-defined]
    return memoized


def enable_speedups() -> None:
    """Memoizes the PDDL translation and the grammar parser in this process (idempotent)."""
    require_alfworld()
    import fast_downward
    from textworld.envs.pddl import textgen

    if _originals:
        return
    _originals["pddl2sas"] = fast_downward.pddl2sas
    _originals["parse"] = textgen._parse_and_convert
    fast_downward.pddl2sas = _memoize(fast_downward.pddl2sas, TRANSLATION_CACHE_SIZE, False)
    textgen._parse_and_convert = _memoize(textgen._parse_and_convert, GRAMMAR_CACHE_SIZE, True)


def disable_speedups() -> None:
    """Puts TextWorld's and fast-downward's own functions back."""
    if not _originals:
        return
    import fast_downward
    from textworld.envs.pddl import textgen

    fast_downward.pddl2sas = _originals.pop("pddl2sas")
    textgen._parse_and_convert = _originals.pop("parse")


def speedups_enabled() -> bool:
    """Whether :func:`enable_speedups` is in effect."""
    return bool(_originals)

"""ALFWorld for gigpo: ``gigpo/ALFWorld-v0`` and a generator of new ALFWorld games.

``alfworld`` (the ``alfworld`` extra) is imported only when an environment is built or games
are generated.
"""

from __future__ import annotations

from gigpo_envs.alfworld.games import SPLITS, TASK_TYPES, find_games

__all__ = ["SPLITS", "TASK_TYPES", "find_games"]

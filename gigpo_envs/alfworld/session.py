"""One TextWorld session that plays ALFWorld games with ``alfworld``'s own wrappers.

The TextWorld environment (with a private copy of fast-downward's library) is built once and
reused: loading another game swaps the game in place, and resetting the same game again only
rebuilds the PDDL state. ``alfworld``'s ``AlfredDemangler`` names objects as ALFWorld does
(``desk 1``), ``AlfredInfos`` records the game file, and, when asked, ``AlfredExpert`` runs
ALFWorld's hand-coded expert beside the game.

TextWorld's slow parts are memoized by :mod:`gigpo_envs.alfworld.speedups` (same output).

The hand-coded expert draws from Python's global ``random`` (e.g. which of two apples to
take). To make expert actions a function of the game and the history only, every call into
the game runs with ``random`` seeded from ``(expert_seed, move number)``, and the caller's
``random`` state is put back afterwards (and so is ``sys.argv``, which fast-downward's
translator overwrites).
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path
from typing import Any

from gigpo_envs.alfworld.games import require_alfworld
from gigpo_envs.alfworld.speedups import enable_speedups

_SAFE_EXPERT_CLASS: type | None = None


def _safe_expert_class() -> type:
    """``AlfredExpert`` whose failures give no expert action instead of an exception."""
    global _SAFE_EXPERT_CLASS
    if _SAFE_EXPERT_CLASS is None:
        _, alfred_tw_env = require_alfworld()

        class SafeAlfredExpert(alfred_tw_env.AlfredExpert):
            def _gather_infos(self) -> None:
                try:
                    super()._gather_infos()
                except Exception:  # the expert gave up (timeout, no plan): no advice
                    self.state["extra.expert_plan"] = []

        _SAFE_EXPERT_CLASS = SafeAlfredExpert
    return _SAFE_EXPERT_CLASS


class _Guarded:
    """Runs a block with ``random`` seeded; restores ``random``'s state and ``sys.argv``.

    fast-downward's PDDL translator (run on every reset) overwrites ``sys.argv``.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self.saved_random = random.getstate()
        self.argv, self.saved_argv = sys.argv, list(sys.argv)
        random.seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        random.setstate(self.saved_random)
        sys.argv = self.argv
        sys.argv[:] = self.saved_argv


class TextWorldSession:
    """A reusable TextWorld environment for ALFWorld game files.

    Args:
      expert: run ALFWorld's hand-coded expert and report its next action.
      speedups: call :func:`gigpo_envs.alfworld.speedups.enable_speedups` (same output).
    """

    def __init__(self, expert: bool = False, speedups: bool = True) -> None:
        textworld, alfred_tw_env = require_alfworld()
        if speedups:
            enable_speedups()
        self.expert = bool(expert)
        self._textworld = textworld
        self._wrappers: list[Any] = [
            alfred_tw_env.AlfredDemangler(shuffle=False),
            alfred_tw_env.AlfredInfos,
        ]
        extras = ["gamefile"]
        if self.expert:
            self._wrappers.append(_safe_expert_class())
            extras.append("expert_plan")
        self._infos = textworld.EnvInfos(
            won=True, admissible_commands=True, facts=True, extras=extras
        )
        self._env: Any = None
        self.game_file: str | None = None
        self.state: Any = None
        self.expert_seed = 0
        self.moves = 0

    def _seeded(self) -> _Guarded:
        text = f"gigpo-alfworld-expert:{self.expert_seed}:{self.moves}"
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        return _Guarded(int.from_bytes(digest, "little"))

    def reset(self, game_file: str | Path, expert_seed: int = 0) -> Any:
        """Loads ``game_file`` (unless it is loaded already) and starts it; returns the state."""
        game_file = str(game_file)
        self.expert_seed, self.moves = int(expert_seed), 0
        with self._seeded():
            if self._env is None:
                self._env = self._textworld.start(
                    game_file, request_infos=self._infos, wrappers=self._wrappers
                )
            elif game_file != self.game_file:
                self._env.load(game_file)
            self.game_file = game_file
            self.state = self._env.reset()
        return self.state

    def step(self, command: str) -> Any:
        """Plays one admissible command; returns the new state."""
        self.moves += 1
        with self._seeded():
            self.state, _, _ = self._env.step(command)
        return self.state

    @property
    def feedback(self) -> str:
        return str(self.state["feedback"])

    @property
    def admissible_commands(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    @property
    def facts(self) -> list[Any]:
        return list(self.state["facts"])

    def expert_action(self) -> str | None:
        """The hand-coded expert's next action, if it has an admissible one."""
        if not self.expert:
            return None
        plan = self.state.get("extra.expert_plan") or []
        action = plan[0] if plan else None
        return action if action in self.state["admissible_commands"] else None

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

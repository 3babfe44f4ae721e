"""``gigpo/NumberLine-v0``: walk along a number line to the target (gym_cards NumberLine)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_envs.arguments import MAX_STEPS_LIMIT, check_int
from gigpo_envs.base import TextEnv
from gigpo_envs.cards.templates import NUMBERLINE_TEMPLATE
from gigpo_envs.parsing import ActionParser

#: The longest line: its default ``max_steps`` (twice this) stays within ``MAX_STEPS_LIMIT``.
MAX_POSITION_LIMIT = MAX_STEPS_LIMIT // 2
_ALIASES = {
    "+": "+",
    "-": "-",
    "right": "+",
    "left": "-",
    "+1": "+",
    "-1": "-",
    "plus": "+",
    "minus": "-",
}


class NumberLineEnv(TextEnv):
    """Move from the start position to the target on the line ``0 .. max_position``.

    Observation: ``"Target: t\\nCurrent: c"``.

    Actions: ``+`` (right) and ``-`` (left); ``right``/``left`` also work.

    Rewards: +1 on reaching the target (terminates, ``info["won"]``); -1 for a step that does
    not bring the position closer (including pushing against either end of the line); 0 for
    a step that does.

    Args:
      max_position: the line is ``0 .. max_position``; start and target differ. At most
        :data:`MAX_POSITION_LIMIT`, so that the default ``max_steps`` stays in bounds.
      max_steps: steps before truncation; defaults to ``2 * max_position``.
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.
    """

    env_name = "NumberLine"
    prompt_template = NUMBERLINE_TEMPLATE

    def __init__(
        self,
        max_position: int = 5,
        max_steps: int | None = None,
        *,
        invalid_action_penalty: float = 0.0,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        max_position = check_int("max_position", max_position, 1, MAX_POSITION_LIMIT)
        super().__init__(
            max_steps=max_steps if max_steps is not None else 2 * max_position,
            invalid_action_penalty=invalid_action_penalty,
            action_parser=action_parser,
            render_mode=render_mode,
        )
        self.max_position = max_position
        self.position = 0
        self.target = 0

    def _game_reset(self, rng: np.random.Generator) -> None:
        self.position = int(rng.integers(self.max_position + 1))
        # Uniform over the other max_position cells, so the target never equals the start.
        offset = int(rng.integers(1, self.max_position + 1))
        self.target = (self.position + offset) % (self.max_position + 1)

    def parse_game_action(self, action_text: str) -> str | None:
        return _ALIASES.get(action_text)

    def admissible_actions(self) -> list[str]:
        return ["-", "+"]

    def _game_step(self, action: str) -> tuple[float, bool]:
        before = abs(self.position - self.target)
        step = 1 if action == "+" else -1
        self.position = min(max(self.position + step, 0), self.max_position)
        after = abs(self.position - self.target)
        if after == 0:
            self._won = True
            return 1.0, True
        return (0.0 if after < before else -1.0), False

    def _game_observation(self) -> str:
        return f"Target: {self.target}\nCurrent: {self.position}"

    def render_legend(self) -> str:
        return f"Positions run from 0 to {self.max_position}."

    def _game_state(self) -> dict[str, Any]:
        return {"max_position": self.max_position, "position": self.position, "target": self.target}

    def _game_load(self, game_state: dict[str, Any]) -> None:
        max_position = int(game_state["max_position"])
        position, target = int(game_state["position"]), int(game_state["target"])
        if max_position < 1 or not (0 <= position <= max_position and 0 <= target <= max_position):
            raise ValueError(f"positions out of range in {game_state!r}")
        self.max_position, self.position, self.target = max_position, position, target

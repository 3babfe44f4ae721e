"""``gigpo/Sokoban-v0``: push the boxes onto the targets, in text."""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_envs.arguments import MAX_STEPS_LIMIT, check_int, check_type
from gigpo_envs.base import OBSERVATION_MAX_LENGTH, TextEnv
from gigpo_envs.parsing import ActionParser
from gigpo_envs.sokoban.generator import generate_room
from gigpo_envs.sokoban.room import (
    ACTIONS,
    BOX_OFF_REWARD,
    BOX_ON_REWARD,
    LEGEND,
    SOLVED_REWARD,
    STEP_REWARD,
    Layout,
    is_solved,
    move,
    render,
)
from gigpo_envs.sokoban.templates import SOKOBAN_TEMPLATE

_ALIASES = {name: name for name in ACTIONS} | {
    "u": "up",
    "d": "down",
    "l": "left",
    "r": "right",
    "move up": "up",
    "move down": "down",
    "move left": "left",
    "move right": "right",
}


class SokobanEnv(TextEnv):
    """Sokoban with generated rooms that are always solvable within ``max_steps``.

    Observation: the room as text, ``dim_room[0]`` lines of ``dim_room[1]`` characters
    (legend in :data:`gigpo_envs.sokoban.room.LEGEND`).

    Actions: ``up``, ``down``, ``left``, ``right`` (also ``u/d/l/r``, ``move up``, ...).

    Rewards: -0.1 per move (a move into a wall counts), +1 for pushing a box onto a target,
    -1 for pushing one off, +10 when every box is on a target (the episode terminates and
    ``info["won"]`` is True). An invalid action pays ``invalid_action_penalty`` instead.

    Args:
      dim_room: ``(height, width)`` in cells including the outer wall, each at least 4; the
        room's text (``height * (width + 1)`` characters) must fit the observation space's
        4096, which bounds the room (64 x 63 at most).
      num_boxes: boxes (and targets) per room, ``1 .. (height - 2) * (width - 2) - 2`` (the
        inner cells, less two so that the player can move).
      max_steps: steps before truncation.
      max_solution_steps: longest optimal solution a generated room may need; defaults to
        ``max_steps``, so every room can be solved in time.
      min_solution_steps: shortest optimal solution a generated room may need (no trivial
        one-push rooms by default).
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode`` of
        :class:`~gigpo_envs.base.TextEnv`.
    """

    env_name = "Sokoban"
    prompt_template = SOKOBAN_TEMPLATE

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 15,
        max_solution_steps: int | None = None,
        min_solution_steps: int = 3,
        *,
        invalid_action_penalty: float = 0.0,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_steps=max_steps,
            invalid_action_penalty=invalid_action_penalty,
            action_parser=action_parser,
            render_mode=render_mode,
        )
        check_type("dim_room", dim_room, (tuple, list), "a (height, width) tuple or list")
        if len(dim_room) != 2:
            raise ValueError(f"dim_room must be (height, width), got {len(dim_room)} values")
        height = check_int("dim_room[0] (height)", dim_room[0], low=4)
        width = check_int("dim_room[1] (width)", dim_room[1], low=4)
        if height * (width + 1) > OBSERVATION_MAX_LENGTH:
            raise ValueError(
                f"dim_room ({height}, {width}) is too large for the observation space "
                f"({OBSERVATION_MAX_LENGTH} characters)"
            )
        self.dim_room = (height, width)
        self.num_boxes = check_int("num_boxes", num_boxes, 1, (height - 2) * (width - 2) - 2)
        self.max_solution_steps = (
            self.max_steps
            if max_solution_steps is None
            else check_int("max_solution_steps", max_solution_steps, 1)
        )
        # Clipped to 1 .. max_solution_steps by the generator, as documented there.
        self.min_solution_steps = check_int(
            "min_solution_steps", min_solution_steps, 0, MAX_STEPS_LIMIT
        )
        if self.max_solution_steps > self.max_steps:
            raise ValueError(
                f"max_solution_steps ({self.max_solution_steps}) must be <= max_steps "
                f"({self.max_steps}), or rooms could be unsolvable in time"
            )
        self.layout: Layout | None = None
        self.player = 0
        self.boxes: tuple[int, ...] = ()
        self.solution_length = 0
        self._deltas: dict[str, int] = {}

    # ----------------------------------------------------------------- game hooks
    def _game_reset(self, rng: np.random.Generator) -> None:
        room = generate_room(
            rng,
            self.dim_room,
            self.num_boxes,
            self.max_solution_steps,
            self.min_solution_steps,
        )
        self._set_layout(room.layout)
        self.player, self.boxes = room.player, room.boxes
        self.solution_length = room.solution_length

    def _set_layout(self, layout: Layout) -> None:
        self.layout = layout
        self._deltas = layout.deltas()
        self._layout_rows = layout.rows()

    def parse_game_action(self, action_text: str) -> str | None:
        return _ALIASES.get(action_text)

    def admissible_actions(self) -> list[str]:
        return list(ACTIONS)

    def _game_step(self, action: str) -> tuple[float, bool]:
        assert self.layout is not None
        self.player, self.boxes, on, off = move(
            self.layout, self.player, self.boxes, self._deltas[action]
        )
        reward = STEP_REWARD + BOX_ON_REWARD * on + BOX_OFF_REWARD * off
        if is_solved(self.layout, self.boxes):
            self._won = True
            return reward + SOLVED_REWARD, True
        return reward, False

    def _game_observation(self) -> str:
        assert self.layout is not None
        return render(self.layout, self.player, self.boxes)

    def render_legend(self) -> str:
        return LEGEND

    def _game_state(self) -> dict[str, Any]:
        width = self.dim_room[1]
        return {
            "room": list(self._layout_rows),
            "player": [self.player // width, self.player % width],
            "boxes": [[box // width, box % width] for box in self.boxes],
        }

    def _game_load(self, game_state: dict[str, Any]) -> None:
        layout = Layout.from_rows(list(game_state["room"]))
        width = layout.width

        def cell(position: Any) -> int:
            row, col = int(position[0]), int(position[1])
            if (
                not (0 <= row < layout.height and 0 <= col < width)
                or not layout.floor[row * width + col]
            ):
                raise ValueError(f"position {position!r} is not a floor cell of the room")
            return row * width + col

        player = cell(game_state["player"])
        boxes = tuple(sorted(cell(box) for box in game_state["boxes"]))
        if len(boxes) != len(layout.targets) or len(set(boxes)) != len(boxes) or player in boxes:
            raise ValueError("a Sokoban state needs one distinct box per target, off the player")
        self.dim_room = (layout.height, width)
        self.num_boxes = len(boxes)
        self._set_layout(layout)
        self.player, self.boxes = player, boxes

"""Sokoban rooms: the fixed layout, the moving parts, the move rule and the text form.

Cells are numbered row-major, ``cell = row * width + col``. The outer ring of every room is
wall, so a step of ``+-1`` or ``+-width`` from an inner cell never leaves the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

WALL, FLOOR, TARGET = "#", "_", "O"
BOX, BOX_ON_TARGET = "X", "*"
PLAYER, PLAYER_ON_TARGET = "P", "S"

LEGEND = (
    f"Legend: {WALL} wall, {FLOOR} floor, {TARGET} target, {BOX} box, "
    f"{BOX_ON_TARGET} box on target, {PLAYER} you, {PLAYER_ON_TARGET} you on a target."
)

ACTIONS = ("up", "down", "left", "right")

#: Reward of every move (valid or bumping into a wall), of pushing a box onto / off a target,
#: and of solving the room.
STEP_REWARD, BOX_ON_REWARD, BOX_OFF_REWARD, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0


@dataclass(frozen=True)
class Layout:
    """The fixed part of a room.

    Attributes:
      height, width: size of the grid in cells, walls included.
      floor: per cell, True if it can be walked on (targets are floor), length
        ``height * width``.
      targets: the target cells, sorted.
    """

    height: int
    width: int
    floor: tuple[bool, ...]
    targets: tuple[int, ...]

    @cached_property
    def text_template(self) -> tuple[list[str], list[int]]:
        """The static text of the room (rows joined by newlines, as a list of characters)
        and, per cell, its index in that list."""
        chars: list[str] = []
        position = []
        for cell, walkable in enumerate(self.floor):
            if cell and cell % self.width == 0:
                chars.append("\n")
            position.append(len(chars))
            chars.append(FLOOR if walkable else WALL)
        for cell in self.targets:
            chars[position[cell]] = TARGET
        return chars, position

    def deltas(self) -> dict[str, int]:
        """Returns the cell offset of each action."""
        return {"up": -self.width, "down": self.width, "left": -1, "right": 1}

    def rows(self) -> list[str]:
        """Returns the layout as text rows of ``#``, ``_`` and ``O``."""
        chars = [FLOOR if walkable else WALL for walkable in self.floor]
        for cell in self.targets:
            chars[cell] = TARGET
        return ["".join(chars[r * self.width : (r + 1) * self.width]) for r in range(self.height)]

    @classmethod
    def from_rows(cls, rows: list[str]) -> Layout:
        """Parses rows of ``#``, ``_`` and ``O``; raises ``ValueError`` on anything else."""
        if not isinstance(rows, list) or not rows or not all(isinstance(r, str) for r in rows):
            raise ValueError(f"room rows must be a non-empty list of strings, got {rows!r:.100}")
        height, width = len(rows), len(rows[0])
        if height < 3 or width < 3 or any(len(r) != width for r in rows):
            raise ValueError(f"room rows must form a rectangle of at least 3x3, got {rows!r}")
        floor, targets = [], []
        for r, row in enumerate(rows):
            for c, char in enumerate(row):
                if char not in (WALL, FLOOR, TARGET):
                    raise ValueError(f"unknown room character {char!r} at ({r}, {c})")
                on_border = r in (0, height - 1) or c in (0, width - 1)
                if on_border and char != WALL:
                    raise ValueError(
                        f"the border of a room must be wall, got {char!r} at ({r}, {c})"
                    )
                floor.append(char != WALL)
                if char == TARGET:
                    targets.append(r * width + c)
        return cls(height, width, tuple(floor), tuple(targets))


def move(
    layout: Layout, player: int, boxes: tuple[int, ...], delta: int
) -> tuple[int, tuple[int, ...], int, int]:
    """Applies one move of the player by ``delta`` cells.

    Returns:
      ``(player, boxes, boxes_put_on_target, boxes_taken_off_target)``; boxes stay sorted.
      A move into a wall or into a box that cannot be pushed leaves everything in place.
    """
    ahead = player + delta
    if not layout.floor[ahead]:
        return player, boxes, 0, 0
    if ahead not in boxes:
        return ahead, boxes, 0, 0
    beyond = ahead + delta
    if not layout.floor[beyond] or beyond in boxes:
        return player, boxes, 0, 0
    moved = tuple(sorted(beyond if box == ahead else box for box in boxes))
    on = int(beyond in layout.targets)
    off = int(ahead in layout.targets)
    return ahead, moved, on, off


def is_solved(layout: Layout, boxes: tuple[int, ...]) -> bool:
    """True if every box stands on a target."""
    return boxes == layout.targets


def render(layout: Layout, player: int, boxes: tuple[int, ...]) -> str:
    """Returns the room as text, one row per line (see :data:`LEGEND`)."""
    template, position = layout.text_template
    chars = template.copy()
    for box in boxes:
        at = position[box]
        chars[at] = BOX_ON_TARGET if chars[at] == TARGET else BOX
    at = position[player]
    chars[at] = PLAYER_ON_TARGET if chars[at] == TARGET else PLAYER
    return "".join(chars)

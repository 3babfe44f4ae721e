"""An optimal Sokoban solver: breadth-first search over (player, boxes) states.

Moves that change nothing (into a wall, into a stuck box) are skipped, so the first
solution found has the fewest moves. Meant for small rooms and for tests.
"""

from __future__ import annotations

from gigpo_envs.sokoban.room import ACTIONS, Layout, is_solved, move


def solve(
    layout: Layout,
    player: int,
    boxes: tuple[int, ...],
    max_depth: int | None = None,
    max_states: int = 2_000_000,
) -> list[str] | None:
    """Returns an optimal list of actions that solves the room, or None.

    Args:
      layout: the room.
      player: the player's cell.
      boxes: the boxes' cells.
      max_depth: give up on solutions longer than this many moves (None: no limit).
      max_states: give up after visiting this many states.

    Returns:
      The actions (``"up"``, ...) of a shortest solution; ``[]`` if already solved; None if
      there is no solution within the limits.
    """
    boxes = tuple(sorted(boxes))
    if is_solved(layout, boxes):
        return []
    deltas = layout.deltas()
    start = (player, boxes)
    parent: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, tuple[int, ...]], str] | None]
    parent = {start: None}
    frontier = [start]
    depth = 0
    while frontier and (max_depth is None or depth < max_depth) and len(parent) < max_states:
        depth += 1
        next_frontier = []
        for state in frontier:
            for action in ACTIONS:
                new_player, new_boxes, _, _ = move(layout, state[0], state[1], deltas[action])
                new_state = (new_player, new_boxes)
                if new_state in parent:
                    continue
                parent[new_state] = (state, action)
                if is_solved(layout, new_boxes):
                    return _path(parent, new_state)
                next_frontier.append(new_state)
        frontier = next_frontier
    return None


def _path(parent: dict, state: tuple[int, tuple[int, ...]]) -> list[str]:
    actions = []
    link = parent[state]
    while link is not None:
        state, action = link
        actions.append(action)
        link = parent[state]
    return actions[::-1]

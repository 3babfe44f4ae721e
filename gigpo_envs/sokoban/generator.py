"""Sokoban room generation: random topology, then reverse play from the solved state.

1. Carve a random room: a random walk through the inner cells that turns with probability
   ``turn_probability`` and sometimes widens the corridor by one cell.
2. Put the boxes on randomly chosen targets: the solved state.
3. Play backwards from every solved state (player anywhere) with a breadth-first search
   over *reverse* moves: a plain step, or a step away from an adjacent box that pulls the box
   along. Every reverse move undoes exactly one forward move, so the BFS depth of a state is
   the length of its optimal solution, and every state the search reaches is solvable.
4. Start from a state drawn uniformly among those whose optimal solution length lies in
   ``[max(min_solution_steps, ceil(d / 2)), d]``, where ``d`` is the longest one found within
   ``max_solution_steps``.

A room whose longest solution is shorter than ``min_solution_steps`` is thrown away and the
next one is carved, all from the same generator, so the result is a pure function of the
generator's state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gigpo_envs.sokoban.room import Layout


@dataclass(frozen=True)
class GeneratedRoom:
    """A generated room and its start state.

    Attributes:
      layout: walls, floor and targets.
      player: the player's start cell.
      boxes: the boxes' start cells, sorted.
      solution_length: the number of moves of an optimal solution (>= 1).
    """

    layout: Layout
    player: int
    boxes: tuple[int, ...]
    solution_length: int


def carve_topology(
    rng: np.random.Generator, height: int, width: int, turn_probability: float = 0.35
) -> list[bool]:
    """Returns a random floor mask (row-major, length ``height * width``) with a wall border."""
    floor = [False] * (height * width)
    row = int(rng.integers(1, height - 1))
    col = int(rng.integers(1, width - 1))
    directions = ((-1, 0), (1, 0), (0, -1), (0, 1))
    d_row, d_col = directions[int(rng.integers(4))]
    walk_length = int(1.5 * (height - 2) * (width - 2)) + 2
    for _ in range(walk_length):
        floor[row * width + col] = True
        if rng.random() < 0.25:
            # Widen: also open the cell beside the corridor.
            side_row, side_col = row + d_col, col + d_row
            if 0 < side_row < height - 1 and 0 < side_col < width - 1:
                floor[side_row * width + side_col] = True
        if rng.random() < turn_probability:
            d_row, d_col = directions[int(rng.integers(4))]
        row = min(max(row + d_row, 1), height - 2)
        col = min(max(col + d_col, 1), width - 2)
    return floor


def reverse_search(
    layout: Layout, max_depth: int, max_states: int = 200_000
) -> dict[tuple[int, tuple[int, ...]], int]:
    """Breadth-first search backwards from the solved states.

    Args:
      layout: the room; its targets are where the boxes stand when solved.
      max_depth: deepest level to expand (moves).
      max_states: stop once this many states are known (distances stay exact).

    Returns:
      ``{(player, boxes): optimal solution length}`` for every state found, in BFS order.
    """
    width = layout.width
    floor = layout.floor
    goal_boxes = layout.targets
    deltas = (-width, width, -1, 1)
    distance: dict[tuple[int, tuple[int, ...]], int] = {}
    frontier = []
    for cell, walkable in enumerate(floor):
        if walkable and cell not in goal_boxes:
            state = (cell, goal_boxes)
            distance[state] = 0
            frontier.append(state)
    depth = 0
    while frontier and depth < max_depth and len(distance) < max_states:
        depth += 1
        next_frontier = []
        for player, boxes in frontier:
            for delta in deltas:
                back = player - delta
                if not floor[back] or back in boxes:
                    continue
                # Plain reverse step, then the same step pulling the box in front along.
                candidates = [(back, boxes)]
                front = player + delta
                if front in boxes:
                    pulled = tuple(sorted(player if box == front else box for box in boxes))
                    candidates.append((back, pulled))
                for state in candidates:
                    if state not in distance:
                        distance[state] = depth
                        next_frontier.append(state)
        frontier = next_frontier
    return distance


def generate_room(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    max_solution_steps: int = 15,
    min_solution_steps: int = 3,
    max_attempts: int = 1000,
    max_states: int = 200_000,
) -> GeneratedRoom:
    """Generates a room whose optimal solution takes ``min_solution_steps .. max_solution_steps``.

    Args:
      rng: the only source of randomness.
      dim_room: ``(height, width)`` in cells, outer walls included; each at least 4.
      num_boxes: number of boxes (and targets), at least 1.
      max_solution_steps: the optimal solution is never longer than this.
      min_solution_steps: nor shorter than this (clipped to ``1 .. max_solution_steps``).
      max_attempts: rooms to carve before giving up.
      max_states: bound on the reverse search of one room.

    Raises:
      ValueError: on impossible arguments, or if no fitting room was found in
        ``max_attempts`` tries (for example too many boxes for the room).
    """
    height, width = int(dim_room[0]), int(dim_room[1])
    if height < 4 or width < 4:
        raise ValueError(f"dim_room must be at least (4, 4), got {dim_room}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    if max_solution_steps < 1:
        raise ValueError(f"max_solution_steps must be >= 1, got {max_solution_steps}")
    min_steps = min(max(1, int(min_solution_steps)), max_solution_steps)
    for _ in range(max_attempts):
        floor = carve_topology(rng, height, width)
        free = [cell for cell, walkable in enumerate(floor) if walkable]
        if len(free) < num_boxes + 2:
            continue
        chosen = rng.choice(len(free), size=num_boxes, replace=False)
        targets = tuple(sorted(free[int(i)] for i in chosen))
        layout = Layout(height, width, tuple(floor), targets)
        distance = reverse_search(layout, max_solution_steps, max_states)
        longest = max(distance.values())
        if longest < min_steps:
            continue
        shortest_allowed = max(min_steps, -(-longest // 2))
        candidates = [state for state, d in distance.items() if d >= shortest_allowed]
        player, boxes = candidates[int(rng.integers(len(candidates)))]
        return GeneratedRoom(layout, player, boxes, distance[(player, boxes)])
    raise ValueError(
        f"no room needing {min_steps}..{max_solution_steps} moves in {max_attempts} attempts "
        f"(dim_room={dim_room}, num_boxes={num_boxes})"
    )

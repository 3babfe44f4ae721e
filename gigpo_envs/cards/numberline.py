"""``gigpo/NumberLine-v0``: walk along a number line to the target (gym_cards NumberLine)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from gigpo_envs.arguments import MAX_STEPS_LIMIT, check_bool, check_int
from gigpo_envs.base import TextEnv
from gigpo_envs.cards.templates import NUMBERLINE_TEMPLATE
from gigpo_envs.parsing import ActionParser

#: The longest line: its default ``max_steps`` (twice this) stays within ``MAX_STEPS_LIMIT``.
MAX_POSITION_LIMIT = MAX_STEPS_LIMIT // 2
#: The number words of ``words=True``: positions ``0 .. len(NUMBER_WORDS) - 1`` can be written.
NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
)  # fmt: skip
#: Minutes in the ``clock=True`` day: the clock is ``0 .. MINUTES_PER_DAY - 1`` after midnight.
MINUTES_PER_DAY = 24 * 60
#: Each valid step moves the clock on by ``1 .. MAX_CLOCK_STEP`` minutes.
MAX_CLOCK_STEP = 59
#: ``hidden_target``'s words for the last move (none yet, closer, not closer).
_MOVES = ("none", "warmer", "colder")
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

    Observation: ``"Target: t\\nCurrent: c"``. With ``words=True`` the numbers are English
    words (``"Target: seven\\nCurrent: three"``); with ``traps > 0`` a line
    ``"Traps: 2, 8"`` follows (``"Traps: none"`` when no cell could take a trap), then with
    ``clock=True`` a line ``"Clock: HH:MM"``.

    Actions: ``+`` (right) and ``-`` (left); ``right``/``left`` also work.

    Rewards: +1 on reaching the target (terminates, ``info["won"]``); -1 for a step that does
    not bring the position closer (including pushing against either end of the line); 0 for
    a step that does. A step onto a trap costs -1 too and ends the episode, lost.

    Traps are dead ends: cells from which the target can no longer be reached. Each episode
    places ``traps`` of them, drawn from the reset generator after the start, the target and
    the clock (so the same seed deals the same walk with and without traps), uniformly among
    the cells that are neither the start, nor the target, nor strictly between them: the
    straight walk to the target never crosses one, and only a wrong step can fall into one.
    Those cells number ``max_position - |target - start|``, which can be fewer than ``traps``
    (none when start and target are the two ends of the line): then every one of them is a
    trap. ``traps`` is therefore at most ``max_position - 1``, the most cells there can ever
    be (start and target side by side). The traps are part of the state (key, text,
    ``state_dict()``); without traps the state is exactly the one of an env without the
    option.

    With ``hidden_target=True`` the target is never shown: the observation is the position and
    whether the last move came closer (``"Current: 4\nLast move: warmer"``; ``colder`` when it
    did not, ``none`` before the first move). Which move is right then depends on the move
    that came before, which only the history shows: after ``warmer`` repeat it, after
    ``colder`` turn round. The current observation alone is ambiguous (the same position and
    ``warmer`` follow a ``+`` toward a target on the right and a ``-`` toward one on the
    left), so the anchor key (:meth:`state_key`, ``info["anchor"]``) is that of what the agent
    observes, not of the hidden target: walks toward different targets share anchor states,
    as observations do in ALFWorld. Within one task (one target) an observation follows only
    one of the two moves, so it still names one state there. ``state_dict()`` keeps the
    target, so a restored state repeats its future. An invalid action leaves the last move's
    word as it was.

    With ``round_trip=True`` the walk goes to the target and back: the observation adds the
    start (``"Home: 2\nTarget: 7\nCurrent: 4"``), reaching the target (reward 0) turns the
    walk round, reaching home after that wins (+1, terminates), and a step that does not come
    closer to the current leg's goal costs -1. The leg is not shown, so a cell strictly
    between home and target reads the same on the way out and back, where the right moves are
    opposite: within one task, only the history tells them apart. The anchor key is of what
    the agent observes (``state_dict()`` keeps the leg, ``"returning"``), so GiGPO's step
    groups there mix the legs. Not combined with ``hidden_target``.

    The clock is a detail that changes and does not matter: it never changes a reward, the end
    of an episode or the admissible actions, but it is part of the state (its key, its text,
    ``state_dict()``). Exact anchor states then rarely recur, while two states that differ only
    in the clock stay close in text: the case for similarity-based step grouping. An episode's
    clock starts at a minute of the day drawn from the reset generator (after the start and
    the target, which are therefore the same as without the clock for the same seed). Every
    step moves it on by 1 to :data:`MAX_CLOCK_STEP` minutes, wrapping at midnight; the minutes
    are a blake2b digest of the state before the step and the action taken (or the fact that
    none was), so the clock is a function of the seed and the actions (the same in every
    process, and a restored state repeats its future), and rollouts that reach one position by
    different paths show different times. They are not further draws from the episode's
    generator: ``load_state_dict()`` re-seeds that at the episode's start, and every member of
    a GiGPO group would draw the same minutes, so the clock would only count steps.

    With the clock, an invalid action is not quite the contract's no-op (docs/design.md,
    contract 1): the position and target stay, the reward is ``invalid_action_penalty`` as
    always, but time passes, so the state and its key change. Otherwise a policy that often
    answers badly would repeat the same exact state turn after turn.

    Args:
      max_position: the line is ``0 .. max_position``; start and target differ. At most
        :data:`MAX_POSITION_LIMIT`, so that the default ``max_steps`` stays in bounds, and at
        most 20 with ``words=True`` (:data:`NUMBER_WORDS`).
      max_steps: steps before truncation; defaults to ``2 * max_position`` (``4 *
        max_position`` with ``round_trip``).
      words: write the target and the position as English words instead of digits.
      clock: add the ``"Clock: HH:MM"`` line described above.
      traps: the number of trap cells an episode places (at most that many fit, see above);
        an int in ``[0, max_position - 1]``.
      hidden_target: hide the target; show whether the last move came closer (see above).
      round_trip: walk to the target and back home, the leg not shown (see above).
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.
    """

    env_name = "NumberLine"
    prompt_template = NUMBERLINE_TEMPLATE

    def __init__(
        self,
        max_position: int = 5,
        max_steps: int | None = None,
        *,
        words: bool = False,
        clock: bool = False,
        traps: int = 0,
        hidden_target: bool = False,
        round_trip: bool = False,
        invalid_action_penalty: float = 0.0,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        max_position = check_int("max_position", max_position, 1, MAX_POSITION_LIMIT)
        words = check_bool("words", words)
        clock = check_bool("clock", clock)
        hidden_target = check_bool("hidden_target", hidden_target)
        round_trip = check_bool("round_trip", round_trip)
        if hidden_target and round_trip:
            raise ValueError(
                "hidden_target and round_trip cannot both be True (a round trip shows its target)"
            )
        traps = check_int("traps", traps, 0)
        if traps > max_position - 1:
            raise ValueError(
                f"traps must be an int in [0, max_position - 1] = [0, {max_position - 1}] "
                f"(the cells off the walk when start and target are side by side), got int {traps}"
            )
        if words and max_position >= len(NUMBER_WORDS):
            raise ValueError(
                f"max_position must be an int in [1, {len(NUMBER_WORDS) - 1}] with words=True "
                f"(the number words end at {NUMBER_WORDS[-1]!r}), got int {max_position}"
            )
        if max_steps is None:
            max_steps = min(4 * max_position, MAX_STEPS_LIMIT) if round_trip else 2 * max_position
        super().__init__(
            max_steps=max_steps,
            invalid_action_penalty=invalid_action_penalty,
            action_parser=action_parser,
            render_mode=render_mode,
        )
        self.max_position = max_position
        self.words = words
        self.clock = clock
        self.traps = traps
        self.hidden_target = hidden_target
        self.round_trip = round_trip
        #: ``round_trip``: the start cell, and whether the walk has reached the target and is
        #: on its way back; ``home`` is None and ``returning`` False without ``round_trip``.
        self.home: int | None = None
        self.returning = False
        #: ``hidden_target``: whether the last valid move came closer (``"warmer"``), not
        #: (``"colder"``), or ``"none"`` before the first; None without ``hidden_target``.
        self.last_move: str | None = None
        self.position = 0
        self.target = 0
        #: The trap cells of this episode, ascending; empty without ``traps``.
        self.trap_cells: tuple[int, ...] = ()
        #: Minutes after midnight shown by the clock; None without ``clock``.
        self.clock_time: int | None = None

    def _game_reset(self, rng: np.random.Generator) -> None:
        self.position = int(rng.integers(self.max_position + 1))
        # Uniform over the other max_position cells, so the target never equals the start.
        offset = int(rng.integers(1, self.max_position + 1))
        self.target = (self.position + offset) % (self.max_position + 1)
        # Drawn last: the same seed deals the same walk with and without the clock.
        self.clock_time = int(rng.integers(MINUTES_PER_DAY)) if self.clock else None
        self.trap_cells = self._draw_traps(rng) if self.traps else ()
        self.last_move = "none" if self.hidden_target else None
        self.home = self.position if self.round_trip else None
        self.returning = False

    def _draw_traps(self, rng: np.random.Generator) -> tuple[int, ...]:
        """Draws the episode's traps, after everything else, among the cells off the walk."""
        low, high = sorted((self.position, self.target))
        free = [cell for cell in range(self.max_position + 1) if not low <= cell <= high]
        if len(free) <= self.traps:
            return tuple(free)  # no draw: every cell off the walk is a trap
        chosen = rng.choice(len(free), size=self.traps, replace=False)
        return tuple(sorted(free[int(index)] for index in chosen))

    def parse_game_action(self, action_text: str) -> str | None:
        return _ALIASES.get(action_text)

    def admissible_actions(self) -> list[str]:
        return ["-", "+"]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """:meth:`TextEnv.step`; with the clock, an invalid action moves the clock on too."""
        if self.clock_time is not None and not self._done:
            text = self.action_parser.extract(action)
            if text is None or self.parse_game_action(text) is None:
                self._advance_clock(None)
        return super().step(action)

    def _goal(self) -> int:
        """The cell the walk heads for now: home on a round trip's way back, else the target."""
        return self.home if self.returning and self.home is not None else self.target

    def _game_step(self, action: str) -> tuple[float, bool]:
        self._advance_clock(action)
        goal = self._goal()
        before = abs(self.position - goal)
        step = 1 if action == "+" else -1
        self.position = min(max(self.position + step, 0), self.max_position)
        after = abs(self.position - goal)
        if self.hidden_target:
            self.last_move = "warmer" if after < before else "colder"
        if after == 0 and self.round_trip and not self.returning:
            self.returning = True  # at the target: turn round, the leg not shown
            return 0.0, False
        if after == 0:
            self._won = True
            return 1.0, True
        if self.position in self.trap_cells:
            return -1.0, True
        return (0.0 if after < before else -1.0), False

    def _advance_clock(self, action: str | None) -> None:
        """Moves the clock (if any) on for ``action`` played now (None: an invalid one)."""
        if self.clock_time is not None:
            self.clock_time = (self.clock_time + self._clock_minutes(action)) % MINUTES_PER_DAY

    def _clock_minutes(self, action: str | None) -> int:
        """Minutes, ``1 .. MAX_CLOCK_STEP``, the clock moves on when ``action`` is played now."""
        text = f"gigpo-numberline-clock:{self.target}:{self.position}:{self.clock_time}:{action}"
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        return 1 + int.from_bytes(digest, "little") % MAX_CLOCK_STEP

    def _number(self, value: int) -> str:
        return NUMBER_WORDS[value] if self.words else str(value)

    def _game_observation(self) -> str:
        text = f"Current: {self._number(self.position)}"
        if self.hidden_target:
            text += f"\nLast move: {self.last_move}"
        else:
            text = f"Target: {self._number(self.target)}\n" + text
        if self.home is not None:
            text = f"Home: {self._number(self.home)}\n" + text
        if self.traps:
            cells = ", ".join(self._number(cell) for cell in self.trap_cells)
            text += f"\nTraps: {cells or 'none'}"
        if self.clock_time is not None:
            hours, minutes = divmod(self.clock_time, 60)
            text += f"\nClock: {hours:02d}:{minutes:02d}"
        return text

    def render_legend(self) -> str:
        legend = f"Positions run from {self._number(0)} to {self._number(self.max_position)}."
        if self.traps:
            legend += " Stepping onto a trap ends the episode: the target is then lost."
        if self.hidden_target:
            legend += (
                " The target is hidden: after each move you are told whether it brought you "
                "closer (warmer) or not (colder)."
            )
        if self.round_trip:
            legend += " Walk to the target, then back home; which way you are going is not shown."
        if self.clock:
            legend += " The clock changes with every move and does not matter."
        return legend

    def _game_state(self) -> dict[str, Any]:
        state = {
            "max_position": self.max_position,
            "position": self.position,
            "target": self.target,
        }
        if self.traps:
            state["traps"] = list(self.trap_cells)
        if self.clock_time is not None:
            state["clock"] = self.clock_time
        if self.last_move is not None:
            state["last_move"] = self.last_move
        if self.home is not None:
            state["home"], state["returning"] = self.home, self.returning
        return state

    def _anchor_state(self) -> dict[str, Any]:
        """The game state without what is hidden (the target, a round trip's leg): what the
        agent observes."""
        state = self._game_state()
        if self.hidden_target:
            del state["target"]
        state.pop("returning", None)
        return state

    def _game_load(self, game_state: dict[str, Any]) -> None:
        max_position = int(game_state["max_position"])
        position, target = int(game_state["position"]), int(game_state["target"])
        if max_position < 1 or not (0 <= position <= max_position and 0 <= target <= max_position):
            raise ValueError(f"positions out of range in {game_state!r}")
        if self.words and max_position >= len(NUMBER_WORDS):
            raise ValueError(
                f"max_position {max_position} in {game_state!r} has no number words "
                f"(words=True writes 0 .. {len(NUMBER_WORDS) - 1})"
            )
        clock_time = None
        if self.clock:
            if "clock" not in game_state:
                raise ValueError(f"clock=True needs a 'clock' in the game state: {game_state!r}")
            clock_time = check_int("clock", game_state["clock"], 0, MINUTES_PER_DAY - 1)
        elif "clock" in game_state:
            raise ValueError(f"clock=False, but the game state has a 'clock': {game_state!r}")
        trap_cells = self._load_traps(game_state, max_position, target)
        last_move = None
        if self.hidden_target:
            last_move = game_state.get("last_move")
            if last_move not in _MOVES:
                raise ValueError(
                    f"hidden_target=True needs a 'last_move' in {_MOVES} in the game state: "
                    f"{game_state!r}"
                )
        elif "last_move" in game_state:
            raise ValueError(f"hidden_target=False, but the game state has a 'last_move': "
                             f"{game_state!r}")  # fmt: skip
        home, returning = self._load_round_trip(game_state, max_position, trap_cells)
        self.last_move = last_move
        self.home, self.returning = home, returning
        self.max_position, self.position, self.target = max_position, position, target
        self.clock_time = clock_time
        self.trap_cells = trap_cells

    def _load_round_trip(
        self, game_state: dict[str, Any], max_position: int, trap_cells: tuple[int, ...]
    ) -> tuple[int | None, bool]:
        """The checked ``"home"`` and ``"returning"`` of a game state; ValueError if bad or if no
        walk reaches it (home on the target, a trap from home to target, at it not turned)."""
        if not self.round_trip:
            if "home" in game_state or "returning" in game_state:
                raise ValueError(f"round_trip=False, but the game state has 'home' or "
                                 f"'returning': {game_state!r}")  # fmt: skip
            return None, False
        home, returning = game_state.get("home"), game_state.get("returning")
        if not isinstance(returning, bool):
            raise ValueError(f"round_trip=True needs a bool 'returning' in the game state: "
                             f"{game_state!r}")  # fmt: skip
        if isinstance(home, bool) or not isinstance(home, int) or not 0 <= home <= max_position:
            raise ValueError(f"round_trip=True needs an int 'home' in [0, {max_position}] in the "
                             f"game state: {game_state!r}")  # fmt: skip
        target, position = int(game_state["target"]), int(game_state["position"])
        low, high = sorted((home, target))
        if home == target or any(low <= cell <= high for cell in trap_cells):
            raise ValueError(f"'home' equals the target, or a trap is on the walk between them "
                             f"(home included): {game_state!r}")  # fmt: skip
        if position == target and not returning:
            raise ValueError(f"at the target with 'returning' false (reaching the target turns "
                             f"the walk round): {game_state!r}")  # fmt: skip
        return home, returning

    def _load_traps(
        self, game_state: dict[str, Any], max_position: int, target: int
    ) -> tuple[int, ...]:
        """The checked ``"traps"`` of a game state (ascending); raises ValueError if bad.

        A trap may hold the position (the state an episode ends in after a fall), never the
        target; an env without ``traps`` refuses a state that has them, and the other way round.
        """
        if not self.traps:
            if "traps" in game_state:
                raise ValueError(f"traps=0, but the game state has 'traps': {game_state!r}")
            return ()
        cells = game_state.get("traps")
        if not isinstance(cells, list) or len(cells) > self.traps:
            raise ValueError(
                f"traps={self.traps} needs a list of at most {self.traps} 'traps' in the game "
                f"state: {game_state!r}"
            )
        checked = [check_int("trap cell", cell, 0, max_position) for cell in cells]
        if len(set(checked)) < len(checked) or target in checked:
            raise ValueError(f"repeated traps or a trap on the target in {game_state!r}")
        return tuple(sorted(checked))

"""``gigpo/ALFWorld-v0``: the real ALFWorld text games (``alfworld`` over TextWorld)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gigpo_envs.alfworld.facts import RoomLayout, fact_strings, mutable_facts
from gigpo_envs.alfworld.games import SPLITS, default_data_dir, find_games, require_alfworld
from gigpo_envs.alfworld.session import TextWorldSession
from gigpo_envs.alfworld.templates import ALFWORLD_TEMPLATE
from gigpo_envs.arguments import check_bool, check_float, check_path, check_str
from gigpo_envs.base import TextEnv, state_digest
from gigpo_envs.parsing import ActionParser, normalize_action_text

DEFAULT_WIN_REWARD = 10.0
_TASK_MARKER = "Your task is to:"


class AlfWorldEnv(TextEnv):
    """ALFWorld's household tasks, played by ``alfworld`` 0.4.2 on TextWorld's PDDL engine.

    ``reset(seed=s)`` plays game number ``s % num_games`` of the sorted game list (see
    :func:`gigpo_envs.alfworld.games.find_games`), so a seed means the same game on every
    machine and for every member of a group; seeds ``0 .. num_games - 1`` visit every game once.

    Observation: TextWorld's feedback. The first one is ALFWorld's intro (the room and the
    task); later ones are the feedback of the last action followed by the task line
    (``"Your task is to: ..."``), so every observation carries the goal.
    ``info["admissible_actions"]`` lists TextWorld's admissible commands.

    Actions: one admissible command (``"go to desk 1"``, ``"take cd 1 from desk 1"``), matched
    after normalising case and spaces; any other text is a no-op with
    ``info["is_action_valid"] = False``.

    Rewards: ``win_reward`` (10) on the step that completes the task, which ends the episode
    with ``info["won"] = True``; 0 otherwise; ``invalid_action_penalty`` for invalid text.

    Anchors: ``state_key()`` digests the game's mutable PDDL facts (see
    :mod:`gigpo_envs.alfworld.facts`), not the feedback text; ``state_text()`` is those facts
    as text, for similarity grouping.

    State restore: TextWorld cannot export or import its PDDL state, so ``state_dict()``
    records the game and the admissible commands played so far, and ``load_state_dict``
    restarts that game and replays them. The engine is deterministic, so the restored
    environment has the same facts, key and future; it costs one step per recorded action.

    Args:
      data_dir: the directory holding ``json_2.1.1/``; default ``$ALFWORLD_DATA``, then
        ``~/.cache/alfworld`` (where ``alfworld-download`` puts the real games).
      split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"``.
      task_types: task type names (or ALFWorld ids 1..6) to play; None plays all six.
      max_steps: steps before truncation (50, as in the GiGPO paper).
      win_reward: reward for completing the task.
      expert: put ALFWorld's hand-coded expert's next action in ``info["expert_action"]``
        (None when it has none); costs some time per step.
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.
    """

    env_name = "ALFWorld"
    cpu_heavy = True
    prompt_template = ALFWORLD_TEMPLATE

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        split: str = "train",
        task_types: Any = None,
        max_steps: int = 50,
        win_reward: float = DEFAULT_WIN_REWARD,
        expert: bool = False,
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
        if data_dir is not None:
            check_path("data_dir", data_dir)
        self.split = check_str("split", split, SPLITS)
        self.win_reward = check_float("win_reward", win_reward)
        self.expert = check_bool("expert", expert)
        require_alfworld()
        self.data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
        self.games = find_games(self.data_dir, split, task_types)
        self._session: TextWorldSession | None = None
        self.game: str | None = None
        self.goal = ""
        self._actions: list[str] = []
        self._layout: RoomLayout | None = None
        self._facts: list[tuple[str, tuple[str, ...]]] = []
        self._admissible: dict[str, str] = {}

    @property
    def num_games(self) -> int:
        return len(self.games)

    # ----------------------------------------------------------------- game hooks
    def _start(self, game: str) -> None:
        if self._session is None:
            self._session = TextWorldSession(expert=self.expert)
        loaded = self._session.game_file
        # The expert's own randomness is seeded per game and move (not per episode seed), so
        # its advice is a function of the history and matches the generator's verification.
        self._session.reset(self.data_dir / game, expert_seed=0)
        if loaded != self._session.game_file:
            self._layout = None  # rebuilt from the new game's facts by _observe
        self.game, self._actions = game, []
        feedback = self._session.feedback
        self.goal = feedback.split(_TASK_MARKER, 1)[1].strip() if _TASK_MARKER in feedback else ""
        self._observe()

    def _observe(self) -> None:
        assert self._session is not None
        self._facts = fact_strings(self._session.facts)
        if self._layout is None:
            self._layout = RoomLayout(self._facts)
        commands = self._session.admissible_commands
        self._admissible = {normalize_action_text(c): c for c in commands}

    def _game_reset(self, rng: np.random.Generator) -> None:
        del rng  # the game is a function of the seed alone: number seed % num_games
        assert self._episode_seed is not None
        self._start(self.games[self._episode_seed % len(self.games)])

    def parse_game_action(self, action_text: str) -> str | None:
        return self._admissible.get(normalize_action_text(action_text))

    def admissible_actions(self) -> list[str]:
        return list(self._admissible.values())

    def _game_step(self, action: str) -> tuple[float, bool]:
        assert self._session is not None
        self._session.step(action)
        self._actions.append(action)
        self._observe()
        if self._session.won:
            self._won = True
            return self.win_reward, True
        return 0.0, False

    def _game_observation(self) -> str:
        if self._session is None:
            return ""
        feedback = self._session.feedback.strip()
        if self._actions and self.goal:
            return f"{feedback}\n\n{_TASK_MARKER} {self.goal}"
        return feedback

    def _game_state(self) -> dict[str, Any]:
        return {"game": self.game, "actions": list(self._actions)}

    def _game_load(self, game_state: dict[str, Any]) -> None:
        game, actions = game_state["game"], game_state["actions"]
        if game not in self.games:
            raise ValueError(f"game {game!r} is not one of this environment's games")
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise ValueError("actions must be a list of command strings")
        previous = self._game_state() if self.game is not None else None
        try:
            self._replay(game, actions)
        except ValueError:
            if previous is not None:  # put the environment back where it was
                self._replay(previous["game"], previous["actions"])
            raise

    def _replay(self, game: str, actions: list[str]) -> None:
        self._start(game)
        for move, action in enumerate(actions):
            if action not in self._admissible.values():
                raise ValueError(f"recorded action {move} ({action!r}) is not admissible")
            if self._session is not None and self._session.won:
                raise ValueError(f"recorded actions continue after the game was won (move {move})")
            self._game_step(action)

    # ----------------------------------------------------------------- state API
    def _anchor_state(self) -> dict[str, Any]:
        return {"game": self.game, "facts": mutable_facts(self._facts)}

    def state_key(self) -> str:
        """Returns the key of the game and its mutable facts (not of the feedback text)."""
        self._require_started("state_key")
        return state_digest(self._anchor_state())

    def state_text(self) -> str:
        """Returns the mutable facts as text (place, hands, receptacles, object states)."""
        self._require_started("state_text")
        assert self._layout is not None
        return self._layout.describe(self._facts)

    def _info(self, is_action_valid: bool, action: str | None) -> dict[str, Any]:
        info = super()._info(is_action_valid, action)
        info["anchor"] = state_digest(self._anchor_state())
        info["game"] = self.game
        info["goal"] = self.goal
        if self.expert and self._session is not None:
            info["expert_action"] = self._session.expert_action()
        return info

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        super().close()

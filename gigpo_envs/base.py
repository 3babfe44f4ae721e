"""The environment contract every gigpo environment shares (docs/design.md, contract 1).

A :class:`TextEnv` is a :class:`gymnasium.Env` whose observations and actions are strings.
A subclass writes only the game: how a new episode is dealt from a numpy generator, how a
parsed action changes the state, how the state reads as text and as a JSON-able dict. This
class does everything the contract asks of all of them:

* seeding: ``reset(seed=s)`` deals from ``np.random.default_rng``-style state seeded with ``s``
  only, so the same seed gives the same first state in every process. ``reset()`` without a
  seed starts the next episode from a seed derived from the previous episode's seed (a
  blake2b digest), so envs that started from the same seed stay in step episode by episode.
  This is what keeps a GiGPO group together through a vector env's autoreset. Seeds are
  ints in ``0 .. 2**63 - 1``, the range that ``state_dict()`` round-trips; ``reset`` refuses
  any other seed (a bool included), and constructor arguments are type-checked the same way,
  by :mod:`gigpo_envs.arguments`.
* parsing: the raw response goes through an :class:`~gigpo_envs.parsing.ActionParser`, then
  through :meth:`TextEnv.parse_game_action`. Text that names no admissible action is a no-op
  on the game state: the step still counts towards ``max_steps``, ``info["is_action_valid"]``
  is False and the reward is ``invalid_action_penalty`` (default ``0.0``; verl-agent-style
  trainers apply their own penalty from ``is_action_valid``). Game rewards such as Sokoban's
  step cost are not paid for an invalid step, because the game did not move.
* ``info`` on reset and on every step: ``anchor`` (``state_key()`` of the state the returned
  observation shows), ``anchor_text`` (its ``state_text()``, for similarity grouping),
  ``is_action_valid`` (True on reset), ``won``, ``action`` (the canonical
  action taken, or None), ``elapsed_steps`` and, for games with a finite action set,
  ``admissible_actions`` (the actions that are legal in the shown state).
* state: ``state_dict()`` / ``load_state_dict()`` round-trip the whole state, ``state_key()``
  is a 16-hex-digit blake2b digest of the canonical JSON (sorted keys) of the *game* part of
  the state, and ``state_text()`` is its text form. The step counter and the episode seed are
  in ``state_dict()`` but not in the key: the same position reached at two different times is
  the same anchor state, which is what GiGPO's step-level groups are made of.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gigpo_envs.arguments import (
    MAX_STEPS_LIMIT,
    SEED_MAX,
    check_float,
    check_int,
    check_seed,
    check_str,
    check_type,
)
from gigpo_envs.parsing import DEFAULT_PARSER, ActionParser
from gigpo_envs.prompts import PromptTemplate

#: Characters an observation may contain: printable ASCII, including space and newline.
OBSERVATION_CHARSET = frozenset(string.printable)
#: Upper bound, in characters, on any observation of the built-in environments.
OBSERVATION_MAX_LENGTH = 4096
#: Upper bound, in characters, of the action space; longer responses are invalid actions.
ACTION_MAX_LENGTH = DEFAULT_PARSER.max_response_chars

_SEED_MASK = SEED_MAX  # every derived seed is 63-bit, inside the range reset() accepts


def canonical_json(obj: Any) -> str:
    """Returns the canonical JSON text of ``obj``: sorted keys, no spaces, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def state_digest(game_state: dict[str, Any]) -> str:
    """Returns the 16-hex-digit blake2b key of a JSON-able state dict.

    Independent of the process, the Python version and ``PYTHONHASHSEED``.
    """
    return hashlib.blake2b(canonical_json(game_state).encode(), digest_size=8).hexdigest()


def next_episode_seed(seed: int) -> int:
    """Returns the seed of the episode after one that was seeded with ``seed``.

    A pure function of ``seed`` (a blake2b digest, masked to 63 bits), so envs that started
    from the same seed derive the same chain of episode seeds.
    """
    digest = hashlib.blake2b(f"gigpo-next-episode:{int(seed)}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") & _SEED_MASK


class TextEnv(gym.Env[str, str]):
    """Base class of the text environments: string in, string out, exact state keys.

    Subclasses set ``env_name`` and ``prompt_template`` and implement the ``_game_*`` hooks
    and :meth:`parse_game_action`. Constructor arguments shared by all environments:

    Args:
      max_steps: the episode is truncated after this many steps (valid or not).
      invalid_action_penalty: reward of a step whose text names no admissible action.
      action_parser: how actions are read from responses; the default reads
        ``<action>...</action>``.
      render_mode: None or ``"ansi"`` (``render()`` returns the state text with a legend).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    env_name: ClassVar[str] = "TextEnv"
    prompt_template: ClassVar[PromptTemplate] = PromptTemplate()
    #: A step costs milliseconds of Python (a game engine, a search): trainers that play many
    #: episodes at once run such envs in worker processes (:mod:`gigpo_envs.workers`).
    cpu_heavy: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_steps: int,
        invalid_action_penalty: float = 0.0,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.max_steps = check_int("max_steps", max_steps, 1, MAX_STEPS_LIMIT)
        self.invalid_action_penalty = check_float("invalid_action_penalty", invalid_action_penalty)
        if action_parser is not None:
            check_type("action_parser", action_parser, ActionParser, "an ActionParser or None")
        if render_mode is not None:
            check_str("render_mode", render_mode, self.metadata["render_modes"])
        self.action_parser = action_parser if action_parser is not None else DEFAULT_PARSER
        self.render_mode = render_mode
        self.observation_space = spaces.Text(
            OBSERVATION_MAX_LENGTH, min_length=0, charset=OBSERVATION_CHARSET
        )
        self.action_space = spaces.Text(
            self.action_parser.max_response_chars, min_length=0, charset=OBSERVATION_CHARSET
        )
        self._episode_seed: int | None = None
        self._elapsed_steps = 0
        self._won = False
        self._done = True
        self._started = False

    # ----------------------------------------------------------------- game hooks
    def _game_reset(self, rng: np.random.Generator) -> None:
        """Deals a new episode, drawing randomness from ``rng`` only."""
        raise NotImplementedError

    def _game_step(self, action: str) -> tuple[float, bool]:
        """Applies one admissible action; returns (reward, terminated) and updates ``_won``."""
        raise NotImplementedError

    def _game_observation(self) -> str:
        """Returns the text the agent sees for the current state."""
        raise NotImplementedError

    def _game_state(self) -> dict[str, Any]:
        """Returns the JSON-able game state (no step counter, no seed)."""
        raise NotImplementedError

    def _game_load(self, game_state: dict[str, Any]) -> None:
        """Restores a state returned by :meth:`_game_state`."""
        raise NotImplementedError

    def _anchor_state(self) -> dict[str, Any]:
        """The part of the game state that anchor states are matched on (:meth:`state_key`):
        the whole game state, unless a game hides part of it from the agent (NumberLine's
        ``hidden_target``), where it is what the agent observes."""
        return self._game_state()

    def parse_game_action(self, action_text: str) -> str | None:
        """Maps normalized action text onto the game's canonical action text.

        Returns None if the text names no action that is admissible in the current state.
        """
        raise NotImplementedError

    def admissible_actions(self) -> list[str] | None:
        """Returns the action texts that are legal now, or None for open-ended games."""
        return None

    def render_legend(self) -> str:
        """Returns a legend explaining the state text (empty if it needs none)."""
        return ""

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Starts an episode; returns ``(observation, info)``.

        Args:
          seed: the episode seed, an int in ``0 .. 2**63 - 1`` (the range ``state_dict()``
            round-trips; see :mod:`gigpo_envs.arguments`); None continues the seed chain of
            the previous episode (or draws fresh OS entropy on the very first reset).
          options: unused, accepted for the Gymnasium API.

        Raises ``TypeError`` for a seed that is not an int (a bool is not) and ``ValueError``
        for one outside the range, before the current episode is touched.
        """
        if seed is not None:
            episode_seed = check_seed(seed)
        elif self._episode_seed is not None:
            episode_seed = next_episode_seed(self._episode_seed)
        else:
            episode_seed = (
                int(np.random.SeedSequence().generate_state(2, np.uint64)[0]) & _SEED_MASK
            )
        super().reset(seed=episode_seed)
        self._episode_seed = episode_seed
        self._elapsed_steps = 0
        self._won = False
        self._done = False
        self._started = True
        self._game_reset(self.np_random)
        return self._game_observation(), self._info(True, None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Plays the model's raw response ``action``; returns the Gymnasium 5-tuple.

        Never raises on the text itself; raises ``RuntimeError`` if called before
        :meth:`reset` or after the episode ended.
        """
        if self._done:
            raise RuntimeError(
                f"{self.env_name}: step() called "
                + ("after the episode ended" if self._started else "before reset()")
                + "; call reset() first"
            )
        text = self.action_parser.extract(action)
        game_action = self.parse_game_action(text) if text is not None else None
        self._elapsed_steps += 1
        if game_action is None:
            reward, terminated = self.invalid_action_penalty, False
        else:
            reward, terminated = self._game_step(game_action)
        truncated = not terminated and self._elapsed_steps >= self.max_steps
        self._done = terminated or truncated
        info = self._info(game_action is not None, game_action)
        return self._game_observation(), float(reward), terminated, truncated, info

    def render(self) -> str | None:
        """Returns the state text and its legend when ``render_mode == "ansi"``."""
        if self.render_mode != "ansi":
            return None
        legend = self.render_legend()
        return self._game_observation() + ("\n" + legend if legend else "")

    # ----------------------------------------------------------------- state API
    def state_dict(self) -> dict[str, Any]:
        """Returns the whole state as a JSON-able dict: game state, step count, episode seed."""
        self._require_started("state_dict")
        return {
            "env": self.env_name,
            "game": self._game_state(),
            "elapsed_steps": self._elapsed_steps,
            "won": self._won,
            "done": self._done,
            "episode_seed": self._episode_seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a state from :meth:`state_dict`; the future then repeats exactly.

        Raises ``ValueError`` if ``state`` is not a state of this kind of environment.
        """
        if not isinstance(state, dict) or state.get("env") != self.env_name:
            raise ValueError(f"state is not a {self.env_name} state_dict: {state!r:.200}")
        try:
            elapsed_steps = int(state["elapsed_steps"])
            won, done = bool(state["won"]), bool(state["done"])
            seed = state["episode_seed"]
            seed = None if seed is None else check_seed(seed, "episode_seed")
            self._game_load(state["game"])
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"malformed {self.env_name} state_dict: {error!r}") from error
        self._elapsed_steps, self._won, self._done = elapsed_steps, won, done
        self._episode_seed = seed
        if self._episode_seed is not None:
            gym.Env.reset(self, seed=self._episode_seed)
        self._started = True

    def state_key(self) -> str:
        """Returns the 16-hex-digit key of the game state (same state, same key, anywhere);
        of the observed part only where a game hides some of it (:meth:`_anchor_state`)."""
        self._require_started("state_key")
        return state_digest(self._anchor_state())

    def state_text(self) -> str:
        """Returns the state as text, for similarity-based anchor grouping."""
        self._require_started("state_text")
        return self._game_observation()

    # ----------------------------------------------------------------- helpers
    def _require_started(self, what: str) -> None:
        if not self._started:
            raise RuntimeError(f"{self.env_name}: {what}() needs a reset() first")

    def _info(self, is_action_valid: bool, action: str | None) -> dict[str, Any]:
        info: dict[str, Any] = {
            "anchor": state_digest(self._anchor_state()),
            "anchor_text": self.state_text(),
            "is_action_valid": is_action_valid,
            "won": self._won,
            "action": action,
            "elapsed_steps": self._elapsed_steps,
        }
        admissible = self.admissible_actions()
        if admissible is not None:
            info["admissible_actions"] = admissible
        return info

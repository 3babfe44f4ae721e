"""``gigpo/EZPoints-v0`` and ``gigpo/Points24-v0``: build a formula from the dealt cards.

The gym_cards point games in text. Cards are dealt (A counts 1, J, Q and K count 10); the
agent writes a formula one token per step (``1`` .. ``10``, ``+ - * / ( )``) and ends it with
``=``. The formula must use every card exactly once and equal the target: 12 with two cards
(EZPoints), 24 with four (Points24); both are arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_envs.arguments import check_bool, check_int
from gigpo_envs.base import TextEnv
from gigpo_envs.cards.cards import RANKS, SUITS, card_name, card_value
from gigpo_envs.cards.formula import OPERATORS, PARENTHESES, evaluate, is_solvable
from gigpo_envs.cards.templates import POINTS_TEMPLATE
from gigpo_envs.parsing import ActionParser

WIN_REWARD, LOSE_REWARD = 10.0, -1.0
#: The largest target (in absolute value): six cards worth at most 10 never make more.
MAX_TARGET = 10**6
_NUMBERS = tuple(str(n) for n in range(1, 11))
_ALIASES = (
    {token: token for token in (*_NUMBERS, *OPERATORS, *PARENTHESES, "=")}
    | {"a": "1", "ace": "1", "j": "10", "q": "10", "k": "10", "x": "*", "\u00d7": "*"}
    | {"jack": "10", "queen": "10", "king": "10", "ten": "10"}
)


class PointsEnv(TextEnv):
    """The point game: reach ``target`` with every dealt card used exactly once.

    Observation: the target, the cards with their values, the formula so far and the numbers
    still to use.

    Actions: one token per step: a number whose card is still unused (``"7"``; ``"k"``,
    ``"ace"`` also work), an operator or parenthesis, or ``"="`` to submit. A number with no
    unused card, or any other text, is an invalid action (no-op). ``admissible_actions``
    lists the legal tokens of the shown state.

    Rewards: ``"="`` ends the episode with +10 if the formula is well formed, uses every card
    and equals the target (``info["won"]``), else -1. Other tokens give 0; running out of
    ``max_steps`` truncates the episode with 0.

    Args:
      target: the value to reach (12 for EZPoints, 24 for Points24), an int with
        ``abs(target) <= MAX_TARGET`` (10**6): six cards worth at most 10 never make more.
      num_cards: cards dealt (2 for EZPoints, 4 for Points24), 1 to 6.
      max_steps: steps before truncation.
      solvable_only: deal again until the solver finds a formula (default True).
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.
    """

    env_name = "Points"
    prompt_template = POINTS_TEMPLATE

    def __init__(
        self,
        target: int = 12,
        num_cards: int = 2,
        max_steps: int = 10,
        solvable_only: bool = True,
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
        self.target = check_int("target", target, -MAX_TARGET, MAX_TARGET)
        self.num_cards = check_int("num_cards", num_cards, 1, 6)
        self.solvable_only = check_bool("solvable_only", solvable_only)
        self.cards: list[str] = []
        self.formula: list[str] = []
        self._unused: list[int] = []

    # ----------------------------------------------------------------- game hooks
    def _game_reset(self, rng: np.random.Generator) -> None:
        for _ in range(1000):
            # Deals in batches: one generator call for many candidate deals.
            deals = rng.integers((len(RANKS), len(SUITS)), size=(16, self.num_cards, 2))
            for deal in deals.tolist():
                cards = [RANKS[rank] + SUITS[suit] for rank, suit in deal]
                values = [card_value(card) for card in cards]
                if not self.solvable_only or is_solvable(values, self.target):
                    self._set_cards(cards, [])
                    return
        raise ValueError(
            f"no solvable deal of {self.num_cards} cards for target {self.target} found"
        )

    def _set_cards(self, cards: list[str], formula: list[str]) -> None:
        self.cards, self.formula = cards, formula
        self._unused = [card_value(card) for card in cards]
        for token in formula:
            if token.isdigit():
                self._unused.remove(int(token))

    def _unused_numbers(self) -> list[int]:
        return self._unused

    def parse_game_action(self, action_text: str) -> str | None:
        token = _ALIASES.get(action_text)
        if token is not None and token.isdigit() and int(token) not in self._unused_numbers():
            return None
        return token

    def admissible_actions(self) -> list[str]:
        numbers = sorted(set(self._unused_numbers()))
        return [str(n) for n in numbers] + [*OPERATORS, *PARENTHESES, "="]

    def _game_step(self, action: str) -> tuple[float, bool]:
        if action != "=":
            self.formula.append(action)
            if action.isdigit():
                self._unused.remove(int(action))
            return 0.0, False
        value = evaluate(self.formula)
        self._won = value is not None and value == self.target and not self._unused_numbers()
        return (WIN_REWARD if self._won else LOSE_REWARD), True

    def _game_observation(self) -> str:
        cards = ", ".join(f"{card_name(card)} = {card_value(card)}" for card in self.cards)
        unused = " ".join(str(n) for n in self._unused_numbers()) or "(none)"
        return (
            f"Target: {self.target}\nCards: {cards}\n"
            f"Formula so far: {' '.join(self.formula) or '(empty)'}\nNumbers still to use: {unused}"
        )

    def render_legend(self) -> str:
        return (
            f"Use each of the {self.num_cards} cards exactly once to make {self.target}. "
            "A counts 1; J, Q and K count 10."
        )

    def _game_state(self) -> dict[str, Any]:
        return {"target": self.target, "cards": list(self.cards), "formula": list(self.formula)}

    def _game_load(self, game_state: dict[str, Any]) -> None:
        cards = [str(card) for card in game_state["cards"]]
        formula = [str(token) for token in game_state["formula"]]
        for card in cards:
            card_value(card)  # raises ValueError on an unknown card
        unused = [card_value(card) for card in cards]
        for token in formula:
            if token not in _ALIASES.values():
                raise ValueError(f"unknown formula token {token!r}")
            if token.isdigit():
                if int(token) not in unused:
                    raise ValueError(f"formula uses {token} more often than the cards allow")
                unused.remove(int(token))
        self.target = int(game_state["target"])
        self.num_cards = len(cards)
        self._set_cards(cards, formula)

"""``gigpo/Blackjack-v0``: hit or stand against the dealer (gym_cards / Sutton & Barto rules).

Cards come from an infinite deck (every card equally likely, with replacement). To make the
state exact and the future repeatable, the cards an episode can draw are dealt up front from
the episode's seed and kept, face down, in the state (``deck``); hitting takes the next one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_envs.arguments import check_bool
from gigpo_envs.base import TextEnv
from gigpo_envs.cards.cards import DECK, card_value, rank_label
from gigpo_envs.cards.templates import BLACKJACK_TEMPLATE
from gigpo_envs.parsing import ActionParser

_ALIASES = {
    "hit": "hit",
    "stand": "stand",
    "stick": "stand",
    "stay": "stand",
    "h": "hit",
    "s": "stand",
}
# A player can take at most 21 cards before busting and the dealer at most 17 more.
_SPARE_CARDS = 40
_RANK_VALUES = {card[0]: card_value(card) for card in DECK}
_RANK_LABELS = {card[0]: rank_label(card) for card in DECK}


def hand_total(cards: list[str]) -> tuple[int, bool]:
    """Returns ``(total, soft)``: the best total and whether an ace counts 11 in it."""
    for card in cards:
        card_value(card)  # raises ValueError on a malformed card
    return _total("".join(cards))


def _total(cards: str) -> tuple[int, bool]:
    ranks = cards[::2]
    total = sum(map(_RANK_VALUES.__getitem__, ranks))
    if "A" in ranks and total + 10 <= 21:
        return total + 10, True
    return total, False


def _labels(cards: str) -> str:
    return ", ".join(map(_RANK_LABELS.__getitem__, cards[::2]))


def _split(cards: str) -> list[str]:
    return [cards[i : i + 2] for i in range(0, len(cards), 2)]


class BlackjackEnv(TextEnv):
    """Blackjack: one hand against a dealer who stands on 17.

    Observation: the dealer's face-up card, your cards and total; after the episode, the
    dealer's whole hand and the outcome.

    Actions: ``hit`` or ``stand`` (``stick``, ``stay`` also work).

    Rewards: at the end of the hand +1 win, -1 loss, 0 draw (+1.5 for a winning natural
    blackjack when ``natural=True``); 0 while the hand goes on. Busting ends the episode at
    -1. ``info["won"]`` is True for a positive result.

    Args:
      natural: pay 1.5 for a winning two-card 21.
      max_steps: steps before truncation (invalid actions count).
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.
    """

    env_name = "Blackjack"
    prompt_template = BLACKJACK_TEMPLATE

    def __init__(
        self,
        natural: bool = False,
        max_steps: int = 10,
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
        self.natural = check_bool("natural", natural)
        self.player = ""  # cards as concatenated 2-character strings
        self.dealer = ""
        self.deck = ""
        self.result: float | None = None

    def _game_reset(self, rng: np.random.Generator) -> None:
        drawn = rng.integers(len(DECK), size=4 + _SPARE_CARDS)
        cards = "".join(DECK[i] for i in drawn)
        self.dealer, self.player, self.deck = cards[:4], cards[4:8], cards[8:]
        self.result = None

    def parse_game_action(self, action_text: str) -> str | None:
        return _ALIASES.get(action_text)

    def admissible_actions(self) -> list[str]:
        return ["hit", "stand"]

    def _game_step(self, action: str) -> tuple[float, bool]:
        if action == "hit":
            self.player += self.deck[:2]
            self.deck = self.deck[2:]
            if _total(self.player)[0] > 21:
                return self._finish(-1.0)
            return 0.0, False
        while _total(self.dealer)[0] < 17 and self.deck:
            self.dealer += self.deck[:2]
            self.deck = self.deck[2:]
        player = _total(self.player)[0]
        dealer = _total(self.dealer)[0]
        result = 1.0 if dealer > 21 or player > dealer else (0.0 if player == dealer else -1.0)
        if result == 1.0 and self.natural and len(self.player) == 4 and player == 21:
            result = 1.5
        return self._finish(result)

    def _finish(self, result: float) -> tuple[float, bool]:
        self.result = result
        self._won = result > 0
        return result, True

    def _game_observation(self) -> str:
        total, soft = _total(self.player)
        if self.result is None:
            dealer = f"Dealer shows: {_RANK_LABELS[self.dealer[0]]} and one face-down card"
        else:
            dealer = f"Dealer has: {_labels(self.dealer)} (total {_total(self.dealer)[0]})"
        mine = f"Your cards: {_labels(self.player)} (total {total}{', soft' if soft else ''})"
        if self.result is None:
            return f"{dealer}\n{mine}"
        outcome = "win" if self.result > 0 else ("draw" if self.result == 0 else "loss")
        return f"{dealer}\n{mine}\nResult: {outcome}"

    def _game_state(self) -> dict[str, Any]:
        return {
            "player": self.player,
            "dealer": self.dealer,
            "deck": self.deck,
            "result": self.result,
        }

    def _game_load(self, game_state: dict[str, Any]) -> None:
        player, dealer, deck = (str(game_state[k]) for k in ("player", "dealer", "deck"))
        for cards in (player, dealer, deck):
            if len(cards) % 2:
                raise ValueError(f"malformed card string {cards!r}")
            for card in _split(cards):
                card_value(card)
        if len(player) < 4 or len(dealer) < 4:
            raise ValueError("player and dealer hold at least two cards each")
        result = game_state["result"]
        self.player, self.dealer, self.deck = player, dealer, deck
        self.result = None if result is None else float(result)

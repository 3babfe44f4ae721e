"""Playing cards as two-character strings: rank (``A23456789TJQK``) then suit (``CDHS``)."""

from __future__ import annotations

RANKS = "A23456789TJQK"
SUITS = "CDHS"
_RANK_NAMES = {"A": "A", "T": "10", "J": "J", "Q": "Q", "K": "K"}
_SUIT_NAMES = {"C": "clubs", "D": "diamonds", "H": "hearts", "S": "spades"}
_VALUES = {rank: min(index + 1, 10) for index, rank in enumerate(RANKS)}

#: Every card of one deck, e.g. ``"TH"`` is the ten of hearts.
DECK = tuple(rank + suit for rank in RANKS for suit in SUITS)


def card_value(card: str) -> int:
    """Returns the card's value: A is 1, number cards their number, J, Q and K 10."""
    if not isinstance(card, str) or len(card) != 2 or card[0] not in RANKS or card[1] not in SUITS:
        raise ValueError(f"not a card: {card!r} (expected rank+suit such as 'TH')")
    return _VALUES[card[0]]


def card_name(card: str) -> str:
    """Returns a readable name, e.g. ``"10 of hearts"``."""
    card_value(card)
    return f"{_RANK_NAMES.get(card[0], card[0])} of {_SUIT_NAMES[card[1]]}"


def rank_label(card: str) -> str:
    """Returns the rank as people write it: ``A``, ``2`` .. ``10``, ``J``, ``Q``, ``K``."""
    return _RANK_NAMES.get(card[0], card[0])

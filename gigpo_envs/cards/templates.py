"""Prompt wording for the card games. Override fields with ``dataclasses.replace``."""

from __future__ import annotations

from gigpo_envs.prompts import PromptTemplate

POINTS_TEMPLATE = PromptTemplate(
    task=(
        "You are playing a card arithmetic game. Write a formula one token per step: a number "
        "from your cards, an operator (+ - * /) or a parenthesis. Finish with '=' to submit "
        "the formula.\n{legend}"
    ),
    example_action="=",
)

NUMBERLINE_TEMPLATE = PromptTemplate(
    task=(
        "You are on a number line. Move the current position to the target, one step at a "
        "time: '+' moves right (adds 1), '-' moves left (subtracts 1).\n{legend}"
    ),
    example_action="+",
)

BLACKJACK_TEMPLATE = PromptTemplate(
    task=(
        "You are playing Blackjack against the dealer. Get a hand total closer to 21 than the "
        "dealer's without going over. Aces count 11 unless that would bust you, then 1; J, Q "
        "and K count 10. 'hit' takes another card; 'stand' ends your turn and the dealer "
        "draws until reaching at least 17.\n{legend}"
    ),
    example_action="stand",
)

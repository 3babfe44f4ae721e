"""The gym_cards games in text: EZPoints / Points24, NumberLine and Blackjack."""

from gigpo_envs.cards.blackjack import BlackjackEnv
from gigpo_envs.cards.formula import evaluate, is_solvable, solve
from gigpo_envs.cards.numberline import NumberLineEnv
from gigpo_envs.cards.points import PointsEnv

__all__ = ["BlackjackEnv", "NumberLineEnv", "PointsEnv", "evaluate", "is_solvable", "solve"]

"""Sokoban: generator, optimal solver and the text environment ``gigpo/Sokoban-v0``."""

from gigpo_envs.sokoban.env import SokobanEnv
from gigpo_envs.sokoban.generator import GeneratedRoom, generate_room
from gigpo_envs.sokoban.room import Layout
from gigpo_envs.sokoban.solver import solve

__all__ = ["GeneratedRoom", "Layout", "SokobanEnv", "generate_room", "solve"]

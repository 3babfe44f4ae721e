"""Prompt wording for Sokoban; override fields with ``dataclasses.replace``."""

from __future__ import annotations

from gigpo_envs.prompts import PromptTemplate

SOKOBAN_TEMPLATE = PromptTemplate(
    task=(
        "You are playing Sokoban. Push every box onto a target. You move one cell per action "
        "(up, down, left or right) and push a box by walking into it; a box moves only if the "
        "cell behind it is free. You cannot pull boxes, so avoid pushing a box into a corner "
        "or against a wall where it can no longer reach a target.\n{legend}"
    ),
    example_action="left",
)

"""Prompt wording for ALFWorld; override fields with ``dataclasses.replace``."""

from __future__ import annotations

from gigpo_envs.prompts import PromptTemplate

ALFWORLD_TEMPLATE = PromptTemplate(
    task=(
        "You are an expert agent operating in the ALFRED embodied environment, a household "
        "made of text. Each observation ends with your task. Move between receptacles with "
        "'go to', open and close them, take objects and move them to receptacles, and heat, "
        "cool or clean what you hold with the microwave, fridge or sink. Use exactly one of "
        "the admissible actions per step; anything else has no effect.\n{legend}"
    ),
    example_action="go to desk 1",
)

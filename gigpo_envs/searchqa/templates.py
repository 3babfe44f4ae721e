"""Prompt wording of ``gigpo/SearchQA-v0``. Override fields with ``dataclasses.replace``."""

from __future__ import annotations

from gigpo_envs.prompts import PromptTemplate

SEARCHQA_TEMPLATE = PromptTemplate(
    task=(
        "You answer questions with the help of a search engine. Each turn, either search or "
        "answer. To search, write a query inside <search> </search>; the top results come "
        "back inside <information> </information>. You may search several times. When you "
        "know the answer, give it inside <answer> </answer>, as a short phrase without "
        "explanation.\n{legend}"
    ),
    admissible="",
    format_instruction=(
        "First think step by step inside <think> </think> tags, then write exactly one "
        "<search> query </search> or <answer> answer </answer>, for example: {example}"
    ),
    example_action="<answer>Paris</answer>",
)

"""Prompt wording for WebShop; override fields with ``dataclasses.replace``."""

from __future__ import annotations

from gigpo_envs.prompts import PromptTemplate

WEBSHOP_TEMPLATE = PromptTemplate(
    task=(
        "You are an expert autonomous agent shopping in an online store (WebShop). Follow "
        "the instruction on the page: search for the product it asks for, open promising "
        "results, choose the options it names (color, size, ...), check the price, and buy "
        "it with click[buy now]. Pages are shown as their texts separated by [SEP]. "
        "Search is only possible on the search page; elsewhere use click[back to search] "
        "first.\n{legend}"
    ),
    example_action="search[red running shoes]",
)

"""A scripted WebShop expert: it knows the goal's product and walks the shortest path to it.

It searches with the instruction's words (without the price sentence), or, when they do
not find the product, with its title, or else with the start of its search document; pages
through the results to the product; opens it; chooses, for each goal option, the product's
value that matches it best; and buys. On generated goals it scores 1.0; tests and the
benchmark use it, and it shows what a good episode looks like.
"""

from __future__ import annotations

from typing import Any

from gigpo_envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    PRODUCTS_PER_PAGE,
    clickable_key,
)
from gigpo_envs.webshop.reward import normalize_color, token_set_ratio
from gigpo_envs.webshop.search import product_document

_PRICE_SENTENCE = ", and price lower than"
_MAX_QUERY_CHARS = 200  # the action parser takes actions of up to 256 characters


def goal_query(instruction_text: str) -> str:
    """The instruction without its price sentence, lower case: the expert's first query."""
    return instruction_text.split(_PRICE_SENTENCE)[0].strip().lower()


def _best_value(values: tuple[str, ...], wanted: Any) -> str | None:
    wanted_key = clickable_key(str(wanted if isinstance(wanted, str) else wanted[-1]))
    for value in values:
        if clickable_key(value) == wanted_key:
            return value
    scored = [(token_set_ratio(normalize_color(v), normalize_color(wanted_key)), v) for v in values]
    best = max(scored, default=(0, None))
    return best[1] if best[0] > 85 else None


def expert_action(env: Any) -> str:
    """Returns the expert's next action text (``search[...]`` or ``click[...]``).

    Args:
      env: a :class:`~gigpo_envs.webshop.env.WebShopEnv` (the unwrapped env) after reset.

    Returns:
      The action without tags; wrap it as ``<action>...</action>`` to step the env. On the
      done page there is nothing to do and it returns ``""``.
    """
    goal, page, shop = env.goal, env.page, env.shop
    target = goal.asin
    if page.kind == "search":
        product = shop.catalog.by_asin[target]
        candidates = (
            goal_query(goal.instruction_text),
            clickable_key(product.title),
            clickable_key(product_document(product)["contents"])[:_MAX_QUERY_CHARS],
        )
        query = next((q for q in candidates if target in shop.search.search(q)), candidates[-1])
        return f"search[{query}]"
    if page.kind == "results":
        hits = shop.search.search(page.query or "")
        if target not in hits:
            return f"click[{BACK_TO_SEARCH}]"
        target_page = hits.index(target) // PRODUCTS_PER_PAGE + 1
        if target_page > page.page:
            return f"click[{NEXT_PAGE}]"
        if target_page < page.page:
            return f"click[{PREV_PAGE}]"
        return f"click[{target.lower()}]"
    if page.kind == "item":
        if page.asin != target:
            return f"click[{PREV_PAGE}]"
        product = shop.catalog.by_asin[target]
        for wanted in goal.options:
            for name, values in product.options.items():
                if isinstance(wanted, tuple) and wanted[0] != name:
                    continue
                value = _best_value(values, wanted)
                if value is not None:
                    if page.options.get(name) != value:
                        return f"click[{clickable_key(value)}]"
                    break
        return f"click[{BUY_NOW}]"
    if page.kind == "done":
        return ""
    return f"click[{PREV_PAGE}]"

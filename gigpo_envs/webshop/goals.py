"""WebShop's goals: one per human instruction, or one per option combination (synthetic).

Both follow WebShop's ``get_human_goals`` / ``get_synthetic_goals``; the price bound of a
goal is drawn from a generator keyed by its product and instruction (not from the global
``random`` state), so the same files give the same goals in every process.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gigpo_envs.webshop.records import (
    NO_PRICE_BOUND,
    PRICE_RANGE,
    Goal,
    Product,
    as_text,
    keyed_uniforms,
)


def price_bound(price: float, *key: object) -> tuple[float, str]:
    """A goal's price bound and its sentence, as WebShop draws them (keyed by ``key``).

    The bound is the higher of two distinct draws from the first four values of
    :data:`PRICE_RANGE` above ``price``; with fewer than two such values there is no bound
    (:data:`NO_PRICE_BOUND`, empty sentence).
    """
    candidates = [bound for bound in PRICE_RANGE if bound > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND, ""
    first, second = keyed_uniforms("webshop-price-bound", *key)
    pick = int(first * len(candidates))
    other = int(second * (len(candidates) - 1))
    other += other >= pick  # a second, different position
    upper = candidates[max(pick, other)]
    return upper, f", and price lower than {upper:.2f} dollars"


def human_goals(
    products: Sequence[Product], human_instructions: Mapping[str, Any], skipped: Counter
) -> list[Goal]:
    """WebShop's ``get_human_goals``: one goal per human instruction of a known product.

    Goals come in product order, then instruction order. Instructions without
    ``instruction_attributes`` are skipped (as in WebShop), and so are malformed ones.
    """
    goals: list[Goal] = []
    for product in products:
        instructions = human_instructions.get(product.asin)
        if not isinstance(instructions, list):
            continue
        for number, instruction in enumerate(instructions):
            if not isinstance(instruction, Mapping) or not isinstance(
                instruction.get("instruction"), str
            ):
                skipped["malformed instruction"] += 1
                continue
            goal_attributes = instruction.get("instruction_attributes")
            if not isinstance(goal_attributes, list) or not goal_attributes:
                skipped["instruction without attributes"] += 1
                continue
            goal_options = instruction.get("instruction_options")
            goal_options = goal_options if isinstance(goal_options, list) else []
            upper, price_text = price_bound(product.price, product.asin, number)
            goals.append(
                Goal(
                    asin=product.asin,
                    instruction_text=instruction["instruction"].strip(".") + price_text,
                    attributes=tuple(as_text(a) for a in goal_attributes),
                    options=tuple(as_text(o) for o in goal_options),
                    price_upper=upper,
                    name=product.title,
                    query=product.query,
                    category=product.category,
                    product_category=product.product_category,
                    source="human",
                )
            )
    return goals


def synthetic_goals(
    products: Sequence[Product],
    attributes: Mapping[str, Any],
    skipped: Counter,
    max_goals_per_product: int = 1000,
) -> list[Goal]:
    """WebShop's ``get_synthetic_goals``: one goal per option combination of each product.

    A product needs an ``instruction`` and non-empty ``instruction_attributes`` in
    ``items_ins_v2``. Options are combined in sorted name order; at most
    ``max_goals_per_product`` combinations per product are kept (WebShop keeps all).
    """
    goals: list[Goal] = []
    for product in products:
        known = attributes.get(product.asin)
        if not isinstance(known, Mapping) or not isinstance(known.get("instruction"), str):
            continue
        goal_attributes = known.get("instruction_attributes")
        if not isinstance(goal_attributes, list) or not goal_attributes:
            skipped["instruction without attributes"] += 1
            continue
        upper, price_text = price_bound(product.price, product.asin, "synthetic")
        names = sorted(product.options)
        combinations = itertools.product(*(product.options[name] for name in names))
        for combination in itertools.islice(combinations, max_goals_per_product):
            pairs = tuple(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{name}: {value}" for name, value in pairs)
            goals.append(
                Goal(
                    asin=product.asin,
                    instruction_text=known["instruction"]
                    + (" with " + option_text if option_text else "")
                    + price_text,
                    attributes=tuple(as_text(a) for a in goal_attributes),
                    options=pairs,
                    price_upper=upper,
                    name=product.title,
                    query=product.query,
                    category=product.category,
                    product_category=product.product_category,
                    source="synthetic",
                )
            )
    return goals

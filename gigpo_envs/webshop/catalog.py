"""A generated WebShop catalog: products and goals in the original files' schema, no download.

:func:`generate_raw` writes, for a seed, the three objects WebShop reads: the product list
of ``items_shuffle.json`` (``name``, ``full_description``, ``small_description``,
``pricing``, ``customization_options``, ``asin``, ``category``, ``query``,
``product_category``, ...), the ``items_ins_v2.json`` dict (asin -> ``attributes``,
``instruction``, ``instruction_attributes``) and the ``items_human_ins.json`` dict (asin ->
instructions with ``instruction_attributes`` and ``instruction_options``). They go through
the same loader as the real files (:mod:`gigpo_envs.webshop.data`), so a generated goal is
scored by exactly the code that scores a real one.

Every product has a type (:data:`~gigpo_envs.webshop.vocab.PRODUCT_TYPES`), three or four
of its type's attributes, one or two option kinds with three to six values, and a price or
a price range. Every product has one instruction: the type, one or two of its attributes
and one value of each option, which the product itself satisfies (so a perfect agent can
reach reward 1.0 on every goal). The same ``(num_products, seed)`` gives the same catalog
in every process.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from gigpo_envs.webshop.data import Catalog, build_products, gc_paused, human_goals
from gigpo_envs.webshop.vocab import (
    BRANDS,
    CATEGORY_OF,
    DESCRIPTION_OPENERS,
    MODIFIERS,
    OPTION_VALUES,
    PRODUCT_TYPES,
)

#: The largest ``num_products``, generated or read: above the 1,181,436 products of WebShop's
#: full catalog, so every real file fits; a generated catalog this size already takes
#: gigabytes (about 5 kB of memory a product).
MAX_PRODUCTS = 2_000_000
_ASIN_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASIN_SPACE = 36**8
_ASIN_STRIDE = 1_000_003  # prime, coprime with 36**8: index -> asin is one-to-one


def _asin(index: int, seed: int) -> str:
    number = (index * _ASIN_STRIDE + seed * 7919) % _ASIN_SPACE
    digits = []
    for _ in range(8):
        number, digit = divmod(number, 36)
        digits.append(_ASIN_ALPHABET[digit])
    return "B0" + "".join(reversed(digits))


_BLOCK = 1024  # products per generator block
_DRAWS = 48  # uniforms per product, more than any product uses


class _Draws:
    """Random choices read from one product's row of pre-drawn uniforms (fast, no numpy
    call per choice)."""

    def __init__(self, row: list[float]) -> None:
        self._row, self._next = row, 0

    def random(self) -> float:
        value = self._row[self._next]
        self._next += 1
        return value

    def integers(self, low: int, high: int | None = None) -> int:
        if high is None:
            low, high = 0, low
        return low + int(self.random() * (high - low))

    def sample(self, n: int, k: int) -> list[int]:
        """``k`` distinct positions of ``range(n)``, in ascending order."""
        pool = list(range(n))
        for i in range(k):
            j = i + int(self.random() * (n - i))
            pool[i], pool[j] = pool[j], pool[i]
        return sorted(pool[:k])


def _uniform_rows(seed: int, num_products: int) -> list[list[float]]:
    # Block b of every catalog of one seed is drawn from the generator seeded [seed, b], so a
    # larger catalog starts with the smaller one's products.
    rows: list[list[float]] = []
    for block in range((num_products + _BLOCK - 1) // _BLOCK):
        draws = np.random.default_rng([seed, block]).random((_BLOCK, _DRAWS))
        rows.extend(draws.tolist())
    return rows[:num_products]


def _price_text(draw: _Draws) -> str:
    low = round(math.exp(math.log(4.0) + draw.random() * math.log(100.0)), 2)
    if draw.random() < 0.2:
        high = round(low * (1.2 + 1.3 * draw.random()), 2)
        return f"${low:.2f}${high:.2f}"
    return f"${low:.2f}"


def _instruction(noun: str, attributes: list[str], options: list[str]) -> str:
    text = f"i am looking for {noun} that {'is' if noun[-1] != 's' else 'are'} "
    text += " and ".join(attributes)
    if options:
        text += ", with " + " and ".join(options)
    return text


def generate_raw(
    num_products: int = 1000, seed: int = 0
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Generates a catalog in WebShop's file schema.

    Args:
      num_products: how many products (``1 .. MAX_PRODUCTS``).
      seed: the catalog seed; the same ``(num_products, seed)`` gives the same catalog, and a
        larger catalog of one seed starts with the smaller one's products.

    Returns:
      ``(items, attributes, human_instructions)``: the contents of ``items_shuffle.json``,
      ``items_ins_v2.json`` and ``items_human_ins.json``.
    """
    if isinstance(num_products, bool) or not 1 <= int(num_products) <= MAX_PRODUCTS:
        raise ValueError(f"num_products must be in 1..{MAX_PRODUCTS:,}, got {num_products!r}")
    if isinstance(seed, bool) or int(seed) < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    items: list[dict[str, Any]] = []
    attributes: dict[str, Any] = {}
    instructions: dict[str, Any] = {}
    for index, row in enumerate(_uniform_rows(int(seed), int(num_products))):
        rng = _Draws(row)
        kind = PRODUCT_TYPES[rng.integers(len(PRODUCT_TYPES))]
        asin = _asin(index, int(seed))
        chosen = rng.sample(len(kind.attributes), rng.integers(3, 5))
        product_attributes = [kind.attributes[i] for i in chosen]
        brand = BRANDS[rng.integers(len(BRANDS))]
        modifier = MODIFIERS[rng.integers(len(MODIFIERS))]
        lead = product_attributes[rng.integers(len(product_attributes))]
        title = f"{brand} {modifier} {lead.title()} {kind.noun.title()}"
        if rng.random() < 0.5:
            title += f" - {product_attributes[0].title()}, {kind.breadcrumb[-1]}"
        options: dict[str, list[dict[str, str]]] = {}
        for option_name in kind.options:
            values = OPTION_VALUES[option_name]
            picked = rng.sample(len(values), rng.integers(3, 7))
            options[option_name] = [{"value": values[i]} for i in picked]
        opener = DESCRIPTION_OPENERS[rng.integers(len(DESCRIPTION_OPENERS))]
        description = (
            f"{opener} this {kind.noun} by {brand} is {', '.join(product_attributes[:-1])} "
            f"and {product_attributes[-1]}."
        )
        bullets = [f"{a.capitalize()}: a {kind.noun} that is {a}." for a in product_attributes]
        items.append(
            {
                "name": title,
                "full_description": description,
                "small_description": bullets,
                "pricing": _price_text(rng),
                "images": [""],
                "product_category": " \u203a ".join(kind.breadcrumb),
                "average_rating": "",
                "customization_options": options,
                "asin": asin,
                "category": CATEGORY_OF[kind.breadcrumb[0]],
                "query": kind.query,
                "brand": f"Brand: {brand}",
            }
        )
        wanted = rng.sample(len(product_attributes), rng.integers(1, 3))
        goal_attributes = [product_attributes[i] for i in wanted]
        goal_options = [option[rng.integers(len(option))]["value"] for option in options.values()]
        text = _instruction(kind.noun, goal_attributes, goal_options)
        attributes[asin] = {
            "attributes": product_attributes,
            "instruction": text,
            "instruction_attributes": goal_attributes,
        }
        instructions[asin] = [
            {
                "asin": asin,
                "instruction": text,
                "attributes": product_attributes,
                "options": [
                    f"{name}: {value}" for name, value in zip(options, goal_options, strict=True)
                ],
                "instruction_attributes": goal_attributes,
                "instruction_options": goal_options,
                "assignment_id": f"generated-{seed}-{index}",
                "worker_id": "generated",
            }
        ]
    return items, attributes, instructions


def generate_catalog(num_products: int = 1000, seed: int = 0) -> Catalog:
    """Generates a catalog and loads it as WebShop loads its files (human-style goals)."""
    with gc_paused():
        items, attributes, instructions = generate_raw(num_products, seed)
        catalog = Catalog(build_products(items, attributes), [])
        catalog.goals = human_goals(catalog.products, instructions, catalog.skipped)
    return catalog


def write_catalog(
    directory: str | os.PathLike[str], num_products: int = 1000, seed: int = 0
) -> dict[str, Path]:
    """Writes a generated catalog as ``items_shuffle.json``, ``items_ins_v2.json`` and
    ``items_human_ins.json`` in ``directory`` (created if needed); returns their paths."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = {
        "items": root / "items_shuffle.json",
        "attributes": root / "items_ins_v2.json",
        "human": root / "items_human_ins.json",
    }
    for path, content in zip(paths.values(), generate_raw(num_products, seed), strict=True):
        path.write_text(json.dumps(content))
    return paths

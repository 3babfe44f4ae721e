"""WebShop's data: products and goals, built from the original files the way WebShop does.

The original release has three JSON files (``setup.sh`` of princeton-nlp/WebShop fetches
them): ``items_shuffle[_1000].json`` (a list of scraped product dicts),
``items_ins_v2[_1000].json`` (asin -> ``attributes`` and a synthetic ``instruction``) and
``items_human_ins.json`` (asin -> list of human-written instructions). This module turns
them into :class:`Product` and :class:`Goal` records exactly as WebShop's ``load_products``
and ``get_human_goals`` / ``get_synthetic_goals`` do, with two deliberate differences:

* randomness is keyed, not global: a product whose price is a range gets its price from a
  blake2b digest of its asin, and a goal's price bound from one of its asin and instruction
  number. The same files give the same products and goals in every process.
* the real data's mess is skipped and counted (:attr:`Catalog.skipped`) instead of crashing:
  records that are not dicts, numbers where text belongs, unparsable prices, instructions
  for unknown products, empty attribute lists.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from gigpo_envs.webshop.goals import human_goals, price_bound, synthetic_goals
from gigpo_envs.webshop.records import (
    DATA_ENV_VAR,
    DEFAULT_PRICE,
    DUMMY_ATTRIBUTES,
    NO_PRICE_BOUND,
    PRICE_RANGE,
    Catalog,
    Goal,
    Product,
    WebShopDataError,
    gc_paused,
    keyed_uniforms,
)
from gigpo_envs.webshop.records import as_text as _text

__all__ = [
    "DATA_ENV_VAR",
    "DEFAULT_PRICE",
    "DUMMY_ATTRIBUTES",
    "NO_PRICE_BOUND",
    "PRICE_RANGE",
    "Catalog",
    "Goal",
    "Product",
    "WebShopDataError",
    "build_products",
    "find_data_files",
    "gc_paused",
    "human_goals",
    "load_catalog",
    "parse_options",
    "parse_pricing",
    "price_bound",
    "product_price",
    "synthetic_goals",
]

_NOT_PRICE_CHARS = re.compile(r"[^\d.]")


def parse_pricing(pricing: Any) -> tuple[float, ...] | None:
    """Parses WebShop's ``pricing`` field; returns None when there is no usable price.

    ``"$877.80"`` gives ``(877.8,)``; a glued range ``"$19.99$27.99"`` gives its first two
    prices; ``"$1,847.00"`` gives ``(1847.0,)``. A number is taken as one price. Parts that
    do not parse are dropped (WebShop would crash on them).
    """
    if isinstance(pricing, int | float) and not isinstance(pricing, bool):
        return (float(pricing),) if pricing >= 0 else None
    if not isinstance(pricing, str) or not pricing:
        return None
    prices = []
    for part in pricing.split("$")[1:]:
        try:
            prices.append(float(Decimal(_NOT_PRICE_CHARS.sub("", part))))
        except InvalidOperation:
            continue
    return tuple(prices[:2]) or None


def _price_tag(prices: tuple[float, ...]) -> str:
    # WebShop formats with Python's float repr: "$100.0", "$19.99 to $27.99".
    return f"${prices[0]}" if len(prices) == 1 else f"${prices[0]} to ${prices[1]}"


def product_price(asin: str, prices: tuple[float, ...]) -> float:
    """The price paid for a product: its one price, or a uniform draw keyed by ``asin``."""
    if len(prices) == 1:
        return prices[0]
    low, high = prices[0], prices[1]
    return low + (high - low) * keyed_uniforms("webshop-price", asin)[0]


def parse_options(customization_options: Any) -> dict[str, tuple[str, ...]]:
    """WebShop's ``options``: name (lower case) -> values (stripped, ``/`` -> ``" | "``).

    Names whose content is ``null`` or not a list are skipped, as are values that are not
    dicts with a text ``value``.
    """
    options: dict[str, tuple[str, ...]] = {}
    if not isinstance(customization_options, Mapping):
        return options
    for name, contents in customization_options.items():
        if not isinstance(contents, list):
            continue
        values = []
        for content in contents:
            value = content.get("value") if isinstance(content, Mapping) else None
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                values.append(str(value).strip().replace("/", " | ").lower())
        options[str(name).lower()] = tuple(values)
    return options


def build_products(
    raw_items: Iterable[Any],
    attributes: Mapping[str, Any] | None = None,
    num_products: int | None = None,
    skipped: Counter | None = None,
) -> list[Product]:
    """WebShop's ``load_products``: raw product dicts -> :class:`Product` records.

    Args:
      raw_items: the ``items_shuffle*.json`` list.
      attributes: the ``items_ins_v2*.json`` dict (asin -> ``{"attributes": [...], ...}``),
        or None (every product gets :data:`DUMMY_ATTRIBUTES`).
      num_products: use only the first this many raw items (before any filtering).
      skipped: a counter to add the reasons of skipped items to.

    Items whose asin is missing, ``"nan"`` or longer than 10 characters, and repeats of an
    asin, are skipped, as in WebShop; so are items that are not dicts.
    """
    skipped = skipped if skipped is not None else Counter()
    attributes = attributes if isinstance(attributes, Mapping) else {}
    items = list(raw_items)
    if num_products is not None:
        items = items[: int(num_products)]
    products: list[Product] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Mapping):
            skipped["item is not a dict"] += 1
            continue
        asin = _text(item.get("asin"))
        if not asin or asin == "nan" or len(asin) > 10:
            skipped["bad asin"] += 1
            continue
        if asin in seen:
            skipped["repeated asin"] += 1
            continue
        seen.add(asin)
        bullets = item.get("small_description")
        bullet_points = (
            tuple(_text(b) for b in bullets) if isinstance(bullets, list) else (_text(bullets),)
        )
        prices = parse_pricing(item.get("pricing")) or (DEFAULT_PRICE,)
        known = attributes.get(asin)
        product_attributes = (
            tuple(_text(a) for a in known["attributes"] if _text(a))
            if isinstance(known, Mapping) and isinstance(known.get("attributes"), list)
            else DUMMY_ATTRIBUTES
        )
        products.append(
            Product(
                asin=asin,
                title=_text(item.get("name")),
                description=_text(item.get("full_description")),
                bullet_points=bullet_points or ("",),
                price_tag=_price_tag(prices),
                prices=prices,
                price=product_price(asin, prices),
                options=parse_options(item.get("customization_options")),
                attributes=product_attributes or DUMMY_ATTRIBUTES,
                category=_text(item.get("category")),
                query=_text(item.get("query")).lower().strip(),
                product_category=_text(item.get("product_category")),
            )
        )
    return products


def _read_json(path: Path, kind: type) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError as error:
        raise WebShopDataError(f"WebShop data file not found: {path}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise WebShopDataError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, kind):
        raise WebShopDataError(f"{path} must hold a JSON {kind.__name__}, got {type(data)}")
    return data


def find_data_files(directory: str | os.PathLike[str] | None = None) -> dict[str, Path | None]:
    """Finds the original files in ``directory`` (default: ``$WEBSHOP_DATA``).

    Returns ``{"items": ..., "attributes": ..., "human": ...}``: the product file
    (``items_shuffle_1000.json``, else ``items_shuffle.json``), the attribute file of the same
    size (``items_ins_v2_1000.json`` / ``items_ins_v2.json``) or None, and
    ``items_human_ins.json`` or None. Raises :class:`WebShopDataError` if there is no product
    file.
    """
    if directory is None:
        directory = os.environ.get(DATA_ENV_VAR)
        if not directory:
            raise WebShopDataError(
                f"no WebShop data directory given and ${DATA_ENV_VAR} is not set; "
                "pass data_path= or use the generated catalog (data_path=None)"
            )
    root = Path(directory)
    if not root.is_dir():
        raise WebShopDataError(f"WebShop data directory not found: {root}")
    for suffix in ("_1000", ""):
        items = root / f"items_shuffle{suffix}.json"
        if items.is_file():
            attributes = root / f"items_ins_v2{suffix}.json"
            human = root / "items_human_ins.json"
            return {
                "items": items,
                "attributes": attributes if attributes.is_file() else None,
                "human": human if human.is_file() else None,
            }
    raise WebShopDataError(f"{root} has no items_shuffle_1000.json or items_shuffle.json")


def load_catalog(
    items_path: str | os.PathLike[str],
    attributes_path: str | os.PathLike[str] | None = None,
    human_path: str | os.PathLike[str] | None = None,
    goals: str = "human",
    num_products: int | None = None,
) -> Catalog:
    """Loads products and goals from the original WebShop files.

    Args:
      items_path: ``items_shuffle*.json``.
      attributes_path: ``items_ins_v2*.json`` or None (dummy attributes, no synthetic goals).
      human_path: ``items_human_ins.json`` or None (no human goals).
      goals: ``"human"`` or ``"synthetic"``: which goals to build.
      num_products: use only the first this many products of the file (WebShop's 1k, 100k).

    Raises:
      WebShopDataError: a file is missing, not JSON, or not a list / dict at the top.
      ValueError: ``goals`` is not one of the two kinds.
    """
    if goals not in ("human", "synthetic"):
        raise ValueError(f"goals must be 'human' or 'synthetic', got {goals!r}")
    with gc_paused():
        raw_items = _read_json(Path(items_path), list)
        attributes = _read_json(Path(attributes_path), dict) if attributes_path else {}
        skipped: Counter = Counter()
        products = build_products(raw_items, attributes, num_products, skipped)
        if goals == "human":
            human = _read_json(Path(human_path), dict) if human_path else {}
            goal_list = human_goals(products, human, skipped)
            known = {product.asin for product in products}
            skipped["instructions for unknown products"] += sum(
                len(v) for k, v in human.items() if k not in known and isinstance(v, list)
            )
        else:
            goal_list = synthetic_goals(products, attributes, skipped)
    return Catalog(products, goal_list, +skipped)

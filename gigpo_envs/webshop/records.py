"""WebShop's records: a product, a goal, a catalog of both, and the helpers that build them.

See :mod:`gigpo_envs.webshop.data` for how the original files become these records and
:mod:`gigpo_envs.webshop.goals` for how goals are made.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: Price bounds a goal may name, in dollars (WebShop's ``PRICE_RANGE``).
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
#: The bound of a goal whose product costs too much for two higher bounds to exist.
NO_PRICE_BOUND = 1000000.0
#: Price of a product without a price (WebShop's default).
DEFAULT_PRICE = 100.0
#: Attributes of a product that ``items_ins_v2`` does not describe.
DUMMY_ATTRIBUTES = ("DUMMY_ATTR",)
#: Environment variable that names the directory of the original files.
DATA_ENV_VAR = "WEBSHOP_DATA"


class WebShopDataError(ValueError):
    """A WebShop data file is missing or is not in WebShop's schema."""


@dataclass(frozen=True)
class Product:
    """One product as WebShop shows and scores it.

    Attributes:
      asin: the product id (upper case, at most 10 characters).
      title, description: the ``Title`` and ``Description`` texts.
      bullet_points: the ``BulletPoints`` (features) texts.
      price_tag: the price as the pages show it (``"$19.99"``, ``"$2.99 to $6.99"``).
      prices: one price, or the two ends of a price range, in dollars.
      price: the price paid on "buy now" (a range's price is drawn once, keyed by asin).
      options: option name (lower case) -> its values (lower case, ``/`` shown as ``" | "``).
      attributes: the product's attribute phrases (``DUMMY_ATTR`` when unknown).
      category, query, product_category: shop category, the search query it was scraped
        under (lower case), and the breadcrumb string ``"a › b › c"``.
      rating: the rating the item page shows (``"N.A."``: WebShop loads no reviews).
    """

    asin: str
    title: str
    description: str
    bullet_points: tuple[str, ...]
    price_tag: str
    prices: tuple[float, ...]
    price: float
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str
    rating: str = "N.A."


@dataclass(frozen=True)
class Goal:
    """One shopping task.

    Attributes:
      asin: the product the instruction was written for.
      instruction_text: what the agent reads (with the price sentence appended).
      attributes: goal attribute phrases (non-empty).
      options: goal option values (human goals: bare values; synthetic goals: ``(name,
        value)`` pairs, compared as WebShop compares them).
      price_upper: the price bound in dollars (:data:`NO_PRICE_BOUND` when none).
      name, query, category, product_category: of the goal's product, for the type reward.
      source: ``"human"`` or ``"synthetic"``.
    """

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    options: tuple[Any, ...]
    price_upper: float
    name: str
    query: str
    category: str
    product_category: str
    source: str = "human"


@dataclass
class Catalog:
    """Products and goals, in WebShop's order, and what was skipped while loading them."""

    products: list[Product]
    goals: list[Goal]
    skipped: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.by_asin: dict[str, Product] = {product.asin: product for product in self.products}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while many small acyclic records are built
    (its full passes make building 100,000 products several times slower)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def keyed_uniforms(*parts: object) -> tuple[float, float]:
    """Two uniform floats in ``[0, 1)`` that depend only on ``parts`` (a blake2b digest)."""
    digest = hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=16).digest()
    return (
        int.from_bytes(digest[:8], "little") / 2.0**64,
        int.from_bytes(digest[8:], "little") / 2.0**64,
    )


def as_text(value: Any) -> str:
    """A text field of the raw data: strings as they are, numbers as text, else empty."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""

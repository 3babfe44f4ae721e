"""The shop behind every WebShop env of a process: catalog, goal order, splits and search.

Building a shop (loading or generating products, indexing them) is the expensive part, so
:func:`get_shop` keeps one per configuration and every env, in any number, shares it.

**Goal order and splits.** Goals are put in WebShop's order: the loader's order, shuffled
once by ``random.Random(233)`` (WebShop's ``random.seed(233); random.shuffle(goals)``, which
depends only on the number of goals, so goal ``i`` here is goal ``i`` there). The splits are
fixed ranges of that order, the same on every machine and in every worker:

* ``test``: goals ``[0, t)`` with ``t = min(500, n // 10)``;
* ``validation``: goals ``[t, t + v)`` with ``v = min(1000, n // 10)``;
* ``train``: the rest, ``[t + v, n)``; ``all``: every goal.

With WebShop's 12,087 human goals this is its own split (test 0-499, validation 500-1499,
train 1500 on), which its baselines and verl-agent's evaluation use.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gigpo_envs.webshop.catalog import generate_catalog
from gigpo_envs.webshop.data import Catalog, Goal, find_data_files, load_catalog
from gigpo_envs.webshop.search import ProductSearch

SPLITS = ("train", "validation", "test", "all")
#: WebShop's goal shuffle seed.
GOAL_SHUFFLE_SEED = 233


def split_ranges(num_goals: int) -> dict[str, range]:
    """Returns the goal positions of each split for ``num_goals`` goals (see module doc)."""
    test = min(500, num_goals // 10)
    validation = min(1000, num_goals // 10)
    return {
        "test": range(0, test),
        "validation": range(test, test + validation),
        "train": range(test + validation, num_goals),
        "all": range(num_goals),
    }


def goal_order(goals: Sequence[Goal]) -> list[Goal]:
    """Returns ``goals`` in WebShop's shuffled order (``random.Random(233).shuffle``)."""
    ordered = list(goals)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(ordered)
    return ordered


@dataclass
class Shop:
    """Products, goals in WebShop's order, their splits, and the search index.

    Attributes:
      shop_id: names the catalog (part of every env state, so a state cannot be loaded into
        an env with another catalog).
      catalog: products and goals as loaded (goals in loader order).
      goals: the goals in WebShop's shuffled order; a goal index is a position here.
      splits: split name -> goal positions.
      search: the product search index.
    """

    shop_id: str
    catalog: Catalog
    goals: list[Goal]
    splits: dict[str, range]
    search: ProductSearch

    def product_by_clickable(self, text: str) -> str | None:
        """Returns the asin a lower-cased product link names, or None."""
        return self._lower_asins.get(text)

    def __post_init__(self) -> None:
        self._lower_asins = {asin.lower(): asin for asin in self.catalog.by_asin}


@functools.lru_cache(maxsize=8)
def _cached_shop(
    data_path: str | None,
    num_products: int | None,
    catalog_seed: int,
    goals: str,
    backend: str,
    backend_options: tuple[tuple[str, Any], ...],
    index_dir: str | None,
) -> Shop:
    if data_path is None:
        if num_products is None:
            raise ValueError("a generated catalog needs num_products")
        catalog = generate_catalog(num_products, catalog_seed)
        shop_id = f"generated:{num_products}:{catalog_seed}"
    else:
        files = find_data_files(data_path)
        catalog = load_catalog(
            files["items"], files["attributes"], files["human"], goals, num_products
        )
        shop_id = f"files:{Path(files['items']).name}:{num_products}:{goals}"
    return build_shop(catalog, shop_id, backend, dict(backend_options), index_dir)


def build_shop(
    catalog: Catalog,
    shop_id: str,
    backend: str = "bm25s",
    backend_options: dict[str, Any] | None = None,
    index_dir: str | os.PathLike[str] | None = None,
) -> Shop:
    """Builds a :class:`Shop` over any catalog (not cached: pass it to envs as ``shop=``).

    Raises ``ValueError`` if the catalog has no goals.
    """
    if not catalog.goals:
        raise ValueError(f"the catalog {shop_id} has no goals (nothing to shop for)")
    ordered = goal_order(catalog.goals)
    search = ProductSearch(catalog.products, backend, backend_options, index_dir)
    return Shop(shop_id, catalog, ordered, split_ranges(len(ordered)), search)


def get_shop(
    data_path: str | os.PathLike[str] | None = None,
    num_products: int | None = 1000,
    catalog_seed: int = 0,
    goals: str = "human",
    backend: str = "bm25s",
    backend_options: dict[str, Any] | None = None,
    index_dir: str | os.PathLike[str] | None = None,
) -> Shop:
    """Returns the shared :class:`Shop` of a configuration, building it on first use.

    Args:
      data_path: None for the generated catalog; else a directory of the original files
        (see :func:`~gigpo_envs.webshop.data.find_data_files`), or ``"env"`` for
        ``$WEBSHOP_DATA``.
      num_products: products to generate, or to read from the start of the product file
        (None: all of it).
      catalog_seed: seed of the generated catalog.
      goals: ``"human"`` or ``"synthetic"`` goals from the original files.
      backend, backend_options, index_dir: see :class:`~gigpo_envs.webshop.search.ProductSearch`.
    """
    if data_path == "env":
        data_path = find_data_files(None)["items"].parent
    options = tuple(sorted((backend_options or {}).items()))
    return _cached_shop(
        None if data_path is None else str(data_path),
        None if num_products is None else int(num_products),
        int(catalog_seed),
        goals,
        backend,
        options,
        None if index_dir is None else str(index_dir),
    )

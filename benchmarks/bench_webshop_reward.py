"""WebShop's reward with the spaCy-free noun heuristic against the spaCy tagger: JSON lines.

The original scores a purchase's type with spaCy's ``en_core_web_sm``; without spaCy the env
falls back to :func:`gigpo_envs.webshop.nouns.simple_nouns`. This script measures how often
the two give the same reward, on purchases built from the repository's real WebShop sample
and from generated catalogs (see :func:`reward_cases`):

* ``webshop_reward_agreement``: per case set, the share of cases whose reward (``total``) is
  equal under both taggers (target: 98.5%), the share whose ``r_type`` is, the largest
  difference, and the most frequent tokens behind the differences. The baseline is the same
  measurement for the heuristic of the previous release (``--baseline-module``, optional).
* ``webshop_tagging``: milliseconds per title for the spaCy tagger (only the POS components,
  and the whole pipeline as WebShop runs it) and for the heuristic, uncached.

Needs the ``webshop`` extra (spaCy and ``en_core_web_sm``)::

    python benchmarks/bench_webshop_reward.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gigpo_envs.webshop import generate_catalog, load_catalog
from gigpo_envs.webshop.data import Goal, Product, price_bound
from gigpo_envs.webshop.nouns import SpacyNouns, simple_nouns
from gigpo_envs.webshop.reward import purchase_reward

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "webshop"


@dataclass(frozen=True)
class RewardCase:
    """One purchase to score: the goal, the product bought, its chosen options and price."""

    source: str
    goal: Goal
    product: Product
    options: dict[str, str]
    price: float


def _chosen_options(product: Product, goal: Goal, rng: random.Random, own: bool) -> dict:
    chosen = {}
    for name, values in product.options.items():
        wanted = [v for v in values if v in goal.options] if own else []
        chosen[name] = wanted[0] if wanted else rng.choice(values)
    return chosen


def _purchases(goal: Goal, products: Sequence[Product], rng: random.Random, source: str):
    """The goal's own product, two of the same query, one of the same shop category, one
    at random: what an agent buys after searching for the goal, and a miss."""
    own = [p for p in products if p.asin == goal.asin]
    same_query = [p for p in products if p.query == goal.query and p.asin != goal.asin]
    same_category = [p for p in products if p.category == goal.category and p.query != goal.query]
    picks = own[:1]
    picks += rng.sample(same_query, min(2, len(same_query)))
    picks += rng.sample(same_category, min(1, len(same_category)))
    picks.append(rng.choice(products))
    for product in picks:
        is_own = product.asin == goal.asin
        yield RewardCase(
            source, goal, product, _chosen_options(product, goal, rng, is_own), product.price
        )


def sample_goals(products: Sequence[Product]) -> list[Goal]:
    """Goals for the real sample's products (its instructions belong to other products): the
    sample's human instructions' attributes and options, dealt out in order, one per
    product, with the product's title, query and categories as WebShop's goal carries them."""
    human = json.loads((SAMPLE / "human_ins_sample.json").read_text())
    instructions = [entry for entries in human.values() for entry in entries]
    goals = []
    for index, product in enumerate(products):
        instruction = instructions[index % len(instructions)]
        upper, price_text = price_bound(product.price, product.asin, 0)
        goals.append(
            Goal(
                asin=product.asin,
                instruction_text=instruction["instruction"].strip(".") + price_text,
                attributes=tuple(instruction["instruction_attributes"]) or ("x",),
                options=tuple(instruction["instruction_options"]),
                price_upper=upper,
                name=product.title,
                query=product.query,
                category=product.category,
                product_category=product.product_category,
            )
        )
    return goals


def reward_cases(seed: int = 0, generated_products: Sequence[int] = (1000, 600)) -> dict:
    """Purchases to score, by source: ``{"sample": [...], "generated": [...]}``.

    * ``sample``: every (goal, product) pair of the 43 real products of ``data/samples``
      (1,849 cases; goals from :func:`sample_goals`), the chosen options drawn from the
      product's, the goal's own where it has them.
    * ``generated``: for each goal of generated catalogs of these sizes (catalog seeds 0,
      1, ...): its own product, two of the same query, one of the same shop category and one
      at random (:func:`_purchases`).
    """
    rng = random.Random(seed)
    sample = load_catalog(SAMPLE / "items_sample.json").products
    cases: dict[str, list[RewardCase]] = {"sample": [], "generated": []}
    for goal in sample_goals(sample):
        for product in sample:
            is_own = product.asin == goal.asin
            cases["sample"].append(
                RewardCase(
                    "sample", goal, product, _chosen_options(product, goal, rng, is_own),
                    product.price,
                )
            )  # fmt: skip
    for catalog_seed, size in enumerate(generated_products):
        catalog = generate_catalog(size, seed=catalog_seed)
        for goal in catalog.goals:
            cases["generated"].extend(_purchases(goal, catalog.products, rng, "generated"))
    return cases


def score(case: RewardCase, nouns: Callable[[str], Sequence[str]]):
    """The reward breakdown of ``case`` with the noun tagger ``nouns``."""
    return purchase_reward(case.product, case.goal, case.price, case.options, nouns)


def _noun_difference(case: RewardCase, a, b) -> Counter:
    tokens: Counter = Counter()
    for title in (case.goal.name, case.product.title):
        tokens.update(set(a(title)) ^ set(b(title)))
    return tokens


def agreement(cases: Sequence[RewardCase], reference, candidate) -> dict:
    """Share of ``cases`` scored alike by the two taggers, and what differs."""
    same_total = same_type = 0
    largest = 0.0
    tokens: Counter = Counter()
    for case in cases:
        ref, cand = score(case, reference), score(case, candidate)
        same_total += ref.total == cand.total
        same_type += ref.r_type == cand.r_type
        if ref.total != cand.total:
            largest = max(largest, abs(ref.total - cand.total))
            tokens.update(_noun_difference(case, reference, candidate))
    return {
        "cases": len(cases),
        "agreement": same_total / max(len(cases), 1),
        "r_type_agreement": same_type / max(len(cases), 1),
        "max_difference": largest,
        "differing_tokens": tokens.most_common(12),
    }


def tagging_speed(titles: Sequence[str], tagger: Callable[[str], Sequence[str]]) -> float:
    """Milliseconds per title, uncached."""
    started = time.perf_counter()
    for title in titles:
        tagger(title)
    return (time.perf_counter() - started) / max(len(titles), 1) * 1e3


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--generated", type=int, nargs="+", default=[1000, 600],
        help="sizes of the generated catalogs (catalog seeds 0, 1, ...)",
    )  # fmt: skip
    args = parser.parse_args()
    spacy_nouns = SpacyNouns()
    cases = reward_cases(args.seed, args.generated)
    everything = [case for group in cases.values() for case in group]
    for name, group in [*cases.items(), ("all", everything)]:
        emit({"what": "webshop_reward_agreement", "cases_from": name, "tagger": "heuristic",
              "reference": spacy_nouns.name, **agreement(group, spacy_nouns, simple_nouns),
              "target": 0.985, "baseline": None})  # fmt: skip

    titles = list(dict.fromkeys(c.product.title for c in everything))
    full = SpacyNouns(full_pipeline=True, cache_size=0)
    fast = SpacyNouns(cache_size=0)
    emit({"what": "webshop_tagging", "titles": len(titles), "unit": "ms/title",
          "spacy_pos_components": tagging_speed(titles, fast),
          "heuristic": tagging_speed(titles, simple_nouns),
          "baseline": {"spacy_full_pipeline": tagging_speed(titles, full)}})  # fmt: skip


if __name__ == "__main__":
    main()

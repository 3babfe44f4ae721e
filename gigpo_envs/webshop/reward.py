"""WebShop's purchase reward, as pure functions (Yao et al. 2022, Sec. 3.1 and its code).

On "buy now" the purchased product and chosen options are scored against the goal::

    score = r_type * (attribute_matches + option_matches + price_ok)
                   / (len(goal.attributes) + len(goal.options) + 1)

* ``attribute_matches``: goal attributes that fuzzy-match one of the product's attributes
  (token-set ratio above 85), or else appear verbatim in its title, bullet points or
  description (lower-cased).
* ``option_matches``: goal options that fuzzy-match (ratio above 85) one chosen option; both
  sides pass through :func:`normalize_color` first.
* ``price_ok``: 1 when the product's price is at most the goal's ``price_upper``.
* ``r_type`` (:func:`type_reward`): 1, 0.5, 0.1 or 0 from whether the product shares the
  goal's search query, at least two of its category breadcrumbs, and the nouns of its title.

:func:`token_set_ratio` reproduces ``thefuzz`` 0.19 (the version WebShop pins) exactly:
``difflib`` ratios rounded to integers. The title nouns come from
:mod:`gigpo_envs.webshop.nouns`: by default spaCy's ``en_core_web_sm``, as WebShop's code
runs it, whenever spaCy and the model are installed (then the reward is the original's), else
a heuristic (:func:`~gigpo_envs.webshop.nouns.simple_nouns`, with a warning). Pass
``noun_extractor=`` to choose.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from gigpo_envs.webshop.nouns import default_nouns, simple_nouns

__all__ = [
    "COLOR_SET",
    "FUZZY_THRESHOLD",
    "RewardBreakdown",
    "TypeReward",
    "attribute_reward",
    "category_parts",
    "normalize_color",
    "option_reward",
    "price_reward",
    "purchase_reward",
    "simple_nouns",
    "token_set_ratio",
    "type_reward",
]

#: Colours that WebShop reduces an option to before comparing (its ``normalize.COLOR_SET``).
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze "
    "brown burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas "
    "coffee cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso "
    "fuchsia gold granite grape graphite grass gray green grey heather indigo ivory ivy khaki "
    "lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha "
    "multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple "
    "rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
).split()

#: A fuzzy match counts when the token-set ratio is above this (0..100).
FUZZY_THRESHOLD = 85

_NON_WORD = re.compile(r"\W", re.UNICODE)
_LATIN1_HIGH = dict.fromkeys(range(128, 256))


@dataclass(frozen=True)
class TypeReward:
    """The type-match factor and what it was made of (WebShop's ``get_type_reward``)."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


@dataclass(frozen=True)
class RewardBreakdown:
    """A purchase's score and its parts (WebShop's ``get_reward(..., verbose=True)``).

    ``total`` is in ``[0, 1]``; ``r_option`` is None when the goal has no options, and
    ``r_price`` is None when the goal has no price bound (``price_upper <= 0``).
    """

    total: float
    r_type: float
    r_att: float
    w_att: float
    r_option: float | None
    w_option: float | None
    r_price: bool | None
    w_price: float | None
    query_match: bool
    category_match: bool
    title_score: float
    attribute_matches: int
    option_matches: int

    def as_dict(self) -> dict[str, Any]:
        """Returns the breakdown as a plain dict (what the env puts in ``info``)."""
        return dict(self.__dict__)


def normalize_color(text: Any) -> Any:
    """Returns the first colour of :data:`COLOR_SET` that occurs in ``text``, else ``text``.

    A substring test, in the set's order: ``"dark blue"`` gives ``"blue"``, ``"redwood"``
    gives ``"red"`` (as in WebShop). A synthetic goal's ``(name, value)`` pair is tested by
    membership instead, as Python's ``in`` does in WebShop's code.
    """
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def _full_process(text: str) -> str:
    # thefuzz 0.19 full_process with force_ascii: drop chars 128..255, every non-word
    # character to a space, lower case, strip.
    return _NON_WORD.sub(" ", text.translate(_LATIN1_HIGH)).lower().strip()


def _ratio(a: str, b: str) -> int:
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def token_set_ratio(a: str, b: str) -> int:
    """Returns thefuzz 0.19's ``token_set_ratio(a, b)``, an int in ``[0, 100]``.

    Both strings are processed (ASCII, alphanumeric words, lower case) and split into word
    sets; the result is the best rounded difflib ratio between the sorted intersection and
    the intersection followed by either side's remaining words. Empty input gives 0.
    """
    p1, p2 = _full_process(str(a)), _full_process(str(b))
    if not p1 or not p2:
        return 0
    tokens1, tokens2 = set(p1.split()), set(p2.split())
    common = " ".join(sorted(tokens1 & tokens2))
    rest1 = " ".join(sorted(tokens1 - tokens2))
    rest2 = " ".join(sorted(tokens2 - tokens1))
    combined1 = (common + " " + rest1).strip()
    combined2 = (common + " " + rest2).strip()
    common = common.strip()
    return max(_ratio(common, combined1), _ratio(common, combined2), _ratio(combined1, combined2))


def category_parts(product_category: str) -> set[str]:
    """Returns the set of breadcrumb parts of a ``"a › b › c"`` category string."""
    return {part.strip() for part in str(product_category).split("\u203a")}


def type_reward(
    purchased_query: str,
    purchased_category: str,
    purchased_name: str,
    goal_query: str,
    goal_category: str,
    goal_name: str,
    noun_extractor: Callable[[str], Sequence[str]] = default_nouns,
) -> TypeReward:
    """WebShop's type-match factor of a purchase (``get_type_reward``).

    Args:
      purchased_query, goal_query: the search query each product was scraped under.
      purchased_category, goal_category: breadcrumb strings joined by ``" › "``.
      purchased_name, goal_name: product titles.
      noun_extractor: maps a title to its lower-cased nouns, in order with repeats
        (default: :func:`~gigpo_envs.webshop.nouns.default_nouns`, spaCy when installed).

    Returns:
      ``title_score`` = number of distinct nouns the two titles share, over the number of
      the goal title's nouns counted with repeats (0.2 when it has none), as WebShop
      computes it. ``r_type`` is 1, lowered to 0.5
      when neither the query matches, nor two or more breadcrumb parts, nor
      ``title_score > 0.2``; then to 0.1 when ``title_score < 0.1``; then to 0 when it is 0.
    """
    query_match = purchased_query == goal_query
    category_match = len(category_parts(purchased_category) & category_parts(goal_category)) >= 2
    purchased_nouns = set(noun_extractor(purchased_name))
    goal_nouns = list(noun_extractor(goal_name))
    if not goal_nouns:
        title_score = 0.2
    else:
        title_score = len(purchased_nouns & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def attribute_reward(
    goal_attributes: Sequence[str],
    product_attributes: Sequence[str],
    title: str,
    bullet_points: Sequence[str],
    description: str,
) -> tuple[float | None, int]:
    """Share of goal attributes the product has (WebShop's ``get_attribute_reward``).

    A goal attribute matches when its token-set ratio with one product attribute is above
    :data:`FUZZY_THRESHOLD`, or, failing that, when it is a substring of the lower-cased
    title, joined bullet points or description.

    Returns:
      ``(r_att, matches)``; ``r_att`` is None for a goal without attributes (WebShop's
      goals always have some; its code would divide by zero).
    """
    title_text = title.lower()
    bullets_text = " ".join(bullet_points).lower()
    description_text = description.lower()
    matches = 0
    for goal_attribute in goal_attributes:
        if any(
            token_set_ratio(attribute, goal_attribute) > FUZZY_THRESHOLD
            for attribute in product_attributes
        ):
            matches += 1
        elif (
            goal_attribute in title_text
            or goal_attribute in bullets_text
            or goal_attribute in description_text
        ):
            matches += 1
    if not goal_attributes:
        return None, 0
    return matches / len(goal_attributes), matches


def option_reward(
    chosen_options: Sequence[str], goal_options: Sequence[Any]
) -> tuple[float | None, int]:
    """Share of goal options among the chosen ones (WebShop's ``get_option_reward``).

    Both lists go through :func:`normalize_color`; a goal option matches when its
    token-set ratio with one chosen option is above :data:`FUZZY_THRESHOLD`.

    Returns:
      ``(r_option, matches)``; ``r_option`` is None when the goal has no options.
    """
    chosen = [normalize_color(option) for option in chosen_options]
    wanted = [normalize_color(option) for option in goal_options]
    matches = sum(
        1
        for goal_option in wanted
        if any(token_set_ratio(option, goal_option) > FUZZY_THRESHOLD for option in chosen)
    )
    return (matches / len(wanted) if wanted else None), matches


def price_reward(price: float, price_upper: float) -> bool | None:
    """True when ``price <= price_upper``; None when the goal has no bound (``<= 0``)."""
    return (price <= price_upper) if price_upper > 0 else None


def purchase_reward(
    product: Any,
    goal: Any,
    price: float,
    chosen_options: Mapping[str, str],
    noun_extractor: Callable[[str], Sequence[str]] = default_nouns,
) -> RewardBreakdown:
    """WebShop's reward of buying ``product`` at ``price`` with ``chosen_options`` for ``goal``.

    Args:
      product: a :class:`~gigpo_envs.webshop.data.Product` (uses ``query``,
        ``product_category``, ``title``, ``attributes``, ``bullet_points``,
        ``description``).
      goal: a :class:`~gigpo_envs.webshop.data.Goal` (uses ``query``, ``product_category``,
        ``name``, ``attributes``, ``options``, ``price_upper``).
      price: the product's price in dollars.
      chosen_options: option name -> chosen value.
      noun_extractor: see :func:`type_reward`.

    Returns:
      The :class:`RewardBreakdown`; ``total`` in ``[0, 1]``. A goal without a price bound
      counts the price term as 0 (WebShop's code would fail on it).
    """
    kind = type_reward(
        product.query,
        product.product_category,
        product.title,
        goal.query,
        goal.product_category,
        goal.name,
        noun_extractor,
    )
    r_price = price_reward(price, goal.price_upper)
    r_att, attribute_matches = attribute_reward(
        goal.attributes, product.attributes, product.title, product.bullet_points,
        product.description,
    )  # fmt: skip
    r_option, option_matches = option_reward(list(chosen_options.values()), goal.options)
    denominator = len(goal.attributes) + len(goal.options) + 1
    total = (attribute_matches + option_matches + bool(r_price)) / denominator * kind.r_type
    return RewardBreakdown(
        total=total,
        r_type=kind.r_type,
        r_att=r_att if r_att is not None else 0.0,
        w_att=len(goal.attributes) / denominator,
        r_option=r_option,
        w_option=len(goal.options) / denominator if r_option is not None else None,
        r_price=r_price,
        w_price=1 / denominator if r_price is not None else None,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        attribute_matches=attribute_matches,
        option_matches=option_matches,
    )

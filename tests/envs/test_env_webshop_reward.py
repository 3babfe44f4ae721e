"""WebShop's purchase reward on hand-worked cases."""

from __future__ import annotations

import pytest
from sample_data import sample_dir

from gigpo_envs.webshop.data import NO_PRICE_BOUND, Goal, Product
from gigpo_envs.webshop.nouns import simple_nouns
from gigpo_envs.webshop.reward import (
    attribute_reward,
    normalize_color,
    option_reward,
    price_reward,
    purchase_reward,
    token_set_ratio,
)
from gigpo_envs.webshop.reward import (
    type_reward as _type_reward,
)


def _product(**fields) -> Product:
    base = dict(
        asin="B000000001",
        title="Oakridge Wireless Headphones",
        description="",
        bullet_points=("",),
        price_tag="$30.0",
        prices=(30.0,),
        price=30.0,
        options={"color": ("black", "navy blue"), "size": ("small", "large")},
        attributes=("noise cancelling", "wireless bluetooth"),
        category="electronics",
        query="wireless headphones",
        product_category="Electronics \u203a Headphones \u203a Over-Ear",
    )
    base.update(fields)
    return Product(**base)


def _goal(**fields) -> Goal:
    base = dict(
        asin="B000000001",
        instruction_text="i need wireless headphones",
        attributes=("noise cancelling", "wireless bluetooth"),
        options=("black", "large"),
        price_upper=40.0,
        name="Oakridge Wireless Headphones",
        query="wireless headphones",
        category="electronics",
        product_category="Electronics \u203a Headphones \u203a Over-Ear",
    )
    base.update(fields)
    return Goal(**base)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # intersection "essential", rests "oil" / "oils": best is the two combined strings,
        # difflib 2 * 13 / 27 = 0.963 -> 96
        ("essential oil", "essential oils", 96),
        # one side's words are a subset of the other's: 100
        ("powder snow", "cool powder snow", 100),
        # "tea" shared; "tea" vs "tea bag" is 2 * 3 / 10 = 0.6 -> 60, the best of three
        ("tea tree", "tea bag", 60),
        # case and punctuation do not matter
        ("Noise-Cancelling", "noise cancelling", 100),
        # nothing left after processing
        ("", "anything", 0),
        ("!!!", "anything", 0),
    ],
)
def test_token_set_ratio_hand_worked(a, b, expected):
    assert token_set_ratio(a, b) == expected


def test_normalize_color_takes_the_first_colour_of_the_set():
    assert normalize_color("dark blue") == "blue"  # "blue" comes before "dark" in the set
    assert normalize_color("redwood") == "red"  # a substring test, as in WebShop
    assert normalize_color("x-large") == "x-large"
    # a synthetic goal's (name, value) pair is tested by membership
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "jet black")) == ("color", "jet black")


def test_type_reward_branches():
    # the branches, with the heuristic tagger (every word here but "the and of" a noun)
    def type_reward(*args):
        return _type_reward(*args, simple_nouns)

    same = ("wireless headphones", "a \u203a b \u203a c", "Oakridge Wireless Headphones")
    # exact match: query, category and every noun
    result = type_reward(*same, *same)
    assert (result.r_type, result.query_match, result.category_match) == (1.0, True, True)
    assert result.title_score == 1.0
    # categories share two parts in another order
    result = type_reward(
        "q1", "c \u203a x \u203a b", "Vexa Speaker", "q2", "a \u203a b \u203a c", "Z"
    )
    assert result.category_match
    # one shared part is not enough
    one = type_reward("q1", "a \u203a x", "Vexa", "q2", "a \u203a y", "Vexa")
    assert not one.category_match and not one.query_match
    # one of three goal nouns (oakridge, wireless, headphones): 1/3 > 0.2 keeps r_type 1
    result = type_reward("q1", "x", "Vexa Wireless Speaker", "q2", "y", same[2])
    assert result.title_score == pytest.approx(1 / 3) and result.r_type == 1.0
    # one of five nouns, no query or category match: 0.2 is not > 0.2 -> 0.5
    goal_name = "alpha bravo charlie delta echo"
    result = type_reward("q1", "x", "alpha zulu", "q2", "y", goal_name)
    assert result.title_score == pytest.approx(0.2) and result.r_type == 0.5
    # one of twelve: < 0.1 -> 0.1, even with a query match
    goal_name = " ".join(f"noun{i}x" for i in range(11)) + " alpha"
    result = type_reward("q", "x", "alpha", "q", "y", goal_name)
    assert result.title_score == pytest.approx(1 / 12) and result.r_type == 0.1
    # no shared noun: 0
    result = type_reward("q", "a \u203a b", "alpha", "q", "a \u203a b", "bravo")
    assert result.r_type == 0.0
    # a goal title without nouns scores 0.2 (and the query match keeps r_type 1)
    result = type_reward("q", "x", "alpha", "q", "y", "the and of")
    assert result.title_score == 0.2 and result.r_type == 1.0


def test_attribute_reward_fuzzy_then_text():
    goal = ["tea tree", "essential oils", "natural ingredients"]
    # "essential oils" ~ "essential oil" (96); "tea tree" in the title; the last in bullets
    r_att, matches = attribute_reward(
        goal, ["essential oil"], "Tea Tree Shampoo", ["Made with Natural Ingredients"], ""
    )
    assert (r_att, matches) == (1.0, 3)
    # "tea bag" scores 60 against "tea tree": no match anywhere
    r_att, matches = attribute_reward(goal, ["tea bag"], "Breakfast Tea", [], "a calm aroma")
    assert (r_att, matches) == (0.0, 0)
    assert attribute_reward([], ["x"], "", [], "") == (None, 0)


def test_option_reward():
    # "dark blue" and "blue" both normalise to "blue"; "x-large" matches; "pack of 3" does not
    r_option, matches = option_reward(["dark blue", "x-large"], ["blue", "x-large", "pack of 3"])
    assert (r_option, matches) == (pytest.approx(2 / 3), 2)
    assert option_reward(["a", "b"], []) == (None, 0)
    # synthetic (name, value) pairs, compared as WebShop's code compares them
    assert option_reward(["black"], [("color", "black")]) == (1.0, 1)
    assert option_reward(["small"], [("size", "small")]) == (1.0, 1)
    assert option_reward(["large"], [("size", "small")]) == (0.0, 0)


def test_price_reward():
    assert price_reward(30.0, 40.0) is True
    assert price_reward(40.0, 40.0) is True
    assert price_reward(40.01, 40.0) is False
    assert price_reward(10.0, 0.0) is None


def test_purchase_reward_totals():
    product, goal = _product(), _goal()
    # everything: (2 attributes + 2 options + price) / 5 * 1
    full = purchase_reward(product, goal, 30.0, {"color": "black", "size": "large"})
    assert full.total == 1.0 and full.r_price is True
    assert (full.w_att, full.w_option, full.w_price) == (0.4, 0.4, 0.2)
    # one option wrong: 4 / 5
    one_off = purchase_reward(product, goal, 30.0, {"color": "black", "size": "small"})
    assert one_off.total == pytest.approx(0.8) and one_off.r_option == 0.5
    # over the price bound as well: 3 / 5
    too_dear = purchase_reward(product, goal, 45.0, {"color": "black", "size": "small"})
    assert too_dear.total == pytest.approx(0.6) and too_dear.r_price is False
    # no options chosen, other query and category, 1/3 title nouns: (2 + 0 + 1) / 5 * 1
    other = _product(query="speakers", product_category="x \u203a y", title="Vexa Wireless Box")
    result = purchase_reward(other, goal, 30.0, {})
    assert result.total == pytest.approx(0.6) and result.r_type == 1.0
    # one of five nouns and nothing else in common: r_type 0.5 halves the score
    goal5 = _goal(name="alpha bravo charlie delta echo", query="q", product_category="z")
    halved = purchase_reward(_product(title="alpha"), goal5, 30.0, {})
    assert halved.r_type == 0.5 and halved.total == pytest.approx(3 / 5 * 0.5)
    # a goal without options: (2 + 1) / 3
    no_options = purchase_reward(product, _goal(options=()), 30.0, {"color": "red"})
    assert no_options.total == 1.0 and no_options.r_option is None
    # a goal without a price bound counts the price term as 0
    unbounded = purchase_reward(product, _goal(price_upper=0.0), 30.0, {})
    assert unbounded.r_price is None and unbounded.total == pytest.approx(2 / 5)
    assert set(full.as_dict()) >= {"total", "r_type", "r_att", "r_option", "r_price"}


def test_no_price_bound_is_met_by_any_price():
    result = purchase_reward(_product(), _goal(price_upper=NO_PRICE_BOUND), 999.0, {})
    assert result.r_price is True


@pytest.mark.filterwarnings("ignore::UserWarning")  # thefuzz's "slow pure-python" notice
def test_token_set_ratio_equals_thefuzz_0_19_on_real_phrases():
    import difflib
    import json
    import random

    from thefuzz import fuzz

    # WebShop pins thefuzz 0.19 without python-Levenshtein: the difflib matcher
    fuzz.SequenceMatcher = difflib.SequenceMatcher
    root = sample_dir("webshop", "human_ins_sample.json")
    human = json.loads((root / "human_ins_sample.json").read_text())
    phrases = [
        text
        for entries in human.values()
        for entry in entries
        for key in ("attributes", "instruction_attributes", "instruction_options")
        for text in entry[key]
    ]
    words = "red blue dark navy x-large pack of 12 oz \u00e9 tea tree oil oils _x 3.5".split()
    rng = random.Random(0)
    for _ in range(3000):
        a, b = rng.choice(phrases), rng.choice(phrases)
        if rng.random() < 0.3:
            a = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        assert token_set_ratio(a, b) == fuzz.token_set_ratio(a, b), (a, b)
    for pair in [("color", "black"), ("size", "small"), ("color", "dark blue")]:
        for chosen in ("black", "small", "blue", "large"):
            assert token_set_ratio(chosen, pair) == fuzz.token_set_ratio(chosen, pair)

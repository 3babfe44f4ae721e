"""WebShop data: the loader on the real sample and on broken files, and the generated catalog."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import sample_data

from gigpo_envs.webshop.catalog import generate_catalog, generate_raw, write_catalog
from gigpo_envs.webshop.data import (
    DUMMY_ATTRIBUTES,
    NO_PRICE_BOUND,
    PRICE_RANGE,
    WebShopDataError,
    build_products,
    find_data_files,
    load_catalog,
    parse_pricing,
    synthetic_goals,
)


@pytest.fixture(scope="module")
def sample_dir() -> Path:
    return sample_data.sample_dir("webshop", "items_sample.json")


def test_real_sample_products_are_built_as_webshop_builds_them(sample_dir):
    raw = json.loads((sample_dir / "items_sample.json").read_text())
    catalog = load_catalog(sample_dir / "items_sample.json")
    assert len(catalog.products) == len(raw) == 43
    by_asin = catalog.by_asin
    for item in raw:
        product = by_asin[item["asin"]]
        assert product.title == item["name"]
        assert product.description == item["full_description"]
        assert product.query == item["query"].lower().strip()
        assert product.attributes == DUMMY_ATTRIBUTES  # no items_ins_v2 file here
        assert product.rating == "N.A."
        if not item["pricing"]:
            assert product.prices == (100.0,) and product.price_tag == "$100.0"
        low = product.prices[0]
        assert low <= product.price <= product.prices[-1]
    # a glued price range: two prices, shown "a to b", the paid price drawn inside it
    ranged = next(p for p in catalog.products if len(p.prices) == 2)
    assert ranged.price_tag == f"${ranged.prices[0]} to ${ranged.prices[1]}"
    assert parse_pricing("$19.99$27.99") == (19.99, 27.99)
    assert parse_pricing("$1,847.00") == (1847.0,)
    assert parse_pricing("") is None and parse_pricing("$abc") is None
    assert parse_pricing(12) == (12.0,) and parse_pricing(None) is None
    # options: lower case, "/" shown as " | ", a null option dropped
    with_null = next(i for i in raw if i["customization_options"] == {"Color": None})
    assert by_asin[with_null["asin"]].options == {}
    sized = next(
        i
        for i in raw
        if isinstance(i["customization_options"], dict) and "Size" in i["customization_options"]
    )
    options = by_asin[sized["asin"]].options
    assert options["size"][:2] == ("x-small", "small")
    assert "light blue" in options["color"]


def test_the_same_files_give_the_same_prices_everywhere(sample_dir):
    first = load_catalog(sample_dir / "items_sample.json").products
    second = load_catalog(sample_dir / "items_sample.json").products
    assert [p.price for p in first] == [p.price for p in second]


def test_real_human_instructions_become_goals(sample_dir, tmp_path):
    human = json.loads((sample_dir / "human_ins_sample.json").read_text())
    catalog = load_catalog(
        sample_dir / "items_sample.json", human_path=sample_dir / "human_ins_sample.json"
    )
    # the sample's instructions are for other products: none is usable, all are counted
    assert catalog.goals == []
    assert catalog.skipped["instructions for unknown products"] == 71
    # give the first 43 instruction lists to the 43 sample products (real text, real mess)
    raw = json.loads((sample_dir / "items_sample.json").read_text())
    lists = list(human.values())[: len(raw)]
    remapped = {item["asin"]: entries for item, entries in zip(raw, lists, strict=True)}
    (tmp_path / "human.json").write_text(json.dumps(remapped))
    catalog = load_catalog(sample_dir / "items_sample.json", human_path=tmp_path / "human.json")
    expected = [
        (item["asin"], entry)
        for item, entries in zip(raw, lists, strict=True)
        for entry in entries
        if entry["instruction_attributes"]
    ]
    assert len(catalog.goals) == len(expected) > 40
    for goal, (asin, entry) in zip(catalog.goals, expected, strict=True):
        product = catalog.by_asin[asin]
        assert goal.asin == asin and goal.name == product.title
        assert goal.attributes == tuple(entry["instruction_attributes"])
        assert goal.options == tuple(entry["instruction_options"])
        assert goal.instruction_text.startswith(entry["instruction"].strip("."))
        if goal.price_upper == NO_PRICE_BOUND:
            assert goal.instruction_text == entry["instruction"].strip(".")
        else:
            assert goal.price_upper in PRICE_RANGE and goal.price_upper > product.price
            assert goal.instruction_text.endswith(
                f", and price lower than {goal.price_upper:.2f} dollars"
            )


def test_messy_records_are_skipped_and_counted():
    skipped: Counter = Counter()
    items = [
        "not a dict",
        {"asin": "nan"},
        {"asin": "B0123456789X"},  # longer than 10
        {"asin": 12345, "name": 3.5, "pricing": "$x$4.00", "small_description": None},
        {"asin": "12345", "name": "again"},  # repeated asin
        {"asin": "B01", "customization_options": {"Size": [{"value": 9}, "junk", {}]}},
    ]
    products = build_products(items, {"B01": {"attributes": "not a list"}}, skipped=skipped)
    assert [p.asin for p in products] == ["12345", "B01"]
    assert products[0].title == "3.5" and products[0].prices == (4.0,)
    assert products[0].bullet_points == ("",)
    assert products[1].options == {"size": ("9",)}
    assert products[1].attributes == DUMMY_ATTRIBUTES
    assert skipped == Counter({"bad asin": 2, "item is not a dict": 1, "repeated asin": 1})


def test_broken_files_give_clear_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "dict.json").write_text("{}")
    with pytest.raises(WebShopDataError, match="not valid JSON"):
        load_catalog(tmp_path / "bad.json")
    with pytest.raises(WebShopDataError, match="JSON list"):
        load_catalog(tmp_path / "dict.json")
    with pytest.raises(WebShopDataError, match="not found"):
        load_catalog(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="goals must be"):
        load_catalog(tmp_path / "dict.json", goals="robot")
    with pytest.raises(WebShopDataError, match="items_shuffle"):
        find_data_files(tmp_path)
    with pytest.raises(WebShopDataError, match="not found"):
        find_data_files(tmp_path / "nowhere")


def test_data_directory_from_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    with pytest.raises(WebShopDataError, match="WEBSHOP_DATA"):
        find_data_files()
    paths = write_catalog(tmp_path, num_products=20, seed=1)
    (tmp_path / "items_shuffle.json").rename(tmp_path / "items_shuffle_1000.json")
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    found = find_data_files()
    assert found["items"] == tmp_path / "items_shuffle_1000.json"
    assert found["attributes"] is None  # items_ins_v2_1000.json does not exist
    assert found["human"] == paths["human"]


def test_generated_catalog_is_deterministic_and_nested():
    small, again = generate_catalog(200, seed=3), generate_catalog(200, seed=3)
    assert small.products == again.products and small.goals == again.goals
    larger = generate_catalog(300, seed=3)
    assert larger.products[:200] == small.products
    other = generate_catalog(200, seed=4)
    assert other.products != small.products
    assert len({p.asin for p in larger.products}) == 300
    with pytest.raises(ValueError):
        generate_raw(0)


def test_generated_files_load_back_into_the_same_catalog(tmp_path):
    paths = write_catalog(tmp_path, num_products=150, seed=2)
    loaded = load_catalog(paths["items"], paths["attributes"], paths["human"])
    generated = generate_catalog(150, seed=2)
    assert loaded.products == generated.products
    assert loaded.goals == generated.goals
    # the schema is WebShop's: items_ins_v2 also gives synthetic goals
    attributes = json.loads(paths["attributes"].read_text())
    synthetic = synthetic_goals(loaded.products, attributes, Counter())
    product = loaded.products[0]
    combinations = 1
    for values in product.options.values():
        combinations *= len(values)
    assert sum(goal.asin == product.asin for goal in synthetic) == combinations
    assert all(isinstance(option, tuple) for option in synthetic[0].options)


def test_generated_goals_are_satisfied_by_their_own_product():
    catalog = generate_catalog(300, seed=0)
    for goal in catalog.goals:
        product = catalog.by_asin[goal.asin]
        assert set(goal.attributes) <= set(product.attributes)
        values = {value for values in product.options.values() for value in values}
        assert set(goal.options) <= values
        assert product.price <= goal.price_upper

"""gigpo/WebShop-v0: page flow, bad actions, anchors, splits, search and the expert."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from doc_blocks import code_blocks
from sample_data import sample_dir

import gigpo_envs
from gigpo_envs import HistoryPrompt, make_group_vec
from gigpo_envs.webshop import (
    Catalog,
    WebShopEnv,
    build_shop,
    expert_action,
    get_shop,
    load_catalog,
)
from gigpo_envs.webshop.catalog import write_catalog
from gigpo_envs.webshop.pages import PRODUCTS_PER_PAGE, PageState, clickable_key, render
from gigpo_envs.webshop.shop import GOAL_SHUFFLE_SEED, goal_order, split_ranges

PACKAGE_ROOT = str(Path(gigpo_envs.__file__).resolve().parent.parent)
SEP = " [SEP] "


def act(env, text: str):
    return env.step(f"<think>ok</think><action>{text}</action>")


def play_expert(env, goal: int):
    observation, info = env.reset(options={"goal": goal})
    core = env.unwrapped
    total, steps = 0.0, 0
    while True:
        observation, reward, terminated, truncated, info = act(env, expert_action(core))
        assert info["is_action_valid"], (goal, info["action"], observation[:300])
        total += reward
        steps += 1
        if terminated or truncated:
            return total, steps, terminated, info


@pytest.fixture(scope="module")
def env():
    return gym.make("gigpo/WebShop-v0", split="all")


def _goal_with_a_later_page(env):
    """A goal index whose expert query puts the target on results page 2 or later."""
    core = env.unwrapped
    for index in range(len(core.shop.goals)):
        env.reset(options={"goal": index})
        act(env, expert_action(core))
        hits = core.shop.search.search(core.page.query)
        if core.goal.asin in hits and hits.index(core.goal.asin) >= PRODUCTS_PER_PAGE:
            return index
    raise AssertionError("no goal with its product past the first results page")


def test_search_page_then_results(env):
    observation, info = env.reset(seed=0)
    core = env.unwrapped
    instruction = core.goal.instruction_text
    assert observation == SEP.join(["WebShop", "Instruction:", instruction, "Search"])
    assert info["admissible_actions"] == ["search[<your query>]"] and info["has_search_bar"]
    observation, reward, terminated, truncated, info = act(env, "search[ Wireless  Speaker ]")
    assert info["is_action_valid"] and info["action"] == "search[wireless speaker]"
    assert (reward, terminated, truncated) == (0.0, False, False)
    parts = observation.split(SEP)
    assert parts[:4] == [
        "Instruction:",
        instruction,
        "Back to Search",
        "Page 1 (Total results: 50)",
    ]
    assert parts[4] == "Next >"  # no "< Prev" on page 1
    shown = parts[5:]
    assert len(shown) == 3 * PRODUCTS_PER_PAGE
    hits = core.shop.search.search("wireless speaker")
    for row, asin in enumerate(hits[:PRODUCTS_PER_PAGE]):
        product = core.shop.catalog.by_asin[asin]
        assert shown[3 * row : 3 * row + 3] == [asin, product.title, product.price_tag]
    assert not info["has_search_bar"]
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    assert f"click[{hits[0].lower()}]" in info["admissible_actions"]


def test_next_prev_item_options_subpages_and_back(env):
    core = env.unwrapped
    env.reset(seed=1)
    act(env, "search[headphones noise cancelling]")
    hits = core.shop.search.search("headphones noise cancelling")
    observation, *_, info = act(env, "click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in observation
    assert observation.split(SEP)[6] == hits[PRODUCTS_PER_PAGE]
    observation, *_ = act(env, "click[< prev]")
    assert "Page 1 (Total results: 50) [SEP] Next >" in observation
    asin = hits[3]
    product = core.shop.catalog.by_asin[asin]
    observation, *_, info = act(env, f"click[{asin}]")  # upper case works too
    assert info["is_action_valid"] and core.page.kind == "item" and core.page.asin == asin
    parts = observation.split(SEP)
    assert parts[2:4] == ["Back to Search", "< Prev"]
    assert parts[-7:] == [
        product.title,
        f"Price: {product.price_tag}",
        "Rating: N.A.",
        "Description",
        "Features",
        "Reviews",
        "Buy Now",
    ]
    for name, values in product.options.items():
        assert SEP.join([name, *values]) in observation
    name, values = next(iter(product.options.items()))
    anchor_before = info["anchor"]
    _, _, _, _, info = act(env, f"click[{values[-1]}]")
    assert core.page.options == {name: values[-1]}
    assert info["anchor"] != anchor_before  # chosen options are part of the state
    observation, *_ = act(env, "click[features]")
    assert observation.split(SEP)[4:] == list(product.bullet_points)
    observation, *_ = act(env, "click[< prev]")  # back to the item, options kept
    assert core.page.kind == "item" and core.page.options == {name: values[-1]}
    observation, *_ = act(env, "click[description]")
    assert observation.split(SEP)[4:] == [product.description]
    act(env, "click[< prev]")
    act(env, "click[< prev]")  # item -> its results page, options cleared
    assert core.page.kind == "results" and core.page.page == 1 and core.page.options == {}
    observation, *_, info = act(env, "click[back to search]")
    assert observation.startswith("WebShop [SEP] Instruction:") and info["has_search_bar"]


def test_buy_now_scores_and_ends_the_episode(env):
    core = env.unwrapped
    total, steps, terminated, info = play_expert(env, 0)
    assert terminated and info["won"] and total == 1.0
    breakdown = info["reward_breakdown"]
    assert breakdown["total"] == 1.0 and breakdown["r_type"] == 1.0
    assert core.state_text() == SEP.join(
        ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", "1.0"]
    )
    assert info["admissible_actions"] == []
    with pytest.raises(RuntimeError):
        act(env, "click[buy now]")
    # the wrong product: a score below 1, not won
    env.reset(options={"goal": 0})
    goal = core.goal
    act(env, f"search[{goal.instruction_text}]")
    hits = core.shop.search.search(goal.instruction_text)
    other = next(asin for asin in hits if asin != goal.asin)
    act(env, f"click[{other}]")
    _, reward, terminated, _, info = act(env, "click[buy now]")
    assert terminated and reward == info["reward_breakdown"]["total"] < 1.0
    assert not info["won"]


@pytest.mark.parametrize(
    "response",
    [
        "<action>search[]</action>",  # empty query
        "<action>search red shoes</action>",  # no brackets
        "<action>click[search]</action>",  # the search button is not clickable
        "<action>click[buy now]</action>",  # not on this page
        "<action>jump[up]</action>",
        "search[red shoes]",  # no action tags
        "<action>search[red shoes]",  # unclosed tag
        "<action>" + "x" * 5000 + "</action>",
        "",
    ],
)
def test_bad_actions_on_the_search_page_are_no_ops(env, response):
    env.reset(seed=2)
    before = env.unwrapped.state_dict()
    observation, reward, terminated, truncated, info = env.step(response)
    assert info["is_action_valid"] is False and info["action"] is None
    assert (reward, terminated) == (0.0, False)
    assert env.unwrapped.state_dict()["game"] == before["game"]
    assert observation.startswith("WebShop [SEP]")


def test_bad_actions_on_other_pages(env):
    core = env.unwrapped
    env.reset(seed=2)
    act(env, "search[tea]")
    results = core.state_dict()["game"]
    for text in ("search[coffee]", "click[b999999999]", "click[buy now]", "click[< prev]"):
        *_, info = act(env, text)
        assert not info["is_action_valid"], text
        assert core.state_dict()["game"] == results
    # an asin that is in the catalog but not on this page
    hits = core.shop.search.search("tea")
    *_, info = act(env, f"click[{hits[-1]}]")
    assert not info["is_action_valid"]
    *_, info = act(env, f"click[{hits[0]}]")
    *_, info = act(env, "click[next >]")  # no next on an item page
    assert not info["is_action_valid"] and core.page.kind == "item"
    assert env.step(None)[4]["is_action_valid"] is False  # not even a string


def test_pages_past_the_results_are_empty_but_reachable(env):
    core = env.unwrapped
    env.reset(seed=4)
    act(env, "search[granola]")
    for _ in range(5):
        observation, *_ = act(env, "click[next >]")
    total = len(core.shop.search.search("granola"))
    assert core.page.page == 6 and 0 < total <= 50  # only products that share a term
    assert observation.endswith(f"Page 6 (Total results: {total}) [SEP] < Prev [SEP] Next >")


def test_anchor_is_the_page_state_not_the_path(env):
    core = env.unwrapped
    env.reset(options={"goal": 3})
    goal = core.goal
    _, _, _, _, info = act(env, f"search[{goal.instruction_text}]")
    results_key = info["anchor"]
    hits = core.shop.search.search(goal.instruction_text)
    _, _, _, _, info = act(env, f"click[{hits[0]}]")
    item_key = info["anchor"]
    act(env, "click[reviews]")
    _, _, _, _, info = act(env, "click[< prev]")
    assert info["anchor"] == item_key  # same page state, later step: same anchor
    _, _, _, _, info = act(env, "click[< prev]")
    assert info["anchor"] == results_key
    env.reset(options={"goal": 4})  # another goal: the same page is another state
    _, _, _, _, info = act(env, f"search[{goal.instruction_text}]")
    assert info["anchor"] != results_key
    state = core._game_state()
    assert set(state) == {"shop", "goal", "kind", "query", "page", "asin", "options", "score"}


def test_load_state_dict_restores_and_rejects_bad_states(env):
    core = env.unwrapped
    env.reset(options={"goal": 5})
    act(env, f"search[{core.goal.instruction_text}]")
    hits = core.shop.search.search(core.goal.instruction_text)
    act(env, f"click[{hits[0]}]")
    saved = json.loads(json.dumps(core.state_dict()))
    other = gym.make("gigpo/WebShop-v0", split="all").unwrapped
    other.load_state_dict(saved)
    assert other.state_text() == core.state_text() and other.state_key() == core.state_key()
    bad_states = []
    for key, value in [
        ("shop", "generated:5:0"),
        ("kind", "checkout"),
        ("asin", "B999999999"),
        ("goal", 10**9),
        ("options", {"color": "no such colour"}),
        ("page", 0),
    ]:
        broken = json.loads(json.dumps(saved))
        broken["game"][key] = value
        bad_states.append(broken)
    missing = json.loads(json.dumps(saved))
    del missing["game"]["query"]
    bad_states.append(missing)
    for broken in bad_states:
        with pytest.raises(ValueError):
            other.load_state_dict(broken)


def test_splits_are_fixed_disjoint_ranges():
    ranges = split_ranges(12087)  # WebShop's human goals: its own 500 / 1000 split
    assert ranges["test"] == range(0, 500) and ranges["validation"] == range(500, 1500)
    assert ranges["train"] == range(1500, 12087)
    for n in (10, 999, 1000, 20000):
        parts = [set(split_ranges(n)[name]) for name in ("train", "validation", "test")]
        assert sum(map(len, parts)) == n and set().union(*parts) == set(range(n))
    shop = get_shop()
    assert shop.splits == split_ranges(len(shop.goals))
    # the order is WebShop's: the loader's goals shuffled by random.Random(233)
    assert GOAL_SHUFFLE_SEED == 233
    assert goal_order(shop.catalog.goals) == shop.goals
    for split in ("train", "validation", "test"):
        env = WebShopEnv(split=split)
        drawn = {env.reset(seed=seed)[1]["goal_index"] for seed in range(40)}
        assert drawn <= set(shop.splits[split])
    with pytest.raises(ValueError, match="split"):
        WebShopEnv(split="dev")
    with pytest.raises(ValueError, match="not in split"):
        WebShopEnv(split="train").reset(options={"goal": 0})


def test_goal_by_seed_walks_the_split_in_order():
    env = WebShopEnv(split="test", goal_by_seed=True)
    goals = env.goal_range
    played = []
    for seed in [*range(len(goals)), len(goals), 2 * len(goals) + 3]:
        env.reset(seed=seed)
        played.append(env.goal_index)
    assert played == [*goals, goals[0], goals[3]]
    env.reset(seed=5, options={"goal": goals[1]})  # an explicit goal still wins
    assert env.goal_index == goals[1]
    drawn = WebShopEnv(split="test")  # the default draws: not the split in order
    assert [drawn.reset(seed=s)[1] and drawn.goal_index for s in range(30)] != list(goals[:30])
    with pytest.raises(TypeError, match="goal_by_seed"):
        WebShopEnv(goal_by_seed="yes")


def test_splits_and_goals_are_the_same_in_another_process():
    code = (
        "import json; from gigpo_envs.webshop import get_shop; s = get_shop();"
        "print(json.dumps([[g.asin, g.instruction_text] for g in s.goals[:100]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE_ROOT,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout
    here = [[g.asin, g.instruction_text] for g in get_shop().goals[:100]]
    assert json.loads(out) == here


def test_expert_reaches_full_reward_on_generated_goals(env):
    core = env.unwrapped
    step_counts = []
    for goal in range(0, len(core.shop.goals), 5):  # 200 goals of every split
        total, steps, terminated, info = play_expert(env, goal)
        assert terminated and info["won"] and total == 1.0, goal
        step_counts.append(steps)
    assert max(step_counts) <= core.max_steps
    later = _goal_with_a_later_page(env)  # the expert pages through results when it must
    total, steps, _, _ = play_expert(env, later)
    assert total == 1.0 and steps >= 4


def test_reward_scale_and_success_only():
    scaled = WebShopEnv(split="all", reward_scale=10.0)
    total, *_ = play_expert(scaled, 0)
    assert total == 10.0
    strict = WebShopEnv(split="all", reward_scale=10.0, success_reward_only=True)
    strict.reset(options={"goal": 0})
    goal = strict.goal
    act(strict, f"search[{goal.instruction_text}]")
    act(strict, f"click[{goal.asin}]")
    _, reward, terminated, _, info = act(strict, "click[buy now]")  # no options chosen
    assert terminated and 0 < info["reward_breakdown"]["total"] < 1 and reward == 0.0


def test_search_finds_products_by_their_titles_with_bm25s():
    shop = get_shop()
    for product in shop.catalog.products[:60]:
        assert product.asin in shop.search.search(product.title.lower())
    with pytest.raises(ValueError, match="unknown backend"):
        WebShopEnv(search_backend="elastic", num_products=30)


def test_index_directory_is_saved_and_reused(tmp_path):
    catalog = get_shop().catalog
    first = build_shop(catalog, "saved", index_dir=tmp_path / "index")
    assert (tmp_path / "index" / "meta.json").is_file()
    second = build_shop(catalog, "saved", index_dir=tmp_path / "index")
    for query in ("red dress", "gluten free granola pack of 6", "usb c charger"):
        assert first.search.search(query) == second.search.search(query)


def test_env_on_original_files_and_on_the_real_sample(tmp_path):
    write_catalog(tmp_path / "files", num_products=80, seed=9)
    env = WebShopEnv(data_path=tmp_path / "files", num_products=None, split="all")
    assert env.shop.shop_id.startswith("files:")
    assert play_expert(env, 0)[0] == 1.0
    # the real sample, with the sample's human instructions given to its products
    sample = sample_dir("webshop", "items_sample.json")
    raw = json.loads((sample / "items_sample.json").read_text())
    human = list(json.loads((sample / "human_ins_sample.json").read_text()).values())
    remapped = {item["asin"]: entries for item, entries in zip(raw, human, strict=False)}
    (tmp_path / "human.json").write_text(json.dumps(remapped))
    catalog = load_catalog(sample / "items_sample.json", human_path=tmp_path / "human.json")
    real = WebShopEnv(shop=build_shop(catalog, "real-sample"), split="all")
    for goal in range(len(real.shop.goals)):
        total, steps, terminated, info = play_expert(real, goal)
        assert 0.0 <= total <= 1.0 and steps <= real.max_steps
        for action in info["admissible_actions"]:
            assert action.isascii()
    # every page of every real product fits the observation space (ASCII, <= 4096 chars)
    instruction = real.shop.goals[0].instruction_text
    for product in real.shop.catalog.products:
        for kind in ("item", "description", "features", "reviews"):
            page = PageState(kind, "query", 1, product.asin)
            assert real.observation_space.contains(render(real.shop, page, instruction))
        for name, values in product.options.items():
            for value in values:
                real.load_state_dict(
                    {**real.state_dict(), "game": {**real._game_state(), "kind": "item",
                     "query": "q", "asin": product.asin, "options": {name: value}}}
                )  # fmt: skip
                assert f"click[{clickable_key(value)}]" in real.admissible_actions()


def test_history_prompt_and_group_vector_env():
    env = HistoryPrompt(gym.make("gigpo/WebShop-v0"), history_length=2)
    prompt, info = env.reset(seed=0)
    assert "WebShop" in prompt and "search[<your query>]" in prompt
    assert info["messages"][0]["role"] == "system"
    envs = make_group_vec("gigpo/WebShop-v0", num_groups=2, group_size=3, seed=0)
    observations, infos = envs.reset()
    assert observations[0] == observations[2] and observations[3] == observations[5]
    envs.step(["<action>search[dress]</action>"] * 6)
    assert len(set(envs.anchors[:3])) == 1
    envs.close()


def test_docs_webshop_examples_run(tmp_path, monkeypatch, capsys):
    blocks = code_blocks("docs/webshop.md")
    assert len(blocks) == 2
    namespace: dict = {}
    exec(compile(blocks[0], "docs/webshop.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("WebShop [SEP] Instruction: [SEP] i am looking for")
    assert printed[-1] == "click[buy now] 1.0 True 1.0"
    write_catalog(tmp_path / "data", num_products=50, seed=5)
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    code = blocks[1].replace("/tmp/webshop-index", "index")
    exec(compile(code, "docs/webshop.md", "exec"), namespace)
    assert namespace["env"].unwrapped.shop.shop_id.startswith("files:items_shuffle.json")
    assert (tmp_path / "index" / "meta.json").is_file()


@pytest.mark.slow
def test_lucene_search_through_pyserini_as_the_original():
    env = WebShopEnv(num_products=200, catalog_seed=1, search_backend="pyserini", split="all")
    bm25s = get_shop(num_products=200, catalog_seed=1)
    assert env.shop.search.backend == "pyserini" and len(env.shop.search) == 200
    overlaps = []
    for goal in range(0, len(env.shop.goals), 20):
        total, *_ = play_expert(env, goal)
        assert total == 1.0
        query = env.goal.instruction_text
        lucene, ours = env.shop.search.search(query), bm25s.search.search(query)
        assert env.goal.asin in lucene
        overlaps.append(len(set(lucene[:10]) & set(ours[:10])) / 10)
    assert sum(overlaps) / len(overlaps) >= 0.5  # the two BM25s rank alike


def test_long_and_non_ascii_texts_are_folded_and_shortened():
    catalog = get_shop(num_products=30, catalog_seed=2).catalog
    product = dataclasses.replace(
        catalog.products[0],
        title="Caf\u00e9 cr\u00e8me \u2122 " * 60,
        description="word " * 3000,
        bullet_points=tuple(f"bullet {i} " + "x" * 400 for i in range(30)),
        options={"color": ("ros\u00e9 gold", "black")},
    )
    goal = dataclasses.replace(catalog.goals[0], asin=product.asin, instruction_text="i want")
    small = Catalog([product, *catalog.products[1:]], [goal])
    env = WebShopEnv(shop=build_shop(small, "long-texts"), split="all")
    env.reset(options={"goal": 0})
    for kind in ("item", "description", "features"):
        text = render(env.shop, PageState(kind, "q", 1, product.asin), "i want")
        assert env.observation_space.contains(text) and len(text) <= 4096, kind
        assert text.startswith("Instruction: [SEP] i want [SEP] Back to Search [SEP] < Prev")
    item = render(env.shop, PageState("item", "q", 1, product.asin), "i want")
    assert "Cafe creme" in item and item.endswith("Buy Now")
    assert "rose gold" in item
    act(env, "search[word word]")  # its description; accents are not folded in search
    _, _, _, _, info = act(env, f"click[{product.asin}]")
    _, _, _, _, info = act(env, "click[rose gold]")  # the folded name clicks the real value
    assert info["is_action_valid"] and env.page.options == {"color": "ros\u00e9 gold"}

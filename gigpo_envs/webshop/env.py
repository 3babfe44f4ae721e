"""``gigpo/WebShop-v0``: find and buy the product an instruction asks for (Yao et al. 2022)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gigpo_envs.arguments import (
    SEED_MAX,
    ArgumentTypeError,
    check_bool,
    check_float,
    check_int,
    check_path,
    check_str,
    check_type,
    describe,
)
from gigpo_envs.base import TextEnv
from gigpo_envs.parsing import ActionParser
from gigpo_envs.webshop.catalog import MAX_PRODUCTS
from gigpo_envs.webshop.data import Goal
from gigpo_envs.webshop.nouns import noun_tagger as make_noun_tagger
from gigpo_envs.webshop.pages import (
    PAGE_KINDS,
    SEARCH_ACTION,
    PageState,
    clickable_key,
    clickables,
    option_value,
    render,
)
from gigpo_envs.webshop.reward import RewardBreakdown, purchase_reward
from gigpo_envs.webshop.shop import SPLITS, Shop, get_shop
from gigpo_envs.webshop.templates import WEBSHOP_TEMPLATE

_ACTION = re.compile(r"^(search|click)\s*\[(.*)\]$", re.DOTALL)
_FULL_MATCH = 1.0 - 1e-9


class WebShopEnv(TextEnv):
    """WebShop in-process: search a catalog, open products, choose options, buy.

    Observation: the current page in WebShop's simple text mode (see
    :mod:`gigpo_envs.webshop.pages`), at most 4,096 characters.

    Actions: ``search[query]`` on the search page, ``click[name]`` of anything clickable on
    the current page (``info["admissible_actions"]`` lists them; ``info["has_search_bar"]``
    says whether search is allowed). Anything else is an invalid action (a no-op).

    Reward: 0 until ``click[buy now]``, which ends the episode with the purchase score of
    :func:`~gigpo_envs.webshop.reward.purchase_reward` (in ``[0, 1]``, its parts in
    ``info["reward_breakdown"]``) times ``reward_scale``; with ``success_reward_only`` the
    reward is ``reward_scale`` for a full match (score 1) and 0 otherwise, as verl-agent pays
    10 for a success. ``info["won"]`` is True for a full match.

    Args:
      num_products: products of the generated catalog, or the first this many of the
        original product file (None: all); at most :data:`MAX_PRODUCTS`.
      catalog_seed: seed of the generated catalog, an int in ``0 .. 2**63 - 1``.
      data_path: None for the generated catalog (no download); a directory holding WebShop's
        original files; or ``"env"`` for ``$WEBSHOP_DATA``.
      goals: ``"human"`` or ``"synthetic"`` goals (original files only).
      split: ``"train"``, ``"validation"``, ``"test"`` or ``"all"`` (fixed goal ranges; see
        :mod:`gigpo_envs.webshop.shop`).
      search_backend: a ``retrieval_server`` backend (``"bm25s"``; ``"pyserini"``).
      backend_options: build options of that backend.
      index_dir: where to save (or load) the search index.
      shop: a prebuilt :class:`~gigpo_envs.webshop.shop.Shop`; overrides the catalog
        arguments.
      reward_scale: multiplies the purchase score.
      success_reward_only: pay only for a full match.
      noun_tagger: which tagger finds the title nouns of the type reward (see
        :func:`~gigpo_envs.webshop.nouns.noun_tagger`): ``"auto"`` (spaCy's
        ``en_core_web_sm`` as WebShop runs it when installed, so the reward is the
        original's; else the heuristic, with a warning), ``"spacy"``, ``"heuristic"``, or
        a spaCy model name or directory. ``info["noun_tagger"]`` (at reset, and in
        ``info["reward_breakdown"]``) names the one in use.
      noun_extractor: a callable title -> nouns instead (overrides ``noun_tagger``).
      max_steps: steps before truncation (15, as verl-agent).
      goal_by_seed: ``reset(seed=s)`` plays goal ``s % len(split)`` of the split, in order
        (seeds ``0..n-1`` walk the split, as ALFWorld's games and SearchQA's questions do;
        the pinned evaluation suites use it); False (default) draws the goal with the seed.
      **kwargs: ``invalid_action_penalty``, ``action_parser``, ``render_mode``.

    ``reset(options={"goal": i})`` plays goal ``i`` (an index of the shop's goal order, inside
    the split); otherwise the goal is the seed's (``goal_by_seed``) or drawn from the split
    with the episode's seed.
    """

    env_name = "WebShop"
    cpu_heavy = True
    prompt_template = WEBSHOP_TEMPLATE

    def __init__(
        self,
        num_products: int | None = 1000,
        catalog_seed: int = 0,
        data_path: str | os.PathLike[str] | None = None,
        goals: str = "human",
        split: str = "train",
        search_backend: str = "bm25s",
        backend_options: dict[str, Any] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        shop: Shop | None = None,
        reward_scale: float = 1.0,
        success_reward_only: bool = False,
        noun_extractor: Callable[[str], Sequence[str]] | None = None,
        max_steps: int = 15,
        noun_tagger: str = "auto",
        goal_by_seed: bool = False,
        *,
        invalid_action_penalty: float = 0.0,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_steps=max_steps,
            invalid_action_penalty=invalid_action_penalty,
            action_parser=action_parser,
            render_mode=render_mode,
        )
        if num_products is not None:
            check_int("num_products", num_products, 1, MAX_PRODUCTS)
        check_int("catalog_seed", catalog_seed, 0, SEED_MAX)
        for name, path in (("data_path", data_path), ("index_dir", index_dir)):
            if path is not None:
                check_path(name, path)
        check_str("goals", goals, ("human", "synthetic"))
        check_str("split", split, SPLITS)
        check_str("search_backend", search_backend)
        if backend_options is not None:
            check_type("backend_options", backend_options, Mapping, "a dict or None")
        if shop is not None:
            check_type("shop", shop, Shop, "a Shop or None")
        if noun_extractor is not None and not callable(noun_extractor):
            raise ArgumentTypeError(
                f"noun_extractor must be callable or None, got {describe(noun_extractor)}"
            )
        # noun_tagger is checked by nouns.noun_tagger, whose message lists the taggers.
        self.shop = shop or get_shop(
            data_path, num_products, catalog_seed, goals, search_backend, backend_options,
            index_dir,
        )  # fmt: skip
        self.split = split
        self.goal_range = self.shop.splits[split]
        if len(self.goal_range) == 0:
            raise ValueError(f"split {split!r} of {self.shop.shop_id} has no goals")
        self.reward_scale = check_float("reward_scale", reward_scale)
        self.success_reward_only = check_bool("success_reward_only", success_reward_only)
        self.goal_by_seed = check_bool("goal_by_seed", goal_by_seed)
        if noun_extractor is not None:
            self.noun_extractor = noun_extractor
            self.noun_tagger = str(
                getattr(noun_extractor, "name", getattr(noun_extractor, "__name__", "custom"))
            )
        else:
            tagger = make_noun_tagger(noun_tagger)
            self.noun_extractor, self.noun_tagger = tagger, tagger.name
        self.goal_index = self.goal_range[0]
        self.page = PageState()
        self.last_breakdown: RewardBreakdown | None = None
        self._requested_goal: int | None = None
        self._clickables: dict[str, tuple[str, str | None]] | None = None
        self._observation: str | None = None

    @property
    def goal(self) -> Goal:
        """The goal of the current episode."""
        return self.shop.goals[self.goal_index]

    # ----------------------------------------------------------------- episodes
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Starts an episode; ``options={"goal": i}`` picks goal ``i`` of the split."""
        requested = (options or {}).get("goal")
        if requested is not None:
            if isinstance(requested, bool) or not isinstance(requested, int | np.integer):
                raise ValueError(f"options['goal'] must be an int, got {requested!r}")
            if int(requested) not in self.goal_range:
                raise ValueError(
                    f"goal {requested} is not in split {self.split!r} "
                    f"(goals {self.goal_range.start}..{self.goal_range.stop - 1})"
                )
        self._requested_goal = None if requested is None else int(requested)
        return super().reset(seed=seed, options=options)

    def _game_reset(self, rng: np.random.Generator) -> None:
        if self._requested_goal is not None:
            self.goal_index = self._requested_goal
        elif self.goal_by_seed:
            self.goal_index = self.goal_range[int(self._episode_seed or 0) % len(self.goal_range)]
        else:
            self.goal_index = self.goal_range[int(rng.integers(len(self.goal_range)))]
        self._set_page(PageState())
        self.last_breakdown = None

    def _set_page(self, page: PageState) -> None:
        self.page = page
        self._clickables = None
        self._observation = None

    # ----------------------------------------------------------------- actions
    def _page_clickables(self) -> dict[str, tuple[str, str | None]]:
        if self._clickables is None:
            self._clickables = clickables(self.shop, self.page)
        return self._clickables

    def parse_game_action(self, action_text: str) -> str | None:
        match = _ACTION.match(action_text)
        if match is None:
            return None
        verb, argument = match.group(1), match.group(2).strip()
        if verb == "search":
            if self.page.kind != "search" or not argument:
                return None
            return f"search[{argument}]"
        key = clickable_key(argument)
        return f"click[{key}]" if key in self._page_clickables() else None

    def admissible_actions(self) -> list[str]:
        if self.page.kind == "search":
            return [SEARCH_ACTION]
        return [f"click[{name}]" for name in self._page_clickables()]

    def _game_step(self, action: str) -> tuple[float, bool]:
        verb, argument = action[:-1].split("[", 1)
        page = self.page
        if verb == "search":
            self._set_page(PageState("results", query=argument))
            return 0.0, False
        what, target = self._page_clickables()[argument]
        if what == "back":
            self._set_page(PageState())
        elif what == "next":
            self._set_page(PageState("results", query=page.query, page=page.page + 1))
        elif what == "prev" and page.kind == "results":
            self._set_page(PageState("results", query=page.query, page=page.page - 1))
        elif what == "prev" and page.kind == "item":
            self._set_page(PageState("results", query=page.query, page=page.page))
        elif what == "prev":
            self._set_page(PageState("item", page.query, page.page, page.asin, page.options))
        elif what == "product":
            self._set_page(PageState("item", page.query, page.page, target))
        elif what == "option":
            product = self.shop.catalog.by_asin[page.asin or ""]
            options = dict(page.options)
            options[target or ""] = option_value(product, target or "", argument)
            self._set_page(PageState("item", page.query, page.page, page.asin, options))
        elif what == "sub":
            self._set_page(PageState(target or "", page.query, page.page, page.asin, page.options))
        else:  # buy
            return self._buy(), True
        return 0.0, False

    def _buy(self) -> float:
        page = self.page
        product = self.shop.catalog.by_asin[page.asin or ""]
        breakdown = purchase_reward(
            product, self.goal, product.price, page.options, self.noun_extractor
        )
        self.last_breakdown = breakdown
        self._won = breakdown.total >= _FULL_MATCH
        self._set_page(
            PageState("done", page.query, page.page, page.asin, page.options, breakdown.total)
        )
        if self.success_reward_only:
            return self.reward_scale * float(self._won)
        return self.reward_scale * breakdown.total

    # ----------------------------------------------------------------- text and state
    def _game_observation(self) -> str:
        if self._observation is None:
            self._observation = render(self.shop, self.page, self.goal.instruction_text)
        return self._observation

    def render_legend(self) -> str:
        return (
            "Actions: search[your query] on the search page; click[name] of a product id, "
            "an option value, or a button (back to search, next >, < prev, description, "
            "features, reviews, buy now)."
        )

    def _info(self, is_action_valid: bool, action: str | None) -> dict[str, Any]:
        info = super()._info(is_action_valid, action)
        info["has_search_bar"] = self.page.kind == "search"
        info["instruction"] = self.goal.instruction_text
        info["goal_index"] = self.goal_index
        if action is None:
            info["noun_tagger"] = self.noun_tagger
        if self.page.kind == "done" and action is not None and action.startswith("click["):
            info["reward_breakdown"] = (
                {**self.last_breakdown.as_dict(), "noun_tagger": self.noun_tagger}
                if self.last_breakdown is not None
                else None
            )
        return info

    def __str__(self) -> str:
        return (
            f"<WebShopEnv shop={self.shop.shop_id!r} split={self.split!r} "
            f"noun_tagger={self.noun_tagger!r}>"
        )

    def _game_state(self) -> dict[str, Any]:
        return {"shop": self.shop.shop_id, "goal": self.goal_index, **self.page.as_dict()}

    def _game_load(self, game_state: dict[str, Any]) -> None:
        if game_state["shop"] != self.shop.shop_id:
            raise ValueError(
                f"state is of shop {game_state['shop']!r}, this env has {self.shop.shop_id!r}"
            )
        goal = int(game_state["goal"])
        if not 0 <= goal < len(self.shop.goals):
            raise ValueError(f"goal {goal} out of range")
        kind = str(game_state["kind"])
        if kind not in PAGE_KINDS:
            raise ValueError(f"unknown page kind {kind!r}")
        query = game_state["query"]
        asin = game_state["asin"]
        page = int(game_state["page"])
        options = {str(k): str(v) for k, v in dict(game_state["options"]).items()}
        score = game_state["score"]
        if kind != "search" and not isinstance(query, str) or page < 1:
            raise ValueError(f"a {kind} page needs a query string and a page >= 1")
        if kind not in ("search", "results"):
            product = self.shop.catalog.by_asin.get(str(asin))
            if product is None:
                raise ValueError(f"unknown product {asin!r}")
            for name, value in options.items():
                if value not in product.options.get(name, ()):
                    raise ValueError(f"{asin} has no option {name!r} = {value!r}")
        self.goal_index = goal
        self._set_page(
            PageState(kind, query, page, asin, options, None if score is None else float(score))
        )
        self.last_breakdown = None

"""WebShop's pages as text: what each page shows, what can be clicked on it, where a click goes.

The page flow and texts follow WebShop's site in its "simple" text mode, where the visible
texts of a page are joined by ``" [SEP] "``:

* search page: ``WebShop [SEP] Instruction: [SEP] <goal> [SEP] Search``; only here can the
  agent ``search[...]``.
* results page: the instruction, ``Back to Search``, ``Page p (Total results: n)``,
  ``< Prev`` (from page 2 on), ``Next >`` (always, as in WebShop), then per product its
  asin, title and price. Ten products per page, at most 50 results.
* item page: the instruction, ``Back to Search``, ``< Prev`` (back to the results), each
  option name followed by its values, the title, ``Price: ...``, ``Rating: N.A.``, and the
  buttons ``Description``, ``Features``, ``Reviews`` and ``Buy Now``. Clicking a value
  chooses it for its option (WebShop's simple mode does not show the choice).
* description / features / reviews pages: the instruction, ``Back to Search``, ``< Prev``
  (back to the item, options kept) and the text.
* done page (after ``Buy Now``): the thank-you line and the score.

Texts are shown in printable ASCII (accents folded, other characters dropped, whitespace
runs collapsed) and long texts are shortened so a page fits in 4,096 characters.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from gigpo_envs.webshop.data import Product
from gigpo_envs.webshop.shop import Shop

PRODUCTS_PER_PAGE = 10
SEP = " [SEP] "
PAGE_KINDS = ("search", "results", "item", "description", "features", "reviews", "done")
SUB_PAGES = ("description", "features", "reviews")
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "back to search", "next >", "< prev", "buy now"
#: The search action as ``admissible_actions`` lists it.
SEARCH_ACTION = "search[<your query>]"

_MAX_CHARS = 4096
_FIELD_LIMITS = (600, 300, 160, 80, 40)


@dataclass
class PageState:
    """Where the agent is: the page kind and what that page was opened with.

    Attributes:
      kind: one of :data:`PAGE_KINDS`.
      query: the search query of the results (None on the search page).
      page: the results page number (1-based).
      asin: the product of an item page or sub-page.
      options: option name -> chosen value, on the item page and its sub-pages.
      score: the purchase score, on the done page.
    """

    kind: str = "search"
    query: str | None = None
    page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    score: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Returns the state as a JSON-able dict (sorted options)."""
        return {
            "kind": self.kind,
            "query": self.query,
            "page": self.page,
            "asin": self.asin,
            "options": dict(sorted(self.options.items())),
            "score": self.score,
        }


def to_ascii(text: str) -> str:
    """Returns ``text`` in printable ASCII with whitespace runs collapsed to one space."""
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return " ".join(text.split())


def clickable_key(text: str) -> str:
    """The name by which an element is clicked: ASCII, lower case, single spaces."""
    return to_ascii(text).lower()


def result_asins(shop: Shop, state: PageState) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Returns (all result asins of the query, the asins shown on the current page)."""
    hits = shop.search.search(state.query or "")
    start = (state.page - 1) * PRODUCTS_PER_PAGE
    return hits, hits[start : start + PRODUCTS_PER_PAGE]


def clickables(shop: Shop, state: PageState) -> dict[str, tuple[str, str | None]]:
    """Returns ``{clickable name: (what, target)}`` of the page, in the page's order.

    ``what`` is one of ``back``, ``prev``, ``next``, ``product`` (target: asin),
    ``option`` (target: option name), ``sub`` (target: sub-page), ``buy``. When an option
    value has the name of a button, the button wins (as WebShop dispatches it); a value
    shared by two options chooses it for the later one (as WebShop's element map does).
    """
    kind = state.kind
    if kind in ("search", "done"):
        return {}
    found: dict[str, tuple[str, str | None]] = {BACK_TO_SEARCH: ("back", None)}
    if kind == "results":
        if state.page > 1:
            found[PREV_PAGE] = ("prev", None)
        found[NEXT_PAGE] = ("next", None)
        for asin in result_asins(shop, state)[1]:
            found.setdefault(asin.lower(), ("product", asin))
        return found
    found[PREV_PAGE] = ("prev", None)
    if kind == "item":
        product = shop.catalog.by_asin[state.asin or ""]
        values: dict[str, tuple[str, str | None]] = {}
        for name, option_values in product.options.items():
            for value in option_values:
                key = clickable_key(value)
                if key:
                    values.pop(key, None)
                    values[key] = ("option", name)
        for key, target in values.items():
            found.setdefault(key, target)
        for sub in SUB_PAGES:
            found[sub] = ("sub", sub)
        found[BUY_NOW] = ("buy", None)
    return found


def option_value(product: Product, name: str, key: str) -> str:
    """Returns the value of option ``name`` whose clickable name is ``key``."""
    for value in product.options.get(name, ()):
        if clickable_key(value) == key:
            return value
    raise KeyError(f"{product.asin} has no value {key!r} for option {name!r}")


def _fit(parts: list[str], shortenable: set[int]) -> str:
    text = SEP.join(parts)
    for limit in _FIELD_LIMITS:
        if len(text) <= _MAX_CHARS:
            return text
        parts = [
            part[: limit - 4] + " ..." if i in shortenable and len(part) > limit else part
            for i, part in enumerate(parts)
        ]
        text = SEP.join(parts)
    return text[:_MAX_CHARS]


def render(shop: Shop, state: PageState, instruction: str) -> str:
    """Returns the page's text in WebShop's simple mode (at most 4,096 characters)."""
    instruction = to_ascii(instruction)
    if state.kind == "search":
        return _fit(["WebShop", "Instruction:", instruction, "Search"], {2})
    if state.kind == "done":
        return SEP.join(
            ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(state.score)]
        )
    parts = ["Instruction:", instruction, "Back to Search"]
    shortenable = {1}
    if state.kind == "results":
        hits, shown = result_asins(shop, state)
        parts.append(f"Page {state.page} (Total results: {len(hits)})")
        if state.page > 1:
            parts.append("< Prev")
        parts.append("Next >")
        for asin in shown:
            product = shop.catalog.by_asin[asin]
            shortenable.add(len(parts) + 1)
            parts += [asin, to_ascii(product.title), product.price_tag]
        return _fit(parts, shortenable)
    product = shop.catalog.by_asin[state.asin or ""]
    parts.append("< Prev")
    if state.kind == "item":
        for name, values in product.options.items():
            parts.append(to_ascii(name))
            parts += [text for text in map(to_ascii, values) if text]
        shortenable.add(len(parts))
        parts += [to_ascii(product.title), f"Price: {product.price_tag}"]
        parts += [f"Rating: {product.rating}", "Description", "Features", "Reviews", "Buy Now"]
    else:
        texts = {"description": [product.description], "features": product.bullet_points}
        for text in map(to_ascii, texts.get(state.kind, ())):
            if text:
                shortenable.add(len(parts))
                parts.append(text)
    return _fit(parts, shortenable)

"""WebShop: the shopping benchmark (Yao et al. 2022) in-process, as ``gigpo/WebShop-v0``.

Modules: :mod:`~gigpo_envs.webshop.data` (the original files' loader),
:mod:`~gigpo_envs.webshop.catalog` (a generated catalog in the same schema),
:mod:`~gigpo_envs.webshop.reward` (the purchase reward as pure functions),
:mod:`~gigpo_envs.webshop.search` (search through ``retrieval_server`` backends),
:mod:`~gigpo_envs.webshop.shop` (catalog + goal splits + index, shared per process),
:mod:`~gigpo_envs.webshop.pages` (page texts and clicks), :mod:`~gigpo_envs.webshop.env`
and :mod:`~gigpo_envs.webshop.expert` (a scripted expert).
"""

from gigpo_envs.webshop.catalog import generate_catalog, generate_raw, write_catalog
from gigpo_envs.webshop.data import Catalog, Goal, Product, WebShopDataError, load_catalog
from gigpo_envs.webshop.env import WebShopEnv
from gigpo_envs.webshop.expert import expert_action
from gigpo_envs.webshop.reward import RewardBreakdown, purchase_reward
from gigpo_envs.webshop.shop import Shop, build_shop, get_shop, split_ranges

__all__ = [
    "Catalog",
    "Goal",
    "Product",
    "RewardBreakdown",
    "Shop",
    "WebShopDataError",
    "WebShopEnv",
    "build_shop",
    "expert_action",
    "generate_catalog",
    "generate_raw",
    "get_shop",
    "load_catalog",
    "purchase_reward",
    "split_ranges",
    "write_catalog",
]

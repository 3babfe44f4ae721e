"""The ``gigpo/`` environment ids registered with Gymnasium, on import (once per process:
importing :mod:`gigpo_envs` does it, and so does every worker process a vector env starts)."""

from __future__ import annotations

import gymnasium as gym

#: id -> (entry point, default kwargs) of every environment this package registers.
ENVIRONMENTS: dict[str, tuple[str, dict]] = {
    "gigpo/Sokoban-v0": ("gigpo_envs.sokoban.env:SokobanEnv", {}),
    "gigpo/EZPoints-v0": ("gigpo_envs.cards.points:PointsEnv", {"target": 12, "num_cards": 2}),
    "gigpo/Points24-v0": (
        "gigpo_envs.cards.points:PointsEnv",
        {"target": 24, "num_cards": 4, "max_steps": 20},
    ),
    "gigpo/NumberLine-v0": ("gigpo_envs.cards.numberline:NumberLineEnv", {}),
    "gigpo/Blackjack-v0": ("gigpo_envs.cards.blackjack:BlackjackEnv", {}),
    "gigpo/WebShop-v0": ("gigpo_envs.webshop.env:WebShopEnv", {}),
}

for _env_id, (_entry_point, _kwargs) in ENVIRONMENTS.items():
    if _env_id not in gym.registry:
        # TextEnv enforces reset-before-step itself and must accept step() right after
        # load_state_dict(): Gymnasium's OrderEnforcing wrapper refuses that, and its passive
        # checker (1.4) crashes on it. check_env runs on every env in the tests instead.
        gym.register(
            id=_env_id,
            entry_point=_entry_point,
            kwargs=dict(_kwargs),
            order_enforce=False,
            disable_env_checker=True,
        )

# SearchQA needs data paths (dataset=, corpus= or retriever_url=) and ALFWorld game files
# (data_dir=, $ALFWORLD_DATA or ~/.cache/alfworld) and the alfworld extra, so they are
# registered apart from ENVIRONMENTS, whose members the contract tests build with default
# arguments; tests/envs/test_env_alfworld*.py run the contract checks on generated games.
for _env_id, _entry_point in (
    ("gigpo/SearchQA-v0", "gigpo_envs.searchqa.env:SearchQAEnv"),
    ("gigpo/ALFWorld-v0", "gigpo_envs.alfworld.env:AlfWorldEnv"),
):
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id, entry_point=_entry_point, order_enforce=False, disable_env_checker=True
        )

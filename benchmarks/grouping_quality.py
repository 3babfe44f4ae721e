"""How well GiGPO's step-level (anchor-state) grouping works on real rollouts: JSON lines.

It plays GiGPO groups (``--group-size`` rollouts from one start) with two policies, random
admissible actions (``random``) and the hand-coded expert with 20% random admissible actions
(``noisy_expert``), on

* ALFWorld: games written by :func:`gigpo_envs.alfworld.generate.generate_games` (one per
  task type with the default 6), ``max_steps`` 50;
* WebShop: the real sample catalog of ``data/samples/webshop`` (43 products; the sample's
  human instructions given to its products in order, as ``tests/envs/test_env_webshop.py``
  does), ``max_steps`` 15. A random ``search[...]`` uses the words of a random goal of the
  sample (without the price sentence), so random searches land on real result pages.

Every step keeps one record of the state the action was taken from: its episode group, its
exact anchor (``info["anchor"]``, the env's ``state_key()``), its anchor text
(``info["anchor_text"]``, ``state_text()``, which similarity grouping compares) and its
admissible actions (``info["admissible_actions"]``). The records are then grouped with
:func:`gigpo_algo.grouping.anchor_groups` in every mode: exactly on the key (``exact_key``),
exactly on the text (``exact_text``), and by text similarity with each ``--metrics`` metric
at each ``--thresholds`` threshold. For each grouping (:func:`grouping_quality`):

* ``coverage``: the fraction of records in step groups of size >= 2 (the records GiGPO's
  step-level advantage can compare with another);
* ``merged_groups``: step groups of size >= 2 holding more than one distinct anchor text (only
  similarity grouping makes them, unless one key has several texts), and
  ``merged_record_fraction``, the fraction of all records that lie in them;
* ``wrong_merge``: the fraction of merged groups whose records do not all have the same set
  of admissible actions, where comparing the actions taken means little (null without
  merged groups); ``wrong_merge_record_fraction``: the fraction of all records in them;
* ``seconds``: the time spent in ``anchor_groups`` (for ``embedding``, the model is loaded
  before, by a probe call, and not counted).

One ``grouping_rollouts`` line per (env, policy) gives the records, episodes, won episodes,
the mean episode reward and the mean anchor-text length in characters. On the WebShop sample
the goals belong to other products than the ones they are given to, so even the scripted
expert wins none of them (a win is a full match); the reward is the purchase score in [0, 1].

A metric that ``anchor_groups`` does not know (``ValueError`` on a probe call) is skipped
with a note on stderr. With ``--markdown`` two markdown tables follow the JSON lines on
stdout (lines that do not start with ``{``).

Run: ``python benchmarks/grouping_quality.py [--games 6] [--webshop-goals 8] [--markdown]``;
``--quick`` for a tiny run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WEBSHOP_SAMPLE = REPO / "data" / "samples" / "webshop"
POLICIES = ("random", "noisy_expert")
ENVS = ("alfworld", "webshop")
SIMILARITY_METRICS = ("difflib", "indel", "embedding")
EXPLORE = 0.2  # the noisy expert's share of random admissible actions
ALFWORLD_MAX_STEPS = 50
WEBSHOP_MAX_STEPS = 15


# ------------------------------------------------------------------------------ the metric


def grouping_quality(
    step_ids: Sequence[int] | np.ndarray,
    texts: Sequence[str],
    admissible_sets: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """Coverage and merge quality of one step-level grouping.

    Args:
        step_ids: shape (N,), ints: the step group of each record (as ``anchor_groups``
            returns; ids need not be contiguous).
        texts: shape (N,): the anchor text of each record.
        admissible_sets: shape (N,): the admissible actions of each record (any iterable of
            str; order and repeats do not matter).

    Returns:
        ``records`` (N), ``step_groups`` (distinct ids), ``coverage`` (fraction of records in
        groups of size >= 2), ``merged_groups`` (groups of size >= 2 with more than one
        distinct text), ``merged_record_fraction`` (fraction of records in merged groups),
        ``wrong_merges`` (merged groups whose records' admissible sets are not all equal),
        ``wrong_merge`` (``wrong_merges / merged_groups``, None without merged groups) and
        ``wrong_merge_record_fraction`` (fraction of records in wrong merges). Fractions of
        zero records are 0.0.

    Raises:
        ValueError: the three arguments have different lengths, or ``step_ids`` is not 1-D.
    """
    ids = np.asarray(step_ids)
    if ids.ndim != 1:
        raise ValueError(f"step_ids must be 1-D, got shape {ids.shape}")
    n = len(ids)
    if len(texts) != n or len(admissible_sets) != n:
        raise ValueError(
            f"lengths differ: step_ids {n}, texts {len(texts)}, "
            f"admissible_sets {len(admissible_sets)}"
        )
    members: dict[int, list[int]] = {}
    for row, step_id in enumerate(ids.tolist()):
        members.setdefault(step_id, []).append(row)
    covered = merged = merged_records = wrong = wrong_records = 0
    for rows in members.values():
        if len(rows) < 2:
            continue
        covered += len(rows)
        if len({texts[row] for row in rows}) < 2:
            continue
        merged += 1
        merged_records += len(rows)
        if len({frozenset(admissible_sets[row]) for row in rows}) > 1:
            wrong += 1
            wrong_records += len(rows)
    return {
        "records": n,
        "step_groups": len(members),
        "coverage": covered / n if n else 0.0,
        "merged_groups": merged,
        "merged_record_fraction": merged_records / n if n else 0.0,
        "wrong_merges": wrong,
        "wrong_merge": wrong / merged if merged else None,
        "wrong_merge_record_fraction": wrong_records / n if n else 0.0,
    }


# ------------------------------------------------------------------------------ rollouts


@dataclass
class Rollouts:
    """The step records of one (env, policy): one entry per step, in play order."""

    env: str
    policy: str
    group_ids: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    admissible: list[frozenset[str]] = field(default_factory=list)
    episodes: int = 0
    won: int = 0
    reward: float = 0.0
    seconds: float = 0.0

    def add(self, group: int, info: dict[str, Any]) -> None:
        """Records the state ``info`` describes (the one the next action is taken from)."""
        self.group_ids.append(group)
        self.keys.append(info["anchor"])
        self.texts.append(info["anchor_text"])
        self.admissible.append(frozenset(info["admissible_actions"]))


def _random_choice(actions: Sequence[str], rng: np.random.Generator) -> str:
    return actions[int(rng.integers(len(actions)))]


def alfworld_rollouts(
    data_dir: Path, games: int, group_size: int, policy: str, seed: int
) -> Rollouts:
    """Plays ``group_size`` episodes of each of games ``0 .. games - 1`` (one group a game)."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers gigpo/ALFWorld-v0)

    env = gym.make(
        "gigpo/ALFWorld-v0",
        data_dir=data_dir,
        expert=policy != "random",
        max_steps=ALFWORLD_MAX_STEPS,
    )
    rng = np.random.default_rng(seed)
    out = Rollouts("alfworld", policy)
    start = time.perf_counter()
    for game in range(games):
        for _ in range(group_size):
            _, info = env.reset(seed=game)
            while True:
                out.add(game, info)
                action = info.get("expert_action")
                if policy == "random" or action is None or rng.random() < EXPLORE:
                    action = _random_choice(info["admissible_actions"], rng)
                _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
                out.reward += float(reward)
                if terminated or truncated:
                    break
            out.episodes += 1
            out.won += bool(info["won"])
    out.seconds = time.perf_counter() - start
    env.close()
    return out


def webshop_sample_env(tmp: Path) -> Any:
    """``WebShopEnv`` on the 43 real sample products, each given the sample's next human goals.

    The sample's instructions belong to other products (``data/samples/webshop/README.md``);
    as in the tests, the i-th instruction entry is given to the i-th product.
    """
    from gigpo_envs.webshop import WebShopEnv, build_shop, load_catalog

    items = WEBSHOP_SAMPLE / "items_sample.json"
    raw = json.loads(items.read_text())
    human = list(json.loads((WEBSHOP_SAMPLE / "human_ins_sample.json").read_text()).values())
    remapped = {item["asin"]: entries for item, entries in zip(raw, human, strict=False)}
    human_path = tmp / "human_ins_remapped.json"
    human_path.write_text(json.dumps(remapped))
    catalog = load_catalog(items, human_path=human_path)
    shop = build_shop(catalog, "grouping-quality-sample")
    return WebShopEnv(shop=shop, split="all", max_steps=WEBSHOP_MAX_STEPS)


def webshop_rollouts(env: Any, goals: int, group_size: int, policy: str, seed: int) -> Rollouts:
    """Plays ``group_size`` episodes of each of ``goals`` goals spread over the sample's."""
    from gigpo_envs.webshop import expert_action
    from gigpo_envs.webshop.expert import goal_query
    from gigpo_envs.webshop.pages import SEARCH_ACTION

    all_goals = env.shop.goals
    queries = [goal_query(goal.instruction_text) for goal in all_goals]
    positions = np.linspace(0, len(all_goals) - 1, min(goals, len(all_goals))).astype(int)
    rng = np.random.default_rng(seed)
    out = Rollouts("webshop", policy)
    start = time.perf_counter()
    for group, goal in enumerate(positions.tolist()):
        for _ in range(group_size):
            _, info = env.reset(seed=group, options={"goal": goal})
            while True:
                out.add(group, info)
                if policy == "random" or rng.random() < EXPLORE:
                    action = _random_choice(info["admissible_actions"], rng)
                    if action == SEARCH_ACTION:
                        action = f"search[{_random_choice(queries, rng)}]"
                else:
                    action = expert_action(env)
                _, reward, terminated, truncated, info = env.step(f"<action>{action}</action>")
                out.reward += float(reward)
                if terminated or truncated:
                    break
            out.episodes += 1
            out.won += bool(info["won"])
    out.seconds = time.perf_counter() - start
    return out


# ------------------------------------------------------------------------------ groupings


def usable_metrics(metrics: Sequence[str]) -> list[str]:
    """The similarity metrics ``anchor_groups`` accepts; notes the others on stderr.

    Each is probed on two short texts, which also loads an embedding model before any
    timing. An unknown metric (``ValueError``) or a missing package (``ImportError``) skips
    the metric with a note; other errors are raised.
    """
    from gigpo_algo.grouping import anchor_groups

    usable = []
    for metric in metrics:
        try:
            anchor_groups(["put a mug", "put a cup"], [0, 0], similarity=0.5, metric=metric)
        except (ValueError, ImportError) as error:
            print(f"note: skipping metric {metric!r}: {error}", file=sys.stderr, flush=True)
            continue
        usable.append(metric)
    return usable


def groupings(metrics: Sequence[str], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """Every grouping to measure: exact on the key, exact on the text, then each similarity."""
    out = [
        {"grouping": "exact_key", "metric": "exact", "anchor": "key", "threshold": None},
        {"grouping": "exact_text", "metric": "exact", "anchor": "text", "threshold": None},
    ]
    for metric in metrics:
        for threshold in thresholds:
            out.append(
                {"grouping": "similarity", "metric": metric, "anchor": "text",
                 "threshold": threshold}
            )  # fmt: skip
    return out


def measure(rollouts: Rollouts, grouping: dict[str, Any]) -> dict[str, Any]:
    """Groups the records as ``grouping`` says; its quality and the seconds it took."""
    from gigpo_algo.grouping import anchor_groups

    anchors = rollouts.keys if grouping["anchor"] == "key" else rollouts.texts
    kwargs: dict[str, Any] = {"similarity": grouping["threshold"]}
    if grouping["threshold"] is not None:
        kwargs["metric"] = grouping["metric"]
    start = time.perf_counter()
    step_ids = anchor_groups(anchors, rollouts.group_ids, **kwargs)
    seconds = time.perf_counter() - start
    return {**grouping_quality(step_ids, rollouts.texts, rollouts.admissible), "seconds": seconds}


# ------------------------------------------------------------------------------ output


def emit(record: dict[str, Any]) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(summaries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """The two tables: rollouts per (env, policy), then one row per grouping."""
    lines = [
        "| env | policy | episodes (won) | mean reward | records | mean anchor chars |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        lines.append(
            f"| {s['env']} | {s['policy']} | {s['episodes']} ({s['won_episodes']}) "
            f"| {s['mean_episode_reward']:.2f} | {s['records']} | {s['mean_anchor_chars']:.0f} |"
        )
    lines += [
        "",
        "| env | policy | grouping | coverage | merged groups | records in merged groups "
        "| wrong merges | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = r["grouping"] if r["threshold"] is None else f"{r['metric']} {r['threshold']}"
        wrong = (
            "-"
            if r["wrong_merge"] is None
            else f"{r['wrong_merges']} ({_percent(r['wrong_merge'])})"
        )
        lines.append(
            f"| {r['env']} | {r['policy']} | {name} | {_percent(r['coverage'])} "
            f"| {r['merged_groups']} | {_percent(r['merged_record_fraction'])} | {wrong} "
            f"| {r['seconds']:.3f} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS))
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--games", type=int, default=6, help="ALFWorld games (groups)")
    parser.add_argument("--webshop-goals", type=int, default=8, help="WebShop goals (groups)")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per group")
    parser.add_argument("--metrics", nargs="+", choices=SIMILARITY_METRICS,
                        default=list(SIMILARITY_METRICS))  # fmt: skip
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    parser.add_argument("--seed", type=int, default=0, help="game generator and policy seed")
    parser.add_argument("--data-dir", help="ALFWorld data root; default: generate games")
    parser.add_argument("--quick", action="store_true",
                        help="2 games, 2 goals, groups of 4, threshold 0.9")  # fmt: skip
    parser.add_argument("--markdown", action="store_true", help="print tables after the JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.games, args.webshop_goals, args.group_size, args.thresholds = 2, 2, 4, [0.9]
    for threshold in args.thresholds:
        if not 0.0 < threshold < 1.0:
            parser.error(f"thresholds must be in (0, 1), got {threshold}")

    metrics = usable_metrics(args.metrics)
    plan = groupings(metrics, args.thresholds)
    summaries: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        played: list[Rollouts] = []
        if "alfworld" in args.envs:
            data_dir = Path(args.data_dir) if args.data_dir else Path(tmp) / "alfworld"
            if not args.data_dir:
                from gigpo_envs.alfworld.generate import generate_games

                generate_games(data_dir, args.games, seed=args.seed)
            for policy in args.policies:
                played.append(
                    alfworld_rollouts(data_dir, args.games, args.group_size, policy, args.seed)
                )
        if "webshop" in args.envs:
            env = webshop_sample_env(Path(tmp))
            for policy in args.policies:
                played.append(
                    webshop_rollouts(env, args.webshop_goals, args.group_size, policy, args.seed)
                )
        for rollouts in played:
            groups = len(set(rollouts.group_ids))
            size = {"groups": groups, "group_size": args.group_size,
                    "max_steps": ALFWORLD_MAX_STEPS if rollouts.env == "alfworld"
                    else WEBSHOP_MAX_STEPS}  # fmt: skip
            summary = {
                "what": "grouping_rollouts",
                "env": rollouts.env,
                "policy": rollouts.policy,
                "size": size,
                "records": len(rollouts.texts),
                "episodes": rollouts.episodes,
                "won_episodes": rollouts.won,
                "mean_episode_reward": rollouts.reward / max(rollouts.episodes, 1),
                "mean_anchor_chars": float(np.mean([len(t) for t in rollouts.texts])),
                "seconds": round(rollouts.seconds, 2),
                "baseline": None,
            }
            emit(summary)
            summaries.append(summary)
            for grouping in plan:
                row = {
                    "what": "grouping_quality",
                    "env": rollouts.env,
                    "policy": rollouts.policy,
                    "size": size,
                    **grouping,
                    **measure(rollouts, grouping),
                    "baseline": None,
                }
                emit(row)
                rows.append(row)
    if args.markdown:
        print()
        print(markdown(summaries, rows), flush=True)


if __name__ == "__main__":
    main()

"""Speed of gigpo/WebShop-v0: JSON lines on stdout, one object per result.

For each catalog size (generated products; default 1,000 and 100,000):
  * ``webshop_catalog``: seconds to generate and load the catalog;
  * ``webshop_index_build``: seconds to build the bm25s index (target: under 60 s at 100,000),
    beside pyserini's Lucene index of the same documents (the original's engine) when
    pyserini is installed (else the baseline is null);
  * ``webshop_step``: env steps per second and p50 / p99 step latency of one env, with the
    search cache off so every search step runs a real search (target: 1,000+ steps/s on
    one core at 1,000 products). The policy mixes the scripted expert with random
    admissible clicks and fresh searches; ``search_share`` is the share of search steps.
    The baseline is the same workload with pyserini's Lucene backend, when installed;
  * ``webshop_step_noun_tagger``: the same workload with the default noun tagger (spaCy's
    ``en_core_web_sm`` when installed, its per-title cache emptied first, so every title
    is tagged in the run) against the heuristic tagger (the baseline);
  * ``webshop_expert``: the scripted expert's success rate (reward 1.0) over goals.

Run on one core for the targets: ``taskset -c 0 python benchmarks/bench_webshop.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from gigpo_envs.webshop import WebShopEnv, build_shop, expert_action, generate_catalog
from gigpo_envs.webshop.nouns import SpacyNouns, noun_tagger
from gigpo_envs.webshop.search import ProductSearch, product_document
from gigpo_envs.webshop.shop import Shop, goal_order, split_ranges


def emit(record: dict) -> None:
    record["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(json.dumps(record), flush=True)


def pyserini_available() -> bool:
    try:
        import pyserini  # noqa: F401
    except ImportError:
        return False
    return True


def run_steps(env: WebShopEnv, steps: int, seed: int) -> dict:
    """Plays ``steps`` steps of the mixed policy; returns throughput and latencies."""
    rng = np.random.default_rng(seed)
    env.shop.search.cache_size = 0  # every search step searches
    goals = env.shop.goals
    _, info = env.reset(seed=seed)
    latencies = np.empty(steps)
    searches = 0
    start = time.perf_counter()
    for index in range(steps):
        if rng.random() < 0.5:
            action = expert_action(env)
        else:
            actions = info["admissible_actions"]
            action = actions[int(rng.integers(len(actions)))]
            if action.startswith("search["):
                words = goals[int(rng.integers(len(goals)))].instruction_text.split(",")[0]
                action = f"search[{words}]"
        searches += action.startswith("search[")
        began = time.perf_counter()
        _, _, terminated, truncated, info = env.step(f"<think>.</think><action>{action}</action>")
        if terminated or truncated:
            _, info = env.reset()
        latencies[index] = time.perf_counter() - began
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "throughput": steps / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1e3),
        "p99_ms": float(np.percentile(latencies, 99) * 1e3),
        "search_share": searches / steps,
    }


def run_expert(env: WebShopEnv, episodes: int) -> dict:
    """Plays the expert on ``episodes`` goals spread over all goals."""
    positions = np.linspace(0, len(env.shop.goals) - 1, episodes).astype(int)
    rewards, lengths = [], []
    for goal in positions:
        env.reset(options={"goal": int(goal)})
        while True:
            _, reward, terminated, truncated, info = env.step(
                f"<action>{expert_action(env)}</action>"
            )
            if terminated or truncated:
                break
        rewards.append(reward)
        lengths.append(info["elapsed_steps"])
    return {
        "episodes": episodes,
        "success_rate": float(np.mean(np.asarray(rewards) >= 1.0)),
        "mean_reward": float(np.mean(rewards)),
        "mean_steps": float(np.mean(lengths)),
    }


def bench_size(size: int, steps: int, episodes: int, with_baseline: bool) -> None:
    started = time.perf_counter()
    catalog = generate_catalog(size, seed=0)
    seconds = time.perf_counter() - started
    emit({"what": "webshop_catalog", "size": size, "seconds": seconds,
          "throughput": size / seconds, "unit": "products/s", "baseline": None})  # fmt: skip

    started = time.perf_counter()
    search = ProductSearch(catalog.products, "bm25s")
    seconds = time.perf_counter() - started
    baseline = None
    if with_baseline:
        from retrieval_server.backends import get_backend

        docs = [product_document(product) for product in catalog.products]
        began = time.perf_counter()
        get_backend("pyserini").build(docs)
        baseline = {"backend": "pyserini", "seconds": time.perf_counter() - began}
    emit({"what": "webshop_index_build", "size": size, "seconds": seconds,
          "throughput": size / seconds, "unit": "products/s", "backend": "bm25s",
          "target_seconds": 60.0, "baseline": baseline})  # fmt: skip

    goals = goal_order(catalog.goals)
    shop = Shop(f"bench:{size}", catalog, goals, split_ranges(len(goals)), search)
    env = WebShopEnv(shop=shop, split="all")
    record = run_steps(env, steps, seed=0)
    baseline = None
    if with_baseline:
        lucene = WebShopEnv(shop=build_shop(catalog, f"bench:{size}", "pyserini"), split="all")
        lucene_record = run_steps(lucene, max(steps // 10, 100), seed=0)
        baseline = {"backend": "pyserini", **lucene_record}
    emit({"what": "webshop_step", "size": size, "steps": steps, **record, "unit": "steps/s",
          "backend": "bm25s", "noun_tagger": env.noun_tagger,
          "target_throughput": 1000 if size <= 1000 else None,
          "baseline": baseline})  # fmt: skip

    tagger = noun_tagger("auto")
    if isinstance(tagger, SpacyNouns):
        tagger.clear_cache()
    tagged = run_steps(WebShopEnv(shop=shop, split="all", noun_tagger="auto"), steps, seed=1)
    heuristic = run_steps(WebShopEnv(shop=shop, split="all", noun_tagger="heuristic"), steps, 1)
    emit({"what": "webshop_step_noun_tagger", "size": size, "steps": steps, **tagged,
          "unit": "steps/s", "noun_tagger": tagger.name, "cache": "cold",
          "target_throughput": 1000 if size <= 1000 else None,
          "baseline": {"noun_tagger": "heuristic", **heuristic}})  # fmt: skip

    emit({"what": "webshop_expert", "size": size, **run_expert(env, episodes),
          "baseline": None})  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--steps", type=int, default=20_000, help="steps at 1,000 products")
    parser.add_argument("--episodes", type=int, default=500, help="expert episodes per size")
    parser.add_argument(
        "--baseline", choices=("auto", "off"), default="auto",
        help="time pyserini beside bm25s when it is installed (auto)",
    )  # fmt: skip
    args = parser.parse_args()
    with_baseline = args.baseline == "auto" and pyserini_available()
    for size in args.sizes:
        steps = args.steps if size <= 1000 else max(args.steps // 4, 1000)
        bench_size(size, steps, args.episodes, with_baseline)


if __name__ == "__main__":
    main()

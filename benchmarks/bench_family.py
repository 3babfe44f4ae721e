"""Speed of ``hgpo_advantages`` and ``graphgpo_advantages`` against the per-row reference.

Prints one JSON object per line: per (method, size, baseline), the fast function's best
time, the per-row reference's time, both measured in this run, their ratio, and the largest
difference between the two outputs (asserted below 1e-9). Two baselines, both in
``naive_family.py`` and checked to give the same numbers:

- ``naive_official``: the loops as verl-agent's recipes write them (a scan of the batch per
  trajectory and per row to put returns back in batch order, per-element tensor updates, a
  tensor stack per row in HGPO's aggregation);
- ``naive_python``: the same semantics in plain Python with linear-time bookkeeping: the
  fastest a per-row loop gets, reported beside it for honesty.

Batches are ALFWorld-like (``bench_advantages.make_batch``): groups of 8 episodes of 50 steps
walking over a small house, ~300-character observations as anchors with states recurring
across and within episodes, reward 10 at the last step of about 30% of the episodes, the
rows of a group's episodes interleaved step by step as a vector env gives them. Added here:
each row's next state (the next row's anchor; for the last row, a closing observation), and
invalid actions on 10% of the rows (verl-agent's penalty 0.1). Every timed call gets fresh
string objects (no cached string hashes), as rows coming from an environment have.

Settings are verl-agent's ALFWorld scripts: HGPO with history_length 2, gamma 0.95,
mean_std_norm, length_weight_alpha 1, no base group; GraphGPO with gamma 0.1, mean_std_norm,
both weights 1, normalize_distance off; both with verl-agent's cross-step episode statistics.

Sizes: the paper's batch (16 groups x 8 episodes x 50 steps = 6,400 rows) and 10x that
(160 groups, 64,000 rows; each baseline runs once there, the official-style one for several
minutes since its scans are quadratic in the rows).

Usage: ``python benchmarks/bench_family.py [--quick]`` (runs on one CPU core; ``--quick``:
the paper's batch only).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_advantages import make_batch  # noqa: E402
from naive_family import naive_graphgpo, naive_hgpo  # noqa: E402

from gigpo_algo.graphgpo import graphgpo_advantages  # noqa: E402
from gigpo_algo.hgpo import hgpo_advantages  # noqa: E402

HGPO_SETTINGS = dict(
    history_length=2,
    gamma=0.95,
    norm="mean_std",
    length_alpha=1.0,
    base_group=False,
    episode_stats="step",
    invalid_penalty=0.1,
)
GRAPHGPO_SETTINGS = dict(
    gamma=0.1,
    normalize_distance=False,
    step_weight=1.0,
    episode_weight=1.0,
    norm="mean_std",
    episode_stats="step",
    invalid_penalty=0.1,
)


def family_batch(num_groups: int, seed: int) -> dict[str, list[Any]]:
    """``make_batch(num_groups, 8, 50)`` plus next states and invalid-action flags."""
    batch = make_batch(num_groups, 8, 50, seed=seed)
    rng = np.random.default_rng(seed + 1)
    n = len(batch["rewards"])
    last_row: dict[tuple[str, int], int] = {}
    next_anchors: list[str] = [""] * n
    for i, key in enumerate(zip(batch["groups"], batch["trajs"], strict=True)):
        if key in last_row:
            next_anchors[last_row[key]] = batch["anchors"][i]
        last_row[key] = i
    for i in last_row.values():
        next_anchors[i] = batch["anchors"][i] + " The episode is over."
    return dict(batch, next_anchors=next_anchors, valid=(rng.random(n) >= 0.1).tolist())


def fresh(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The batch with new string objects for the states, whose hashes are not cached yet."""
    out = dict(batch)
    for key in ("anchors", "next_anchors"):
        out[key] = [(a + ".")[:-1] for a in batch[key]]
    return out


def best_of(fn: Callable[[dict], Any], batch: dict, repeats: int) -> tuple[float, Any]:
    """Best wall time of ``fn(batch)`` over ``repeats`` runs, each on fresh strings."""
    best, out = float("inf"), None
    for _ in range(repeats):
        data = fresh(batch)
        tick = time.perf_counter()
        out = fn(data)
        best = min(best, time.perf_counter() - tick)
    return best, out


def fast_hgpo(b: dict) -> np.ndarray:
    res = hgpo_advantages(
        b["rewards"],
        b["trajs"],
        b["groups"],
        b["anchors"],
        is_action_valid=b["valid"],
        **HGPO_SETTINGS,
    )
    return np.asarray(res.advantages)


def ref_hgpo(b: dict, style: str) -> np.ndarray:
    adv, _ = naive_hgpo(
        b["rewards"],
        b["trajs"],
        b["groups"],
        b["anchors"],
        is_action_valid=b["valid"],
        style=style,
        **HGPO_SETTINGS,
    )
    return adv


def fast_graphgpo(b: dict) -> np.ndarray:
    res = graphgpo_advantages(
        b["rewards"],
        b["trajs"],
        b["groups"],
        b["anchors"],
        b["next_anchors"],
        is_action_valid=b["valid"],
        **GRAPHGPO_SETTINGS,
    )
    return np.asarray(res.advantages)


def ref_graphgpo(b: dict, style: str) -> np.ndarray:
    adv, _ = naive_graphgpo(
        b["rewards"],
        b["trajs"],
        b["groups"],
        b["anchors"],
        b["next_anchors"],
        is_action_valid=b["valid"],
        style=style,
        **GRAPHGPO_SETTINGS,
    )
    return adv


METHODS = {
    "hgpo": (fast_hgpo, ref_hgpo, HGPO_SETTINGS),
    "graphgpo": (fast_graphgpo, ref_graphgpo, GRAPHGPO_SETTINGS),
}


def run_case(method: str, batch: dict, *, shape: str, repeats: int, ref_repeats: int) -> None:
    fast, ref, settings = METHODS[method]
    n = len(batch["rewards"])
    fast_s, fast_out = best_of(fast, batch, repeats)
    for style in ("official", "python"):
        ref_s, ref_out = best_of(lambda b, style=style: ref(b, style), batch, ref_repeats)
        diff = float(np.max(np.abs(fast_out - ref_out))) if n else 0.0
        print(
            json.dumps(
                dict(
                    what=f"{method}_advantages",
                    rows=n,
                    shape=shape,
                    settings=settings,
                    seconds=round(fast_s, 5),
                    rows_per_s=round(n / fast_s),
                    fast_repeats=repeats,
                    baseline=f"naive_{style}",
                    baseline_seconds=round(ref_s, 4),
                    baseline_repeats=ref_repeats,
                    speedup=round(ref_s / fast_s, 1),
                    max_abs_diff=diff,
                    same_numbers=diff < 1e-9,
                )
            ),
            flush=True,
        )
        assert diff < 1e-9, f"{method}: fast and naive_{style} differ by {diff}"


def batch_stats(batch: dict, shape: str) -> None:
    n = len(batch["anchors"])
    pairs = set(zip(batch["groups"], batch["anchors"], strict=True))
    won = {
        (g, t)
        for g, t, r in zip(batch["groups"], batch["trajs"], batch["rewards"], strict=True)
        if r > 0
    }
    episodes = len(set(zip(batch["groups"], batch["trajs"], strict=True)))
    print(
        json.dumps(
            dict(
                what="batch_stats",
                shape=shape,
                rows=n,
                mean_anchor_chars=round(float(np.mean([len(a) for a in batch["anchors"]])), 1),
                recurring_state_fraction=round(1 - len(pairs) / n, 3),
                success_fraction=round(len(won) / episodes, 3),
                invalid_fraction=round(1 - float(np.mean(batch["valid"])), 3),
            )
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the paper's batch only")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    sizes = [(16, 20, 3)] if args.quick else [(16, 20, 3), (160, 5, 1)]
    for groups, repeats, ref_repeats in sizes:
        batch = family_batch(groups, seed=0)
        shape = f"{groups} groups x 8 episodes x 50 steps"
        batch_stats(batch, shape)
        for method in METHODS:
            run_case(method, batch, shape=shape, repeats=repeats, ref_repeats=ref_repeats)


if __name__ == "__main__":
    main()

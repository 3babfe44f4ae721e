"""The viewer's page is bounded for any rollout file, never replaces what it did not write,
and opens on something worth a look (the group and iteration with signal, a title naming
the run, GraphGPO's groups without a success said so)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from gigpo_algo import gigpo_advantages
from training.cli.view import main
from training.record_files import rollout_rows, write_rollouts
from training.viewer.html import MAX_PAGE_CHARS, MAX_STEPS_SHOWN, MAX_TRAJS_SHOWN
from training.viewer.page import build_page


def _records(
    traj: list[int],
    group: list[int],
    anchors: list[str],
    rewards: list[float],
    actions: list[str] | None = None,
    texts: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Real records: GiGPO's own advantages of these trajectories."""
    n = len(traj)
    result = gigpo_advantages(np.array(rewards), np.array(traj), np.array(group), anchors)
    return rollout_rows(
        0, group_ids=group, traj_ids=traj, rewards=np.array(rewards),
        is_action_valid=[True] * n, anchors=anchors,
        anchor_texts=texts or [f"state {a}" for a in anchors],
        observations=texts or [f"observation {i}" for i in range(n)],
        actions=actions or [f"action {i}" for i in range(n)],
        step_group_ids=result.step_group_ids, episode_advantages=result.episode_advantages,
        step_advantages=result.step_advantages, advantages=result.advantages,
        returns=result.returns,
    )  # fmt: skip


def test_a_small_file_of_long_texts_and_ragged_trajectories_gives_a_bounded_page(tmp_path):
    # one group: one trajectory of 3,000 steps beside 3,000 trajectories of one step (a grid
    # of 3,001 x 3,000 cells unbounded), every action and state 200,000 characters long
    n = 3000
    traj = [0] * n + list(range(1, n + 1))
    anchors = [f"s{i % 7}" for i in range(2 * n)]
    long = "x" * 200_000
    rows = _records(traj, [0] * (2 * n), anchors, [float(i % 2) for i in range(2 * n)],
                    actions=[long] * (2 * n), texts=[long] * (2 * n))  # fmt: skip
    run = tmp_path / "run"
    path = write_rollouts(run, 0, rows)
    assert path.stat().st_size < 1_000_000  # small on disk: it compresses to almost nothing

    page, info = build_page(run, max_chars=100)
    assert info["records"] == 2 * n
    assert len(page) <= MAX_PAGE_CHARS + 1_000_000, len(page)
    assert "x" * 101 not in page  # every text cut to --max-chars, the actions too
    assert f"the first {MAX_TRAJS_SHOWN} of {n + 1} trajectories" in page
    opened = page.split('<div id="group-view">')[1].split("<template")[0]
    assert len(re.findall(r"<tr><th>\d+</th>", opened)) == MAX_STEPS_SHOWN  # of 3,000 steps


def test_a_page_of_many_groups_stays_under_its_bound_and_says_what_it_left_out(tmp_path):
    groups, size = 4000, 4
    traj = list(range(groups * size))
    group = [t // size for t in traj]
    rows = _records(traj, group, [f"g{g}" for g in group], [float(t % 2) for t in traj],
                    texts=["y" * 20_000] * len(traj))  # fmt: skip
    write_rollouts(tmp_path / "run", 0, rows)
    page, _ = build_page(tmp_path / "run", max_chars=20_000)
    assert len(page) <= MAX_PAGE_CHARS + 1_000_000
    shown = page.count("<template data-group=")
    assert 0 < shown < groups
    assert f"{groups - shown} more groups not shown (the page's bounds)" in page


def test_the_curves_are_thinned_so_100k_metrics_rows_do_not_make_the_page(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = (json.dumps({"iteration": i, "success_rate": (i % 100) / 100, "mean_return": 0.5})
             for i in range(100_000))  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    page, _ = build_page(run)
    assert len(page) < 1_000_000, len(page)
    assert "it 99999:" in page and "it 0:" in page  # the first and the last points kept


def test_an_output_that_is_no_regular_file_is_refused_and_left_as_it_is(tmp_path, capsys):
    run = tmp_path / "run"
    write_rollouts(run, 0, _records([0, 1], [0, 0], ["a", "a"], [0.0, 1.0]))
    fifo, outside = tmp_path / "page.fifo", tmp_path / "outside.html"
    os.mkfifo(fifo)
    outside.write_text("precious")
    (tmp_path / "link.html").symlink_to(outside)
    for target, kind in ((fifo, "a FIFO"), (tmp_path / "link.html", "a symbolic link")):
        assert main([str(run), "-o", str(target)]) == 2
        assert f"it is {kind}, not a regular file" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and outside.read_text() == "precious"


def _two_iterations(run: Path) -> None:
    """Iteration 0 with signal in group 1; iteration 1 converged (every return equal)."""
    traj, group = [0, 0, 1, 1, 2, 2, 3, 3], [0, 0, 0, 0, 1, 1, 1, 1]
    anchors = ["a", "b", "a", "c", "d", "e", "d", "f"]
    write_rollouts(run, 0, _records(traj, group, anchors, [0, 0, 0, 0, 0, 1, 0, 0]))
    write_rollouts(run, 1, _records(traj, group, anchors, [0, 1, 0, 1, 0, 1, 0, 1]))
    (run / "config.json").write_text(json.dumps({
        "env": {"id": "gigpo/NumberLine-v0", "num_groups": 2, "group_size": 2},
        "algo": {"estimator": "gigpo"}, "model": {"name_or_path": "tiny"},
    }))  # fmt: skip


def test_the_page_opens_on_the_latest_iteration_and_group_with_signal(tmp_path):
    run = tmp_path / "my-run"
    _two_iterations(run)
    page, info = build_page(run)
    assert info["iteration"] == 0  # the last saved (1) has only zero advantages
    assert "Shown: iteration 0, the latest saved with nonzero step and episode advantages" in page
    assert "No group open" not in page
    opened = page.split('<div id="group-view">')[1].split("<template")[0]
    assert opened.startswith('<section class="group" data-group="1">')
    assert re.search(r'<tr class="pick open" data-group="1"', page)
    assert "<title>my-run: gigpo on NumberLine-v0</title>" in page
    page, info = build_page(run, iteration=1)  # asked for: shown as asked, no note
    assert info["iteration"] == 1 and "Shown: iteration" not in page


def test_a_graphgpo_group_without_a_success_says_why_its_distances_are_all_one(tmp_path):
    rows = _records([0, 0, 1, 1], [0, 0, 1, 1], ["a", "b", "c", "d"], [0, 0, 0, 1])
    for r, d, after in zip(rows, [1, 1, 1, 1], [1, 1, 1, 0], strict=True):
        r.update(graph_distance=d, graph_next_distance=after)
    write_rollouts(tmp_path / "run", 0, rows)
    page, _ = build_page(tmp_path / "run")
    templates = dict(re.findall(r'<template data-group="(\d)">(.*?)</template>', page, re.S))
    assert "No trajectory of this group reached the goal" in templates["0"]
    assert "No trajectory of this group reached the goal" not in templates["1"]

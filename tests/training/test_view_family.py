"""Rollout files with the next state and the GiGPO family's own values (HGPO's levels,
GraphGPO's distances to the goal): written, read back, shown by the viewer; older files
without them read and render as before."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigpo_algo.advantages import gigpo_advantages
from training.record_files import (
    NEXT_KEYS,
    RECORD_KEYS,
    RolloutFileError,
    read_rollouts,
    record_rows,
    write_rollouts,
)
from training.records import StepRecords
from training.viewer.page import build_page

# two groups: trajectories 0 and 1 (group 0) start from s0; trajectory 2 (group 1)
TRAJ = [0, 0, 1, 1, 2]
GROUP = [0, 0, 0, 0, 1]
ANCHORS = ["s0", "s1", "s0", "s2", "s0"]
NEXT = ["s1", "end-a", "s2", "end-b", "end-c"]
NEXT_TEXTS = ["state one", "<script>alert(1)</script>", None, "the end of b", "c ended"]
DISTANCES = np.array([2.0, 1.0, 2.0, np.nan, 3.0])
NEXT_DISTANCES = np.array([1.0, 0.0, 1.0, 2.0, 4.0])
# HGPO's (K, N) level arrays for K = 2: level 2 only where two trajectories share a history
LEVEL_IDS = np.array([[0, 1, 0, 2, 3], [0, -1, 0, -1, -1]])
LEVEL_SIZES = np.array([[2, 1, 2, 1, 1], [2, 0, 2, 0, 0]])
LEVEL_ADVANTAGES = np.array(
    [[0.5, np.nan, -0.5, np.nan, np.nan], [0.25, np.nan, -0.25] + [np.nan] * 2]
)


def _records(next_states: bool = True) -> StepRecords:
    records = StepRecords()
    for i, (traj, group, anchor) in enumerate(zip(TRAJ, GROUP, ANCHORS, strict=True)):
        records.append(
            reward=float(i == 1), anchor=anchor, anchor_text=f"text {anchor}", group_id=group,
            traj_id=traj, is_action_valid=i != 2, observation=f"obs {i}", action=f"act {i}",
            next_anchor=NEXT[i] if next_states else None, next_anchor_text=NEXT_TEXTS[i],
        )  # fmt: skip
    return records


def _levels() -> list[list[dict[str, Any]]]:
    """``hgpo_levels`` per row as the trainers write them: level k = 1 .. K."""
    return [
        [{"k": k + 1, "group": LEVEL_IDS[k, i], "size": LEVEL_SIZES[k, i],
          "advantage": LEVEL_ADVANTAGES[k, i]} for k in range(2)]
        for i in range(len(TRAJ))
    ]  # fmt: skip


def _rows(new: bool = True) -> list[dict[str, Any]]:
    records = _records(next_states=new)
    result = gigpo_advantages(records.rewards, TRAJ, GROUP, ANCHORS)
    extras = (
        {"hgpo_levels": _levels(), "graph_distance": DISTANCES,
         "graph_next_distance": NEXT_DISTANCES}
        if new else None
    )  # fmt: skip
    return record_rows(4, records, result, result.step_group_ids, extras=extras)


def _run(parent: Path, rows: list[dict[str, Any]]) -> Path:
    run = parent / "run"  # the same folder name: the page's title is the run's name
    write_rollouts(run, 4, rows, estimator="hgpo")
    return run


class _Cells(HTMLParser):
    """Each ``td.step`` with the attributes of every tag in it and its visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, Any]] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and "step" in (a.get("class") or "").split():
            self.cells.append({**a, "text": "", "tags": []})
            self.depth = 1
        elif self.depth:
            self.depth += tag == "td"
            self.cells[-1]["tags"].append(a)

    def handle_endtag(self, tag):
        if self.depth and tag == "td":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.cells[-1]["text"] += data


def _cells(page: str) -> dict[tuple[int, int], dict[str, Any]]:
    parsed = _Cells()
    parsed.feed(page)
    return {(int(c["data-traj"]), int(c["data-step"])): c for c in parsed.cells}


def test_rows_carry_the_next_state_and_the_extras_through_a_file(tmp_path):
    rows = _rows()
    assert all(list(r) == [*RECORD_KEYS, *NEXT_KEYS, "hgpo_levels", "graph_distance",
                           "graph_next_distance"] for r in rows)  # fmt: skip
    assert [r["next_anchor"] for r in rows] == NEXT
    assert [r["next_anchor_text"] for r in rows] == NEXT_TEXTS
    # numpy made plain, NaN made null
    assert rows[3]["graph_distance"] is None and type(rows[0]["graph_distance"]) is float
    assert rows[1]["hgpo_levels"] == [
        {"k": 1, "group": 1, "size": 1, "advantage": None},
        {"k": 2, "group": -1, "size": 0, "advantage": None},
    ]
    assert type(rows[0]["hgpo_levels"][0]["group"]) is int
    _, back = read_rollouts(write_rollouts(tmp_path, 4, rows))
    assert back == rows
    old = _rows(new=False)
    assert all(list(r) == list(RECORD_KEYS) for r in old)  # nothing recorded, nothing written


def test_bad_extras_are_clear_errors():
    records = _records()
    result = gigpo_advantages(records.rewards, TRAJ, GROUP, ANCHORS)
    groups = result.step_group_ids
    with pytest.raises(ValueError, match=r"extras\['graph_distance'\] has 2 rows, rewards has 5"):
        record_rows(0, records, result, groups, extras={"graph_distance": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"extras\['advantage'\] would replace the record key"):
        record_rows(0, records, result, groups, extras={"advantage": [0.0] * 5})
    with pytest.raises(ValueError, match=r"extras\['next_anchor'\] would replace"):
        record_rows(0, records, result, groups, extras={"next_anchor": ["x"] * 5})


def test_the_page_shows_each_steps_next_state_levels_and_distances(tmp_path):
    rows = _rows()
    page, info = build_page(_run(tmp_path, rows))
    assert info["records"] == 5
    cells = _cells(page)
    assert len(cells) == 5
    assert not re.search(r"<script>alert", page)  # the next state's text is escaped
    for r in rows:
        cell = cells[(r["traj_id"], r["step"])]
        text = cell["text"]
        # the next state: its text, or its key where it has none
        shown = r["next_anchor"] if r["next_anchor_text"] is None else r["next_anchor_text"]
        assert f"next state{shown}" in text
        graph = next(t for t in cell["tags"] if "data-graph-d" in t)
        assert graph["data-graph-d"] == repr(r["graph_distance"])
        assert graph["data-graph-next-d"] == repr(r["graph_next_distance"])
        d = "n/a" if r["graph_distance"] is None else f"{r['graph_distance']:g}"
        assert f"to goal {d} \u2192 {r['graph_next_distance']:g}" in text
        levels = [t for t in cell["tags"] if "data-k" in t]
        assert [int(t["data-k"]) for t in levels] == [1, 2]
        for level, tag in zip(r["hgpo_levels"], levels, strict=True):
            assert int(tag["data-hgpo-group"]) == level["group"]
            assert int(tag["data-size"]) == level["size"]
            if level["size"]:
                expected = f"k{level['k']} g{level['group']} \u00d7{level['size']} A "
                adv = level["advantage"]
                assert expected + ("n/a" if adv is None else f"{adv:+.3f}") in text
            else:
                assert f"k{level['k']} \u2013" in text
    # trajectory 0's first step: level 1 and 2 groups shared with trajectory 1
    assert "k1 g0 \u00d72 A +0.500" in cells[(0, 0)]["text"]
    assert "k2 g0 \u00d72 A +0.250" in cells[(0, 0)]["text"]


def test_an_older_file_renders_as_before(tmp_path):
    old_page, _ = build_page(_run(tmp_path / "old", _rows(new=False)))
    new_page, _ = build_page(_run(tmp_path / "new", _rows()))
    for marker in ("next state", "data-graph-d", "data-hgpo-group", "HGPO", "to goal"):
        assert marker not in old_page and marker in new_page
    # the new file's page is the old one's plus the new parts, in each step
    added = (
        r'<div class="nums graph".*?</div>',
        r'<div class="nums hgpo".*?</div>',
        r"<details><summary>next state</summary>.*?</details>",
    )
    # GraphGPO's groups with no success say so (its distances then carry no signal)
    stripped = re.sub(r'<p class="hint graph-no-goal">.*?</p>', "", new_page, flags=re.S)
    cells = new_page.count('<td class="step ')
    assert cells == 5 + 4  # 5 records, and the 4 of the group the page opens on
    for pattern in added:
        stripped, count = re.subn(pattern, "", stripped, flags=re.S)
        assert count == cells
    assert stripped == old_page


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("next_anchor", 5),
        ("next_anchor_text", ["a"]),
        ("graph_distance", "far"),
        ("graph_next_distance", 10**400),
        ("hgpo_levels", "k1"),
        ("hgpo_levels", [{"k": 1, "group": 0, "size": -1, "advantage": 0.0}]),
        ("hgpo_levels", [{"k": 1, "group": 0, "size": 2, "advantage": "big"}]),
        ("hgpo_levels", [{"k": True, "group": 0, "size": 2, "advantage": None}]),
    ],
)
def test_an_optional_field_the_page_cannot_show_is_a_named_error(tmp_path, key, value):
    rows = _rows()
    rows[1] = {**rows[1], key: value}  # the second record: line 3
    run = _run(tmp_path, rows)
    message = (
        "line 3: next_anchor\\(_text\\) must be a string"
        if key in NEXT_KEYS
        else "line 3: an integer of 401 digits"  # refused as parsed (training.guarded)
        if value == 10**400
        else f"line 3: {key} must be"
    )
    with pytest.raises(RolloutFileError, match=message):
        build_page(run)

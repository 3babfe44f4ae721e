"""Rollout records on disk, the HTML viewer built from a real run, and TensorBoard scalars."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from gigpo_algo.advantages import gigpo_advantages
from training.cli.view import main
from training.local.metrics import read_metrics
from training.local.train import train
from training.openrlhf.estimator import (
    GiGPOSettings,
    batch_advantages,
    rollout_records,
    save_rollouts,
)
from training.openrlhf.executor import record_step
from training.openrlhf.spans import turn_columns
from training.openrlhf.turns import SampleTurns
from training.record_files import (
    RECORD_KEYS,
    RolloutFileError,
    bound_text,
    prune_rollouts,
    read_rollouts,
    rollout_files,
    rollout_path,
    rollout_rows,
    write_rollouts,
)
from training.records import StepRecords
from training.viewer.page import build_page

SOKOBAN = ["--env.kwargs={dim_room: [6, 6], num_boxes: 1, max_steps: 3}"]


# ----------------------------------------------------------------------------- the schema
def _columns():
    # two groups; trajectories 0, 1 (group 0) and 2 (group 1); rows in time order
    rewards = np.array([0.0, 1.0, 0.0, 0.0, 0.5])
    traj = np.array([0, 0, 1, 1, 2])
    group = np.array([0, 0, 0, 0, 1])
    anchors = ["s0", "s1", "s0", "s2", "s0"]
    result = gigpo_advantages(rewards, traj, group, anchors)
    return dict(
        group_ids=group,
        traj_ids=traj,
        rewards=rewards,
        is_action_valid=[True, True, False, True, True],
        anchors=anchors,
        anchor_texts=["start", "middle", "start", None, "start"],
        observations=["look", "x" * 30, "look", "y", "look"],
        actions=["<action>go</action>", "win", "???", "go", "go"],
        step_group_ids=result.step_group_ids,
        episode_advantages=result.episode_advantages,
        step_advantages=result.step_advantages,
        advantages=result.advantages,
        returns=result.returns,
    ), result


def test_records_round_trip_through_a_file(tmp_path):
    columns, result = _columns()
    rows = rollout_rows(7, max_chars=10, **columns)
    assert [r["step"] for r in rows] == [0, 1, 0, 1, 0]  # position in the trajectory
    assert rows[1]["observation"] == "x" * 10 + " ... [+20 chars]"
    assert rows[3]["anchor_text"] is None and rows[2]["is_action_valid"] is False
    assert [r["advantage"] for r in rows] == list(result.advantages)
    assert all(list(r) == list(RECORD_KEYS) for r in rows)
    assert all(type(r["group_id"]) is int and type(r["reward"]) is float for r in rows)
    path = write_rollouts(tmp_path, 7, rows, estimator="gigpo", max_chars=10)
    assert path == rollout_path(tmp_path, 7) == tmp_path / "rollouts" / "iteration_000007.jsonl.gz"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    header, back = read_rollouts(path)
    assert back == rows
    assert header["records"] == 5 and header["iteration"] == 7 and header["estimator"] == "gigpo"
    assert rollout_files(tmp_path) == {7: path}
    with pytest.raises(ValueError, match="rollout column actions has 1 rows, rewards has 5"):
        rollout_rows(0, **{**columns, "actions": ["a"]})


def test_bound_text():
    assert bound_text("abc", 3) == "abc" and bound_text("abcd", 0) == "abcd"
    assert bound_text("abcdef", 2) == "ab ... [+4 chars]" and bound_text(None, 5) == ""


def _write_raw(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def test_damaged_files_are_named_errors(tmp_path):
    columns, _ = _columns()
    rows = rollout_rows(0, **columns)
    good = read_rollouts(write_rollouts(tmp_path, 0, rows))[0]
    header = json.dumps(good)
    cases = {
        "missing.jsonl.gz": (None, "no rollout file"),
        "plain.jsonl.gz": ("not gzip", "not a readable gzip"),
        "version.jsonl.gz": ([json.dumps({**good, "version": 99})], "version 99"),
        "count.jsonl.gz": ([header, json.dumps(rows[0])], "header says 5 records"),
        "key.jsonl.gz": ([json.dumps({**good, "records": 1}), "{}"], "record lacks"),
        "type.jsonl.gz": (
            [json.dumps({**good, "records": 1}), json.dumps({**rows[0], "reward": "1"})],
            "reward must be a number",
        ),
        "json.jsonl.gz": ([header, "{cut"], "line 2 is not valid JSON"),
        "empty.jsonl.gz": ([""], "line 1 is not valid JSON"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / "bad" / name
        if isinstance(content, str):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        elif content is not None:
            _write_raw(path, content)
        with pytest.raises(RolloutFileError, match=message) as caught:
            read_rollouts(path)
        assert name in str(caught.value)


def test_prune_on_resume(tmp_path):
    columns, _ = _columns()
    for iteration in (0, 2, 4):
        write_rollouts(tmp_path, iteration, rollout_rows(iteration, **columns))
    (tmp_path / "rollouts" / "notes.txt").write_text("kept")
    assert prune_rollouts(tmp_path, completed=2) == [2, 4]
    assert list(rollout_files(tmp_path)) == [0]
    assert (tmp_path / "rollouts" / "notes.txt").exists()


# ----------------------------------------------------------------------------- OpenRLHF path
def _episode(group, traj, rewards, anchors, texts=True):
    k = len(rewards)
    return SampleTurns(
        group=group,
        traj=traj,
        rewards=rewards,
        anchors=anchors,
        anchor_texts=[None] * k,
        is_action_valid=[True] * k,
        action_ranges=[(10 * i + 2, 10 * i + 7) for i in range(k)],
        sequence_length=10 * k,
        max_len=10 * k,
        observations=[f"obs {traj} {i}" for i in range(k)] if texts else [],
        actions=[f"act {traj} {i}" for i in range(k)] if texts else [],
    )


def test_openrlhf_records_carry_the_trained_values(tmp_path):
    batch = [
        [_episode("g", "a", [0.0, 1.0], ["s0", "s1"]), _episode("g", "b", [0.0], ["s0"])],
        [_episode("h", "c", [0.5, 0.0], ["t0", "t0"], texts=False)],
    ]
    settings = GiGPOSettings(
        step_weight=0.5, save_rollouts_every=2, rollouts_dir=str(tmp_path), rollout_max_chars=5
    )
    rows = rollout_records(batch, settings, iteration=3)
    advantages, _ = batch_advantages(batch, [(2, 20), (1, 20)], settings)
    # each turn's value is what its tokens train on (the first token of each action range)
    trained = []
    for experience, values in zip(batch, advantages, strict=True):
        for row, ep in enumerate(experience):
            columns = turn_columns(ep.action_ranges, ep.sequence_length, ep.max_len)
            trained += [values[row, start] for start, _ in columns]
    assert [r["advantage"] for r in rows] == pytest.approx(trained)
    assert [(r["group_id"], r["traj_id"], r["step"]) for r in rows] == [
        ("g", "a", 0), ("g", "a", 1), ("g", "b", 0), ("h", "c", 0), ("h", "c", 1),
    ]  # fmt: skip
    assert rows[0]["observation"] == "obs a ... [+2 chars]" and rows[3]["action"] == ""
    # the first rollout of states s0 in group g forms one step group of size 2
    assert rows[0]["step_group_id"] == rows[2]["step_group_id"] != rows[1]["step_group_id"]
    # written on training steps 0, 2, 4, ... of the process
    from training.openrlhf import estimator

    estimator._STEPS_SEEN[0] = 0
    written = [save_rollouts(batch, settings) for _ in range(5)]
    assert [p is not None for p in written] == [True, False, True, False, True]
    assert list(rollout_files(tmp_path)) == [0, 2, 4]
    header, back = read_rollouts(written[2])
    assert header["source"] == "openrlhf" and len(back) == 5
    quiet = GiGPOSettings()
    assert save_rollouts(batch, quiet) is None


def test_executor_records_texts_only_when_rollouts_are_saved():
    info = {"anchor": "s", "anchor_text": None, "raw_observation": "a long observation"}
    samples = []
    for text_chars in (4, None):  # saving rollouts (texts bounded to 4 characters), or not
        steps = StepRecords()
        after = {"is_action_valid": True, "anchor": "s2", "anchor_text": "state two"}
        record_step(steps, info, 1.0, after, "act", group="g", traj="t",
                    text_chars=text_chars, truncated=False)  # fmt: skip
        samples.append(SampleTurns.from_steps(
            steps, [(0, 3)], group="g", traj="t", sequence_length=3, max_len=100, won=False,
            budget_ended=False,
        ))  # fmt: skip
    on, off = samples
    assert on.observations == ["a lo ... [+14 chars]"]
    assert on.actions == ["act"]
    assert off.observations == [] and off.actions == []
    # the next state is recorded either way: GraphGPO reads it
    assert on.next_anchors == off.next_anchors == ["s2"]
    assert on.next_anchor_texts == off.next_anchor_texts == ["state two"]
    restored = SampleTurns.from_dict(on.to_dict())
    assert restored.observations == ["a lo ... [+14 chars]"]
    with pytest.raises(ValueError, match="observations"):
        SampleTurns(
            group="g", traj="t", rewards=[1.0], anchors=["s"], anchor_texts=[None],
            is_action_valid=[True], action_ranges=[(1, 2)], observations=["a", "b"],
        )  # fmt: skip


# ----------------------------------------------------------------------------- a real run
class _Cells(HTMLParser):
    """Collects, per ``<template data-group>``, the ``td.step`` cells with their visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.templates: dict[str, list[dict]] = {}
        self.group: str | None = None
        self.cell: dict | None = None
        self.depth = 0
        self.stats: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "template":
            self.group = a["data-group"]
            self.templates[self.group] = []
        elif tag == "td" and "step" in a.get("class", "").split() and self.group is not None:
            self.cell = {**a, "text": ""}
            self.depth = 1
        elif tag == "td" and self.cell is not None:
            self.depth += 1
        elif tag == "tr" and "data-iteration" in a:
            self.stats.append({"iteration": int(a["data-iteration"]), "cells": []})

    def handle_endtag(self, tag):
        if tag == "template":
            self.group = None
        elif tag == "td" and self.cell is not None:
            self.depth -= 1
            if self.depth == 0:
                self.templates[self.group].append(self.cell)
                self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data
        elif self.stats and self.group is None and len(self.stats[-1]["cells"]) < 8:
            self.stats[-1]["cells"].append(data)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, tiny_model_dir):
    from training.local.config import load_config

    out = tmp_path_factory.mktemp("viewrun") / "run"
    config = load_config(
        None,
        [
            f"--model.name_or_path={tiny_model_dir}", "--env.id=gigpo/Sokoban-v0", *SOKOBAN,
            "--env.num_groups=2", "--env.group_size=3", "--eval.groups=2",
            "--rollout.max_new_tokens=10", "--algo.minibatch_size=9", "--optim.lr=1e-3",
            "--run.iterations=2", "--eval.every=2", "--run.progress=false",
            "--run.threads=1", "--run.report_to=tensorboard", f"--out={out}",
        ],
    )  # fmt: skip
    train(config)
    return out


def test_short_run_saves_rollouts_the_page_shows(short_run):
    files = rollout_files(short_run)
    assert list(files) == [0, 1]
    header, records = read_rollouts(files[1])
    metrics = read_metrics(short_run)
    assert header["records"] == metrics[1]["step_records"] == len(records)
    assert {r["group_id"] for r in records} == {0, 1}
    assert all(r["observation"].count("\n") == 5 for r in records)  # the 6x6 room
    page, info = build_page(short_run)
    assert info == {"iteration": 1, "records": len(records), "iterations_saved": [0, 1]}
    parsed = _Cells()
    parsed.feed(page)
    assert sorted(parsed.templates) == ["0", "1"]
    shown = {}
    for group, cells in parsed.templates.items():
        for cell in cells:
            shown[(int(group), int(cell["data-traj"]), int(cell["data-step"]))] = cell
    assert len(shown) == len(records)
    sizes = Counter((r["group_id"], r["step_group_id"]) for r in records)
    labels = defaultdict(set)
    for r in records:
        cell = shown[(r["group_id"], r["traj_id"], r["step"])]
        assert float(cell["data-a-e"]) == r["episode_advantage"]
        assert float(cell["data-a-s"]) == r["step_advantage"]
        assert float(cell["data-a"]) == r["advantage"]
        assert float(cell["data-reward"]) == r["reward"]
        assert int(cell["data-valid"]) == r["is_action_valid"]
        assert int(cell["data-step-group"]) == r["step_group_id"]
        # the visible numbers are the records' (3 decimals, signed)
        assert f"A_S {r['step_advantage']:+.3f}" in cell["text"]
        assert f"A_E {r['episode_advantage']:+.3f}" in cell["text"]
        assert f"A {r['advantage']:+.3f}" in cell["text"]
        assert ("invalid" in cell["text"]) == (not r["is_action_valid"])
        # the state the step led to: the next step's state, or where the episode ended
        later = [n for n in records if (n["traj_id"], n["step"]) == (r["traj_id"], r["step"] + 1)]
        assert not later or later[0]["anchor"] == r["next_anchor"]
        assert f"next state{r['next_anchor_text']}" in cell["text"]
        # a step group of two or more records gets a label, the same one for all of them
        if sizes[(r["group_id"], r["step_group_id"])] >= 2:
            assert cell["data-label"].startswith("S") and cell["data-label"] in cell["text"]
            labels[(r["group_id"], r["step_group_id"])].add(cell["data-label"])
        else:
            assert cell["data-label"] == ""
    assert labels and all(len(v) == 1 for v in labels.values())
    for group in (0, 1):  # distinct step groups of one group get distinct labels
        own = [next(iter(v)) for (g, _), v in labels.items() if g == group]
        assert len(own) == len(set(own))
    # the per-iteration table: coverage of the records in groups of size >= 2
    for row in parsed.stats:
        _, rows = read_rollouts(files[row["iteration"]])
        counts = Counter((r["group_id"], r["step_group_id"]) for r in rows)
        covered = sum(counts[(r["group_id"], r["step_group_id"])] >= 2 for r in rows)
        assert f"{100 * covered / len(rows):.1f}%" in row["cells"]


def test_tensorboard_holds_every_metric(short_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(short_run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for row in read_metrics(short_run):
        for key, value in row.items():
            if key == "iteration" or not isinstance(value, int | float):
                continue
            assert key in tags, key
            steps = {e.step: e.value for e in events.Scalars(key)}
            assert steps[row["iteration"]] == pytest.approx(value, rel=1e-6, abs=1e-6), key
    assert "eval_success_rate" in tags and "estimator" not in tags
    assert [e.step for e in events.Scalars("success_rate")] == [0, 1]


def test_one_iteration_numbering_in_metrics_rollouts_tensorboard_and_the_page(short_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from training.study.report import summarize_run

    events = EventAccumulator(str(short_run / "tensorboard"))
    events.Reload()
    numbers = [r["iteration"] for r in read_metrics(short_run)]
    assert numbers == [0, 1]  # run.iterations: 2, numbered from 0
    assert list(rollout_files(short_run)) == numbers
    assert [e.step for e in events.Scalars("success_rate")] == numbers
    page, _ = build_page(short_run)
    assert all(f"train it {n}:" in page for n in numbers) and "train it 2:" not in page
    assert summarize_run(short_run)["curve"]["iteration"] == numbers


def test_resume_keeps_one_event_and_one_file_per_iteration(tiny_config, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "resumed"
    args = ("gigpo/Sokoban-v0", *SOKOBAN, "--run.report_to=tensorboard")
    train(tiny_config(*args, "--run.iterations=1", out=out))
    # as after a crash past the checkpoint: a later iteration's file is on disk
    columns, _ = _columns()
    write_rollouts(out, 1, rollout_rows(1, **columns))
    train(tiny_config(*args, "--run.iterations=2", out=out))
    assert list(rollout_files(out)) == [0, 1]
    assert read_rollouts(rollout_files(out)[1])[0]["estimator"] == "gigpo"  # rewritten
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert sorted(e.step for e in events.Scalars("success_rate")) == [0, 1]


def test_viewer_command_line(short_run, tmp_path):
    output = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "training.cli.view", str(short_run), "-o", str(output),
         "--iteration", "0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "iteration 0" in done.stdout and output.stat().st_size > 10_000
    text = output.read_text()
    assert 'data-iteration="0"' in text and "http://" not in text.replace("http://127", "")
    assert main([str(short_run), "--iteration", "9", "-o", str(output)]) == 2
    assert main([str(tmp_path / "nothing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 2


def test_viewer_names_a_damaged_file(short_run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(short_run, copy, ignore=shutil.ignore_patterns("checkpoint", "tiny-model"))
    path = rollout_files(copy)[1]
    path.write_bytes(path.read_bytes()[:40])
    assert main([str(copy)]) == 2
    assert path.name in capsys.readouterr().err

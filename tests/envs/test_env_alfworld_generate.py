"""The ALFWorld game generator: layout, every task type, determinism, AlfredTWEnv, CLI."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sample_data import sample_dir

import gigpo_envs
from gigpo_envs.alfworld import TASK_TYPES, find_games
from gigpo_envs.alfworld.generate import generate_games
from gigpo_envs.alfworld.problem import sample_scene
from gigpo_envs.alfworld.rooms import ROOM_KINDS, TASK_ROOMS

PACKAGE_ROOT = str(Path(gigpo_envs.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("alfworld_generated")
    return out, generate_games(out, num_games=len(TASK_TYPES) + 1, seed=5)


def _alfred_tw_env_games(data_path: Path) -> list[str]:
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": list(range(1, 7))},
        "dataset": {"data_path": str(data_path), "num_train_games": -1},
    }
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return AlfredTWEnv(config, train_eval="train").game_files


def test_layout_and_every_task_type(generated):
    out, games = generated
    assert [g.task_type for g in games] == [*TASK_TYPES, TASK_TYPES[0]]
    for game in games:
        path = out / game.path
        parts = Path(game.path).parts
        assert parts[:2] == ("json_2.1.1", "train") and parts[-1] == "game.tw-pddl"
        assert parts[2].startswith(game.task_type + "-")
        data = json.loads(path.read_text())
        assert data["solvable"] is True
        assert set(data) == {"pddl_domain", "pddl_problem", "grammar", "solvable"}
        assert "UNKNOWN GOAL" not in data["grammar"]
        traj = json.loads((path.parent / "traj_data.json").read_text())
        assert traj["task_type"] == game.task_type
        params = traj["pddl_params"]
        assert params["object_target"] in parts[2] and params["object_sliced"] is False
        assert traj["turk_annotations"]["anns"][0]["task_desc"]
        assert game.room in TASK_ROOMS[game.task_type]
        assert 1 <= game.expert_steps <= 50
        # ALFRED-style ids, so that alfworld's demangler names them "desk 1"
        declared = data["pddl_problem"].split("(:objects", 1)[1].split("(:init", 1)[0]
        for line in declared.splitlines():
            if line.strip().endswith(("- object", "- receptacle")):
                assert "_bar__" in line, line
    assert find_games(out) == sorted(g.path for g in games)


def test_alfred_tw_env_loads_every_generated_game(generated):
    out, games = generated
    listed = _alfred_tw_env_games(out / "json_2.1.1" / "train")
    assert sorted(
        Path(f).resolve().relative_to(out.resolve()).as_posix() for f in listed
    ) == sorted(g.path for g in games)


def test_alfred_tw_env_loads_the_sample_game():
    base = sample_dir("alfworld", "json_2.1.1")
    listed = _alfred_tw_env_games(base / "json_2.1.1" / "train")
    assert len(listed) == 1 and listed[0].endswith("trial_T0/game.tw-pddl")


def test_same_seed_same_files_other_seed_other_games(generated, tmp_path):
    out, games = generated
    again = generate_games(tmp_path / "again", num_games=2, seed=5)
    assert again == games[:2]
    for game in again:
        for name in ("game.tw-pddl", "traj_data.json"):
            first = (out / game.path).parent / name
            assert (
                (tmp_path / "again" / game.path).parent / name
            ).read_bytes() == first.read_bytes()
    other = generate_games(tmp_path / "other", num_games=2, seed=6)
    assert [g.path for g in other] != [g.path for g in games[:2]]


def test_sampled_scenes_are_plausible():
    import alfworld.gen.constants as constants

    rooms_seen = set()
    for index in range(240):
        task_type = TASK_TYPES[index % len(TASK_TYPES)]
        scene = sample_scene(np.random.default_rng([3, index]), task_type)
        rooms_seen.add(scene.room)
        room = ROOM_KINDS[scene.room]
        assert scene.room in TASK_ROOMS[task_type]
        assert room.scene_base < scene.scene_num <= room.scene_base + 30
        kinds = {rid: kind for rid, kind in scene.receptacles}
        assert {kind for kind in kinds.values()} <= {k for k, _, _ in room.receptacles}
        for _, obj_type, rid in scene.objects:
            if obj_type == "DeskLamp":
                assert kinds[rid] in room.lamp_holders
            else:
                assert obj_type in constants.VAL_RECEPTACLE_OBJECTS[kinds[rid]]
        targets = [rid for _, t, rid in scene.objects if t == scene.object_target]
        assert len(targets) >= (2 if task_type == "pick_two_obj_and_place" else 1)
        if scene.parent_target:  # the object starts somewhere else than where it must go
            assert all(kinds[rid] != scene.parent_target for rid in targets)
        tool = {
            "pick_clean_then_place_in_recep": "SinkBasin",
            "pick_heat_then_place_in_recep": "Microwave",
            "pick_cool_then_place_in_recep": "Fridge",
        }.get(task_type)
        if tool:
            assert tool in kinds.values() and scene.parent_target != tool
    assert rooms_seen == set(ROOM_KINDS)


def test_bad_arguments_raise(tmp_path):
    for kwargs in (
        {"num_games": 0},
        {"num_games": 1, "seed": -1},
        {"num_games": 1, "split": "test"},
        {"num_games": 1, "task_types": ["pick_and_fly"]},
        {"num_games": 1, "max_expert_steps": 0},
    ):
        with pytest.raises(ValueError):
            generate_games(tmp_path, **kwargs)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        generate_games(tmp_path / "file", num_games=1)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gigpo_envs.alfworld.generate", *args],
        capture_output=True,
        text=True,
        cwd=PACKAGE_ROOT,
    )


def test_cli_writes_games_and_rejects_bad_arguments(tmp_path):
    done = _cli(
        "--out", str(tmp_path), "--num-games", "1", "--seed", "3",
        "--task-types", "pick_cool_then_place_in_recep", "--split", "valid_seen",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert lines[-1]["games"] == 1
    assert lines[-1]["task_types"] == {"pick_cool_then_place_in_recep": 1}
    assert find_games(tmp_path, split="valid_seen") == [lines[0]["path"]]
    for bad in (["--num-games", "0"], ["--num-games", "2", "--task-types", "fly"]):
        failed = _cli("--out", str(tmp_path / "bad"), *bad)
        assert failed.returncode == 2 and "Traceback" not in failed.stderr
        assert "error:" in failed.stderr

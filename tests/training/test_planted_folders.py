"""Folders a command writes into, planted as links, files or FIFOs: refused by name, never
written through, deleted through or waited on (docs/security.md, "Planted files").

Each case plants the thing in a real run, study or tiny-model folder and runs the real
command or function; the link's target holds a file that must still be there, unchanged,
afterwards."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from training.files import UnsafeFileError, own_folder, remove_tree
from training.local.__main__ import main as train_main
from training.local.checkpoint import find_checkpoint, recover_checkpoint
from training.local.resume import RUN_FOLDERS
from training.record_files import write_rollouts

from .exit_codes import exit_code


def _target(tmp_path: Path) -> Path:
    """A folder outside every run, holding one file a write through a link would touch."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("mine\n")
    return target


def _untouched(target: Path) -> None:
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "mine\n"


def _plant(path: Path, what: str, target: Path) -> None:
    if what == "link":
        path.symlink_to(target, target_is_directory=True)
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("not a folder\n")


# ----------------------------------------------------------------------------- the helpers


@pytest.mark.timeout(30)
@pytest.mark.parametrize("what", ["link", "fifo", "file"])
def test_remove_tree_refuses_what_is_no_real_folder_and_leaves_it(tmp_path, what):
    target = _target(tmp_path)
    planted = tmp_path / "checkpoint.tmp"
    _plant(planted, what, target)
    with pytest.raises(UnsafeFileError, match=re.escape(str(planted))):
        remove_tree(planted)  # shutil.rmtree would open a FIFO and wait on it
    assert os.path.lexists(planted)
    _untouched(target)
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    (real / "inner" / "link").symlink_to(target)  # a link inside is unlinked, not followed
    remove_tree(real)
    assert not real.exists()
    _untouched(target)


def test_own_folder_refuses_a_link_at_any_level(tmp_path):
    target = _target(tmp_path)
    run = tmp_path / "run"
    (run / "a").mkdir(parents=True)
    (run / "a" / "b").symlink_to(target, target_is_directory=True)
    with pytest.raises(UnsafeFileError, match=r"a[/\\]b is a symbolic link, not a folder"):
        own_folder(run, "a", "b", "c")
    _untouched(target)
    assert own_folder(run, "a", "d", "e") == run / "a" / "d" / "e"
    assert (run / "a" / "d" / "e").is_dir()


# ----------------------------------------------------------------------------- the trainer


def _train_argv(tiny_model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"--model.name_or_path={tiny_model_dir}", "--env.id=gigpo/NumberLine-v0",
        "--env.kwargs={max_position: 3, max_steps: 2}", "--env.num_groups=1",
        "--env.group_size=2", "--eval.groups=1", "--rollout.max_new_tokens=4",
        "--algo.minibatch_size=4", "--run.iterations=1", "--run.progress=false",
        "--run.threads=1", f"--out={out}", *extra,
    ]  # fmt: skip


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", RUN_FOLDERS)
@pytest.mark.parametrize("what", ["link", "fifo"])
def test_a_run_folder_with_a_planted_subfolder_is_refused_before_anything_is_written(
    tmp_path, tiny_model_dir, capsys, name, what
):
    target = _target(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    _plant(out / name, what, target)
    assert exit_code(train_main, _train_argv(tiny_model_dir, out)) == 2
    err = capsys.readouterr().err
    assert f"{out / name} is a " in err and "Traceback" not in err, err
    _untouched(target)
    # nothing of the run was written: no config, no metrics, only the lock and kind files
    assert not (out / "config.json").exists() and not (out / "metrics.jsonl").exists()


@pytest.mark.timeout(600)
def test_a_resumed_run_whose_tensorboard_became_a_link_writes_no_events_through_it(
    tmp_path, tiny_model_dir, capsys
):
    out = tmp_path / "run"
    argv = _train_argv(tiny_model_dir, out, "--run.report_to=[tensorboard]")
    assert exit_code(train_main, argv) == 0
    assert any((out / "tensorboard").iterdir())
    target = _target(tmp_path)
    os.rename(out / "tensorboard", tmp_path / "old-events")
    (out / "tensorboard").symlink_to(target, target_is_directory=True)
    assert exit_code(train_main, [*argv, "--run.iterations=2"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'tensorboard'} is a symbolic link, not a folder" in err, err
    _untouched(target)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["checkpoint", "checkpoint.tmp", "checkpoint.old"])
@pytest.mark.parametrize("what", ["link", "fifo", "file"])
def test_resume_leftovers_that_are_no_folder_are_named_never_waited_on(tmp_path, name, what):
    target = _target(tmp_path)
    (target / "state.json").write_text("{}")  # a link would offer this as a checkpoint
    out = tmp_path / "run"
    out.mkdir()
    _plant(out / name, what, target)
    for call in (find_checkpoint, recover_checkpoint):
        with pytest.raises(UnsafeFileError, match=re.escape(f"{out / name} is a")):
            call(out)
    assert os.path.lexists(out / name)
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt", "state.json"]


def test_rollout_files_are_never_written_through_a_planted_rollouts_link(tmp_path):
    target = _target(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts").symlink_to(target, target_is_directory=True)
    with pytest.raises(UnsafeFileError, match="rollouts is a symbolic link"):
        write_rollouts(run, 0, [])
    _untouched(target)


def test_the_tensorboard_writer_and_the_wandb_run_refuse_a_planted_link(tmp_path, monkeypatch):
    from training.local.config import load_config
    from training.local.tensorboard import ScalarLog
    from training.local.trackers import WandbTracker

    target = _target(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("tensorboard", "wandb"):
        (run / name).symlink_to(target, target_is_directory=True)
    with pytest.raises(UnsafeFileError, match="tensorboard is a symbolic link"):
        ScalarLog(run, 0, True)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = load_config(None, [f"--out={run}", "--run.report_to=[wandb]"], check_files=False)
    with pytest.raises(UnsafeFileError, match="wandb is a symbolic link"):
        WandbTracker(config, run, "abc123")
    _untouched(target)


def test_a_tiny_model_is_never_rebuilt_through_a_planted_link(tmp_path):
    from training.tiny_model import build_tiny_model

    target = _target(tmp_path)
    link = tmp_path / "run" / "tiny-model"
    link.parent.mkdir()
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(UnsafeFileError, match="tiny-model is a symbolic link"):
        build_tiny_model(link, hidden_size=32, num_layers=1, vocab_size=300)
    _untouched(target)
    assert not any(p.name.startswith(".tiny-model.tmp") for p in link.parent.iterdir())


# ----------------------------------------------------------------------------- a study


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["models", "runs"])
def test_a_study_never_builds_or_trains_inside_a_planted_link(tmp_path, capsys, name):
    from training.cli.study import main as study_main

    config = tmp_path / "tiny_random.yaml"
    config.write_text(
        "model: {name_or_path: tiny-random}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 2}\n"
        "  num_groups: 1\n  group_size: 2\n  history_length: 0\n  heldout_fraction: 0.25\n"
        "rollout: {max_new_tokens: 2}\neval: {groups: 1, every: 2}\n"
        "algo: {minibatch_size: 4}\nrun: {iterations: 2, checkpoint_every: 0}\n"
    )
    target = _target(tmp_path)
    out = tmp_path / "study"
    out.mkdir()
    (out / name).symlink_to(target, target_is_directory=True)
    argv = ["--config", str(config), "--estimators", "grpo", "--seeds", "0", "--out", str(out)]
    assert exit_code(study_main, argv) == 2
    err = capsys.readouterr().err
    assert f"{out / name} is a symbolic link, not a folder" in err, err
    assert "Traceback" not in err
    _untouched(target)

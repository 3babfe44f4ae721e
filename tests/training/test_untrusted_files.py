"""What is planted in a run folder is never written through, replaced or waited on: writes
create their temporary file exclusively and refuse a target that is no regular file; reads
refuse anything but a regular file at once (a FIFO never hangs them); a command's folder is
its own (no other command writes inside a run's checkpoint or tiny model)."""

from __future__ import annotations

import gzip
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.files import (
    UnsafeFileError,
    atomic_write_text,
    open_append,
    open_regular,
)
from training.folders import KIND_FILE
from training.guarded import GuardError, read_json_file, read_json_lines
from training.locks import FolderKindError, FolderLockError, folder_kind, hold_folder
from training.record_files import RolloutFileError, read_rollouts, read_summary


def _bounded(call: Callable[[], Any], seconds: float = 10.0) -> BaseException | None:
    """Runs ``call`` in a daemon thread; fails the test if it has not returned within
    ``seconds`` (a read that waits on a FIFO never returns). Returns what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "it hung (waiting on the FIFO)"
    return raised[0] if raised else None


# ----------------------------------------------------------------------------- writes


def test_a_symlink_planted_at_any_temporary_name_is_never_written_through(tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    # every name the old writer would have used (".NAME.tmpPID", PIDs near ours) is a link
    for pid in range(max(1, os.getpid() - 50), os.getpid() + 50):
        (run / f".config.json.tmp{pid}").symlink_to(outside)
    atomic_write_text(run / "config.json", "{}\n")
    assert outside.read_text() == "precious"
    assert (run / "config.json").read_text() == "{}\n"
    assert stat.S_ISREG(os.lstat(run / "config.json").st_mode)
    assert oct(os.stat(run / "config.json").st_mode & 0o777) != oct(0o600)  # as open() gives


@pytest.mark.parametrize("planted", ["fifo", "symlink", "folder"])
def test_a_target_that_is_no_regular_file_is_refused_never_replaced(tmp_path, planted):
    target, outside = tmp_path / "page.html", tmp_path / "outside.html"
    outside.write_text("precious")
    if planted == "fifo":
        os.mkfifo(target)
    elif planted == "symlink":
        target.symlink_to(outside)
    else:
        target.mkdir()
    kind = {"fifo": "a FIFO", "symlink": "a symbolic link", "folder": "a folder"}[planted]
    with pytest.raises(UnsafeFileError, match=f"page.html is {kind}, not a regular file"):
        atomic_write_text(target, "<html>")
    assert outside.read_text() == "precious"
    mode = os.lstat(target).st_mode
    assert {"fifo": stat.S_ISFIFO, "symlink": stat.S_ISLNK, "folder": stat.S_ISDIR}[planted](mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftover


def test_an_append_never_follows_a_planted_link_or_waits_on_a_fifo(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    (tmp_path / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        open_append(tmp_path / "metrics.jsonl")
    assert outside.read_text() == "precious\n"
    os.mkfifo(tmp_path / "train.log")
    raised = _bounded(lambda: open_append(tmp_path / "train.log"))
    assert isinstance(raised, OSError)  # no reader: refused at once, never a hang
    with open_append(tmp_path / "new.jsonl") as handle:
        handle.write(b"row\n")
    assert (tmp_path / "new.jsonl").read_bytes() == b"row\n"


# ----------------------------------------------------------------------------- reads


def _run_with_fifo(tmp_path: Path, name: str) -> Path:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    if name != KIND_FILE:
        (run / KIND_FILE).write_text(json.dumps({"kind": "train"}))
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "name, read, error",
    [
        ("config.json", lambda p: read_json_file(p, "run file"), GuardError),
        ("metrics.jsonl", lambda p: list(read_json_lines(p, "metrics file")), GuardError),
        ("rollouts/iter_000000.jsonl.gz", read_rollouts, RolloutFileError),
        ("rollouts/iter_000001.jsonl.gz", read_summary, RolloutFileError),
        (KIND_FILE, lambda p: folder_kind(p.parent), FolderKindError),
    ],
)
def test_a_fifo_in_place_of_a_file_read_back_is_a_named_error_not_a_hang(
    tmp_path, name, read, error
):
    path = _run_with_fifo(tmp_path, name)
    raised = _bounded(lambda: read(path))
    assert isinstance(raised, error), raised
    assert "is a FIFO, not a regular file" in str(raised) and path.name in str(raised)


def test_a_fifo_as_the_lock_file_is_refused_and_the_folder_is_not_taken(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / ".gigpo.lock")
    raised = _bounded(lambda: hold_folder(run, "train"))
    assert isinstance(raised, FolderLockError) and "is a FIFO" in str(raised)


def test_open_regular_reads_a_regular_file_and_refuses_a_device(tmp_path):
    (tmp_path / "a.json").write_bytes(b'{"a": 1}')
    with open_regular(tmp_path / "a.json") as handle:
        assert json.loads(handle.read()) == {"a": 1}
    with pytest.raises(UnsafeFileError, match="is a character device"):
        open_regular("/dev/zero")
    (tmp_path / "link.json").symlink_to(tmp_path / "a.json")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        open_regular(tmp_path / "link.json", follow=False)
    gz = tmp_path / "r.gz"
    gz.write_bytes(gzip.compress(b"x"))
    assert open_regular(gz).read(2) == b"\x1f\x8b"


# ----------------------------------------------------------------------------- ownership


@pytest.mark.parametrize("inside", ["checkpoint", "tiny-model", "deeper/still/eval"])
@pytest.mark.parametrize("kind", ["evaluate", "suite", "train", "study"])
def test_no_command_writes_inside_a_training_run(tmp_path, inside, kind):
    run = tmp_path / "run"
    with hold_folder(run, "train"):
        pass
    (run / "checkpoint").mkdir()
    with pytest.raises(FolderKindError, match=r"is inside .*run, which holds a training run"):
        hold_folder(run / inside, kind)
    assert not (run / inside / ".gigpo.lock").exists()
    assert not (run / inside / KIND_FILE).exists()


def test_an_older_run_without_a_kind_file_owns_its_folders_too(tmp_path):
    run = tmp_path / "old-run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    with pytest.raises(FolderKindError, match="is inside"):
        hold_folder(run / "checkpoint" / "eval", "evaluate")


def test_a_study_holds_its_runs_and_a_plain_runs_folder_is_no_owner(tmp_path):
    study = tmp_path / "study"
    with hold_folder(study, "study"):
        pass
    with hold_folder(study / "runs" / "gigpo" / "seed0", "train"):
        pass  # a study's runs are the one nesting allowed
    with pytest.raises(FolderKindError, match="which holds an estimator study"):
        hold_folder(study / "evals", "evaluate")
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)  # looks like an old study; not a kind file
    with hold_folder(project / "runs" / "eval", "evaluate"):
        pass

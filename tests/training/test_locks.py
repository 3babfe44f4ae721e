"""One writer per folder (training/locks.py): every command that writes a run holds its folder,
a second writer is refused at once naming the holder, a folder of another kind is refused,
and the lock of a killed process is taken over. Each case runs two real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from training.locks import (
    KIND_FILE,
    LOCK_FILE,
    FolderBusyError,
    FolderKindError,
    FolderLockError,
    folder_kind,
    hold_file,
    hold_folder,
    inferred_kind,
)

REPO = Path(__file__).resolve().parents[2]

#: A process that holds a folder (or, for kind "page", a page) until it is killed.
HOLDER = """
import sys, time
from training.locks import hold_file, hold_folder
kind, path = sys.argv[1], sys.argv[2]
lock = hold_file(path, "holder") if kind == "page" else hold_folder(path, kind, "holder")
print("held", flush=True)
time.sleep(600)
"""
#: A process that takes a folder (or page), prints the holder record it wrote and lets go;
#: refused, it prints the message and exits 2.
TAKER = """
import sys
from training.locks import FolderLockError, hold_file, hold_folder
kind, path = sys.argv[1], sys.argv[2]
try:
    lock = hold_file(path) if kind == "page" else hold_folder(path, kind)
except FolderLockError as exc:
    print(exc)
    sys.exit(2)
with lock:
    print(lock.path.read_text())
"""
KINDS = ["train", "study", "evaluate", "suite", "page"]
#: A metrics row, enough for the viewer.
ROW = '{"iteration": 0, "success_rate": 0.5, "mean_return": 0.1}\n'


@pytest.fixture
def holders():
    """Starts holder processes (``start(kind, path)``, returns once it holds); kills them
    all at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(kind: str, path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, kind, str(path)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(proc)
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line == "held\n", line or proc.stderr.read()  # type: ignore[union-attr]
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _take(kind: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", TAKER, kind, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _run(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, argv)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _refused(result: subprocess.CompletedProcess[str], *pieces: str) -> str:
    """Checks a command refused with exit 2 and one error line holding every piece."""
    err = result.stderr
    assert result.returncode == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1, err[-3000:]
    for piece in pieces:
        assert piece in errors[0], (piece, errors[0])
    return errors[0]


def _busy(pid: int) -> str:
    return f"is in use by another process: pid {pid} ("


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".gigpo")
    }


# ----------------------------------------------------------------------- the lock itself


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_writer_is_refused_and_a_killed_holders_lock_is_taken_over(
    kind, tmp_path, holders
):
    target = tmp_path / ("page.html" if kind == "page" else "out")
    holder = holders(kind, target)
    lock_file = tmp_path / ".page.html.lock" if kind == "page" else target / LOCK_FILE
    record = json.loads(lock_file.read_text())
    assert record["pid"] == holder.pid and record["kind"] == (None if kind == "page" else kind)
    assert record["command"].startswith("holder: python -c")

    refused = _take(kind, target)
    assert refused.returncode == 2, refused.stderr
    assert _busy(holder.pid) in refused.stdout and "s ago)" in refused.stdout
    assert ("use another -o" if kind == "page" else "use another --out") in refused.stdout

    _kill(holder)  # its flock died with it; the lock file it wrote is still there
    assert json.loads(lock_file.read_text())["pid"] == holder.pid
    taken = _take(kind, target)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert json.loads(taken.stdout)["pid"] not in (holder.pid, os.getpid())
    assert not lock_file.exists()  # a clean release removes it
    if kind != "page":
        assert json.loads((target / KIND_FILE).read_text()) == {"kind": kind}


def test_a_damaged_or_huge_lock_file_still_gives_a_clear_message(tmp_path, holders):
    out = tmp_path / "out"
    holder = holders("train", out)
    with (out / LOCK_FILE).open("r+b") as stream:  # the same file, its record overwritten
        stream.write(b"\xff{not json" * 100_000)
    refused = _take("train", out)
    assert refused.returncode == 2
    message = refused.stdout.strip()
    assert message.startswith(f"--out {out} is in use by another process: a process whose ")
    assert "holder record" in message and "unreadable" in message and len(message) < 1000
    _kill(holder)
    assert _take("train", out).returncode == 0


def test_a_folder_of_another_kind_is_refused_and_old_folders_get_their_kind(tmp_path):
    out = tmp_path / "run"
    with hold_folder(out, "train") as lock:
        assert lock.held and (out / LOCK_FILE).exists()
    assert not lock.held and folder_kind(out) == "train"
    with pytest.raises(FolderKindError, match=r"holds a training run \(gigpo-train\); this "
                       r"command writes a suite run .*use another --out"):  # fmt: skip
        hold_folder(out, "suite")
    assert sorted(p.name for p in out.iterdir()) == [KIND_FILE]  # nothing written

    # Folders made before kind files: their kind from what they hold.
    made = {
        "suite": ["run.json", "episodes.jsonl", "summary.json"],
        "train": ["config.json", "metrics.jsonl"],
        "study": ["study.md"],
        "evaluate": ["summary.json", "episodes.jsonl"],
        None: ["config.json", "notes.txt"],
    }
    for kind, names in made.items():
        folder = tmp_path / f"old-{kind}"
        folder.mkdir()
        for name in names:
            (folder / name).write_text("{}")
        assert inferred_kind(folder) == kind == folder_kind(folder)
    (tmp_path / "old-train-ckpt" / "checkpoint").mkdir(parents=True)
    (tmp_path / "old-train-ckpt" / "config.json").write_text("{}")
    assert folder_kind(tmp_path / "old-train-ckpt") == "train"
    with pytest.raises(FolderKindError, match="holds an estimator study"):
        hold_folder(tmp_path / "old-study", "train")
    with hold_folder(tmp_path / "old-None", "evaluate"):  # no kind yet: it takes this one
        pass
    assert folder_kind(tmp_path / "old-None") == "evaluate"

    # A damaged kind file, a file for a folder, a planted symlink: named errors.
    (out / KIND_FILE).write_text('{"kind": "rootkit"}')
    with pytest.raises(FolderKindError, match="'kind' must be one of"):
        hold_folder(out, "train")
    (out / KIND_FILE).write_bytes(b"x" * 100_000)
    with pytest.raises(FolderKindError, match="cannot be read .more than 4096 bytes"):
        hold_folder(out, "train")
    (out / KIND_FILE).write_text("[" * 4000)
    with pytest.raises(FolderKindError, match="cannot be read .nested too deeply"):
        hold_folder(out, "train")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(FolderKindError, match="is not a folder"):
        hold_folder(tmp_path / "a-file", "train")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FolderLockError, match="cannot open its lock file"):
        hold_folder(planted, "train")
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(ValueError, match="kind must be one of"):
        hold_folder(tmp_path / "x", "nope")


def test_a_command_that_fails_its_checks_can_leave_no_folder_behind(tmp_path):
    fresh = tmp_path / "a" / "study"
    lock = hold_folder(fresh, "study")
    assert lock.created
    lock.discard()
    assert not fresh.exists() and not lock.held
    with hold_folder(fresh, "study") as lock:
        (fresh / "models").mkdir()  # something written: kept
        lock.discard()
    assert sorted(p.name for p in fresh.iterdir()) == [KIND_FILE, "models"]
    lock = hold_folder(fresh, "study")
    assert not lock.created
    (fresh / "models").rmdir()
    lock.discard()  # not made by this lock: kept
    assert [p.name for p in fresh.iterdir()] == [KIND_FILE]


def test_a_page_has_one_writer_within_a_process_too(tmp_path):
    page = tmp_path / "view.html"
    with hold_file(page):
        with pytest.raises(FolderBusyError, match=f"page {page} is in use .*pid {os.getpid()}"):
            hold_file(page)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ each command, for real


def test_the_trainer_holds_its_folder(tmp_path, holders):
    out = tmp_path / "run"
    holder = holders("train", out)
    trainer = ("-m", "training.local", "--config", "smoke", "--out", out, "--run.iterations=1",
               "--eval.every=0", "--run.progress=false")  # fmt: skip
    _refused(_run(*trainer), f"--out {out} {_busy(holder.pid)}", "use another --out")
    assert sorted(p.name for p in out.iterdir()) == [KIND_FILE, LOCK_FILE]  # nothing written
    _kill(holder)
    assert _take("train", out).returncode == 0

    # A study's folder (marked, or made before markers) is no trainer's --out.
    study = tmp_path / "study"
    assert _take("study", study).returncode == 0
    old_study = tmp_path / "old-study"
    (old_study / "runs").mkdir(parents=True)
    for folder in (study, old_study):
        _refused(_run(*trainer[:5], folder), f"--out {folder} holds an estimator study")
        assert not (folder / "config.json").exists()


def test_the_study_holds_its_folder(tmp_path, holders):
    out = tmp_path / "study"
    holder = holders("study", out)
    study = ("-m", "training.study", "--config", "smoke", "--estimators", "grpo", "--seeds", "0",
             "--quick", "--out", out)  # fmt: skip
    _refused(_run(*study), f"--out {out} {_busy(holder.pid)}")
    assert not (out / "models").exists() and not (out / "runs").exists()
    _kill(holder)
    assert _take("study", out).returncode == 0
    run = tmp_path / "run"
    assert _take("train", run).returncode == 0
    _refused(_run(*study[:-1], run), f"--out {run} holds a training run")


def test_plain_evaluation_holds_its_folder(tmp_path, holders, tiny_model_dir):
    out = tmp_path / "eval"
    holder = holders("evaluate", out)
    evaluate = ("-m", "training.cli.evaluate", "--model", tiny_model_dir, "--config", "smoke",
                "--episodes", "1", "--rollout.max_new_tokens=4", "--out", out)  # fmt: skip
    _refused(_run(*evaluate), f"--out {out} {_busy(holder.pid)}")
    _kill(holder)
    taken = _run(*evaluate)  # the real command takes the folder over
    assert taken.returncode == 0, taken.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["episodes"] == 1
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [KIND_FILE]


def test_suites_hold_their_folder_and_plain_evaluation_leaves_a_suite_run_alone(
    tmp_path, holders, tiny_model_dir
):
    from training.cli.evaluate import main

    suite = ("--suite", "searchqa-sample", "--max-episodes", "1", "--max-new-tokens", "4")
    busy = tmp_path / "busy"
    holder = holders("suite", busy)
    command = ("-m", "training.cli.evaluate", "--model", tiny_model_dir)
    _refused(_run(*command, *suite, "--out", busy), f"--out {busy} {_busy(holder.pid)}",
             "wait for it to finish or use another --out")  # fmt: skip
    assert not (busy / "run.json").exists()
    _kill(holder)
    assert _take("suite", busy).returncode == 0

    run = tmp_path / "suite-run"
    assert main(["--model", str(tiny_model_dir), *suite, "--out", str(run)]) == 0
    before = _files(run)
    assert {"run.json", "episodes.jsonl", "summary.json"} <= set(before)
    plain = (*command, "--config", "smoke", "--episodes", "1", "--out", run)
    _refused(_run(*plain), f"--out {run} holds a suite run (gigpo-evaluate --suite); this "
             "command writes a held-out evaluation")  # fmt: skip
    (run / KIND_FILE).unlink()  # a suite run made before kind files: known by its run.json
    _refused(_run(*plain), f"--out {run} holds a suite run")
    assert _files(run) == before


def test_the_viewer_holds_its_page_not_the_run(tmp_path, holders):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(ROW)
    trainer = holders("train", run)  # a run still training can be viewed
    viewed = _run("-m", "training.cli.view", run)
    assert viewed.returncode == 0, viewed.stderr
    first = (run / "view.html").read_bytes()

    page = run / "view.html"
    holder = holders("page", page)
    _refused(_run("-m", "training.cli.view", run), f"page {page} {_busy(holder.pid)}",
             "use another -o")  # fmt: skip
    assert page.read_bytes() == first
    _kill(holder)
    (run / "metrics.jsonl").write_text(ROW + ROW.replace('"iteration": 0', '"iteration": 1'))
    viewed = _run("-m", "training.cli.view", run)
    assert viewed.returncode == 0, viewed.stderr
    assert page.read_bytes() != first and not (run / ".view.html.lock").exists()
    assert trainer.poll() is None


@pytest.mark.slow
def test_two_trainers_started_together_one_runs_one_is_refused(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "training.local", "--config", "smoke", "--out", str(out),
            "--run.iterations=1", "--eval.every=0", "--run.progress=false"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*argv, f"--run.seed={seed}"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for seed in (0, 1)
    ]
    results = [(*p.communicate(timeout=600), p.returncode) for p in procs]
    results = [(code, out_text, err) for out_text, err, code in results]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], [err[-2000:] for _, _, err in results]
    winner = next(i for i, (code, _, _) in enumerate(results) if code == 0)
    _refused(
        subprocess.CompletedProcess(argv, 2, *results[1 - winner][1:]),
        f"--out {out} {_busy(procs[winner].pid)}",
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in rows] == [0]
    assert json.loads((out / "config.json").read_text())["run"]["seed"] == winner


# ------------------------------------------------------------ gigpo-openrlhf, the converter


def test_gigpo_openrlhf_holds_its_dataset_dir_and_its_dry_run_takes_nothing(tmp_path, holders):
    import shutil

    data = tmp_path / "data"
    dry = _run("-m", "training.openrlhf.launch", "--dry-run", "--gigpo.dataset_dir", data)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert not data.exists()  # no lock, no folder, no tasks.jsonl
    holder = holders("openrlhf", data)
    launch = _run("-m", "training.openrlhf.launch", "--gigpo.dataset_dir", data)
    _refused(launch, f"--gigpo.dataset_dir {data} {_busy(holder.pid)}")
    _kill(holder)
    if shutil.which("ray") is None:  # free now: taken, then the missing ray stops it
        launch = _run("-m", "training.openrlhf.launch", "--gigpo.dataset_dir", tmp_path / "new")
        _refused(launch, "the ray command is not installed")
        assert not (tmp_path / "new").exists()  # the folder it made is removed again


def test_an_openrlhf_dataset_dir_has_its_kind(tmp_path):
    old = tmp_path / "old-openrlhf"  # made before kind files: tasks.jsonl names it
    old.mkdir()
    (old / "tasks.jsonl").write_text('{"seed": 0}\n')
    assert inferred_kind(old) == "openrlhf"
    with pytest.raises(FolderKindError, match="an OpenRLHF run's tasks"):
        hold_folder(old, "train")
    with hold_folder(old, "openrlhf"):
        pass
    run = tmp_path / "run"
    hold_folder(run, "train").release()
    with pytest.raises(FolderKindError, match="use another --gigpo.dataset_dir"):
        hold_folder(run, "openrlhf", option="--gigpo.dataset_dir")


def test_the_pickle_converter_takes_the_runs_trainer_lock(tmp_path, holders):
    run = tmp_path / "run"
    holder = holders("train", run)
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "state.pt").write_bytes(b"not read while a trainer holds the run")
    result = _run("-m", "training.local.checkpoint", "--trust-pickle", run)
    _refused(result, f"RUN_DIR {run} {_busy(holder.pid)}")
    assert (run / "checkpoint" / "state.pt").exists() and not (run / "state.pt.unsafe").exists()
    _kill(holder)
    result = _run("-m", "training.local.checkpoint", "--trust-pickle", tmp_path / "nowhere")
    _refused(result, "is not a folder")
    assert not (tmp_path / "nowhere").exists()

"""The last tracebacks the hostile command-line probes found (benchmarks/hostile_cli.py):
a planted link or FIFO where an evaluation writes, an export into a dangling link or a run's
own checkpoint, study flags out of range, an environment's play flags past its bounds, a
pickle that is garbage. Each ends with one line naming what was refused, exit 2, and leaves
what was planted as it was (the retrieval server's Ctrl-C: tests/retrieval)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from exit_codes import exit_code

from training.local.__main__ import main as train_main

BIG = str(2**64)


def _one_line(err: str, *needles: str) -> None:
    assert "Traceback" not in err and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    assert train_main(["--config", "smoke", "--run.iterations=1", "--eval.every=0",
                       "--run.progress=false", f"--out={run}"]) == 0  # fmt: skip
    return run


# ------------------------------------------------------------------------- evaluation


def test_evaluate_refuses_a_planted_summary_link_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    from training.cli.evaluate import main

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("training.evaluation.heldout.load_policy", never)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere.json"
    out.mkdir()
    elsewhere.write_text("precious")
    (out / "summary.json").symlink_to(elsewhere)
    code = exit_code(main, ["--model", "tiny-random", "--config", "smoke", "--out", str(out)])
    assert code == 2
    _one_line(capsys.readouterr().err, f"{out / 'summary.json'} is a symbolic link")
    assert elsewhere.read_text() == "precious" and (out / "summary.json").is_symlink()


def test_a_suite_refuses_a_fifo_for_its_episodes_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    from training.cli.evaluate import main

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("training.evaluation.suite.load_policy", never)
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "episodes.jsonl")
    code = exit_code(main, ["--model", "tiny-random", "--suite", "searchqa-sample",
                        "--max-episodes", "1", "--out", str(out)])  # fmt: skip
    assert code == 2
    _one_line(capsys.readouterr().err, f"{out / 'episodes.jsonl'} is a FIFO")
    assert (out / "episodes.jsonl").is_fifo()


def test_appending_to_a_fifo_is_refused_not_an_os_error(tmp_path):
    from training.files import UnsafeFileError, open_append

    os.mkfifo(tmp_path / "f")  # no reader: a plain open for writing fails with ENXIO
    with pytest.raises(UnsafeFileError, match="is a FIFO"):
        open_append(tmp_path / "f")


# ----------------------------------------------------------------------------- export


def test_export_refuses_a_dangling_link_and_a_runs_own_checkpoint(run_dir, tmp_path, capsys):
    from training.cli.export import main

    link = tmp_path / "model"
    link.symlink_to(tmp_path / "nowhere")
    assert exit_code(main, [str(run_dir), str(link)]) == 2
    _one_line(capsys.readouterr().err, f"{link} exists")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()

    inside = run_dir / "checkpoint" / "exported"
    assert exit_code(main, [str(run_dir), str(inside)]) == 2
    _one_line(capsys.readouterr().err, f"OUT_DIR {inside} is inside {run_dir}")
    assert not inside.exists()


def test_export_never_empties_a_folder_planted_at_its_old_staging_name(run_dir, tmp_path):
    from training.cli.export import main

    planted = tmp_path / "model.tmp"  # the staging name export used before
    planted.mkdir()
    (planted / "keep.txt").write_text("mine")
    assert exit_code(main, [str(run_dir), str(tmp_path / "model"), "--dtype", "float32"]) == 0
    assert (planted / "keep.txt").read_text() == "mine"
    assert (tmp_path / "model" / "gigpo_export.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model.")]  # no leftover
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o777 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------ study


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--jobs", "0"], "--jobs must be a positive int"),
        (["--jobs", BIG], "--jobs must be a positive int"),
        (["--threads", BIG], "--threads must be a positive int"),
        (["--axis", "step_weight=.nan,1", "--estimators", "gigpo"], "a finite number"),
        (["--axis", "step_weight=1,2", "--estimators", "grpo"],
         "algo.step_weight is read by none of the estimators ['grpo']"),
    ],
)  # fmt: skip
def test_study_flags_out_of_range_are_refused_before_anything_runs(tmp_path, capsys, extra, needle):
    from training.cli.study import main

    out = tmp_path / "study"
    argv = ["--config", "smoke", "--seeds", "0", "--out", str(out), *extra]
    if "--estimators" not in extra:
        argv += ["--estimators", "grpo"]
    assert exit_code(main, argv) == 2
    _one_line(capsys.readouterr().err, needle)
    assert not out.exists()


# ----------------------------------------------------------------- environments, pickles


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [("--seed", BIG, "--seed must be in [0, 4294967295]"),
     ("--seed", "-1", "--seed must be in [0, 4294967295]"),
     ("--history", BIG, "--history must be in [0, 1000]"),
     ("--history", "-1", "--history must be in [0, 1000]")],
)  # fmt: skip
def test_play_bounds_its_flags(capsys, flag, value, needle):
    from gigpo_envs.__main__ import main

    assert exit_code(main, ["play", "gigpo/Sokoban-v0", flag, value]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"garbage", "is not a readable pickled checkpoint"),
     ([1, 2, 3], "it holds list, without model, iteration, rng"),
     ({"model": {}}, "it holds dict, without iteration, rng")],
)  # fmt: skip
def test_converting_a_pickle_that_is_no_checkpoint_is_one_line(tmp_path, capsys, content, needle):
    import torch

    from training.local.checkpoint import main

    if not isinstance(content, bytes):  # saved as torch.save wrote the old checkpoints
        buffer = io.BytesIO()
        torch.save(content, buffer)
        content = buffer.getvalue()
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "checkpoint" / "state.pt").write_bytes(content)
    assert exit_code(main, [str(run), "--trust-pickle"]) == 2
    _one_line(capsys.readouterr().err, needle)
    assert (run / "checkpoint" / "state.pt").read_bytes() == content  # nothing changed
    assert not (run / "state.pt.unsafe").exists()


# ------------------------------------------------------------------------------ resume


@pytest.mark.parametrize("plant", ["fifo", "symlink", "garbage"])
def test_resume_refuses_a_planted_metrics_file_by_name_before_writing(
    run_dir, tmp_path, capsys, plant
):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run, symlinks=True)
    metrics, elsewhere = run / "metrics.jsonl", tmp_path / "elsewhere.txt"
    elsewhere.write_text("not metrics\n")
    metrics.unlink()
    if plant == "fifo":
        os.mkfifo(metrics)
    elif plant == "symlink":
        metrics.symlink_to(elsewhere)
    else:
        metrics.write_text("not metrics\n")
    before = (run / "checkpoint" / "state.json").read_text()
    argv = ["--config", "smoke", "--run.iterations=2", "--eval.every=0",
            "--run.progress=false", f"--out={run}"]  # fmt: skip
    assert exit_code(train_main, argv) == 2
    err = capsys.readouterr().err
    _one_line(err.strip().splitlines()[-1] + "\n", str(metrics))
    assert "Traceback" not in err
    assert (run / "checkpoint" / "state.json").read_text() == before
    assert elsewhere.read_text() == "not metrics\n"
    assert metrics.is_fifo() if plant == "fifo" else True
    assert metrics.is_symlink() if plant == "symlink" else True

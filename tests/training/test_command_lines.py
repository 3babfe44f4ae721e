"""The command lines' first hour (training/commands.py and each command): an error is one
line naming the program as it was typed, a misspelled key gets a suggestion, a finished run
says so, flags a mode ignores are refused, a duplicate YAML key is an error, Ctrl-C ends a
command with one line and exit 130, and a bad ``$GIGPO_FREE_MEMORY_GIB`` is named at load."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from exit_codes import exit_code

from training.commands import invoked_as
from training.local.__main__ import main as train_main
from training.local.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------- one-line errors

#: (module of main, sys.argv[0], a bad command line, the program named in the error)
BAD_ARGUMENTS = [
    ("training.local.__main__", "/venv/bin/gigpo-train", ["--config"], "gigpo-train"),
    ("training.local.__main__", "/r/training/local/__main__.py", ["--config"],
     "python -m training.local"),
    ("training.cli.quickstart", "/venv/bin/gigpo-quickstart", ["--out"], "gigpo-quickstart"),
    ("training.cli.view", "/venv/bin/gigpo-view", [], "gigpo-view"),
    ("training.cli.view", "/r/training/cli/view.py", [], "python -m training.cli.view"),
    ("training.cli.evaluate", "/venv/bin/gigpo-evaluate", ["--batch-size", "x"],
     "gigpo-evaluate"),
    ("training.cli.export", "/venv/bin/gigpo-export", ["only-one"], "gigpo-export"),
    ("training.cli.export", "/r/training/cli/export.py", ["only-one"],
     "python -m training.cli.export"),
    ("training.cli.study", "/r/training/study/__main__.py", ["--jobs", "x"],
     "python -m training.study"),
    ("training.verl.launch", "/venv/bin/gigpo-verl", ["--nope"], "gigpo-verl"),
    ("training.verl.launch", "/r/training/verl/launch.py", ["--nope"],
     "python -m training.verl.launch"),
    ("retrieval_server.__main__", "/r/retrieval_server/__main__.py", ["serve", "--port", "x"],
     "python -m retrieval_server serve"),
]  # fmt: skip


@pytest.mark.parametrize(("module", "argv0", "argv", "prog"), BAD_ARGUMENTS)
def test_a_bad_argument_is_one_line_naming_the_program_as_typed(
    monkeypatch, capsys, module, argv0, argv, prog
):
    monkeypatch.setattr(sys, "argv", [argv0, *argv])
    assert exit_code(importlib.import_module(module).main, argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{prog}: error: "), lines
    assert lines[1:] in ([], [f"run '{prog} --help' for usage"]), lines
    assert not any("usage:" in line for line in lines)


def test_the_openrlhf_launcher_says_its_own_name(monkeypatch, capfd):
    from training.openrlhf.launch import main

    monkeypatch.setattr(sys, "argv", ["/venv/bin/gigpo-openrlhf"])
    assert main(["--env.num_tasks=x", "--dry-run"]) == 2
    lines = capfd.readouterr().err.splitlines()
    assert lines == ["gigpo-openrlhf: error: argument --env.num_tasks: invalid int value: 'x'"]


def test_a_refused_config_is_one_line_and_help_still_shows_the_usage(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/gigpo-train"])
    assert exit_code(train_main, ["--optim.lr=inf", f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gigpo-train: error: optim.lr") and err.count("\n") == 1, err
    assert exit_code(train_main, ["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: gigpo-train --config FILE.yaml")


def test_invoked_as(monkeypatch):
    module_form = "python -m training.local"
    for argv0, name in [("/v/bin/gigpo-view", "gigpo-view"), ("C:/v/gigpo-view.exe", "gigpo-view"),
                        ("/r/training/local/__main__.py", module_form),
                        ("/v/bin/pytest", module_form), ("", module_form)]:  # fmt: skip
        monkeypatch.setattr(sys, "argv", [argv0])
        assert invoked_as("training.local") == name, argv0


# ------------------------------------------------------------------ close-match suggestions

UNKNOWN = "unknown config key 'algo.step_weigth'"


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        ("", ["--algo.step_weigth=1"], f"{UNKNOWN}; did you mean algo.step_weight?"),
        ("algo:\n  step_weigth: 1\n", [], f"{UNKNOWN}; did you mean algo.step_weight?"),
        ("", ["--algoo.estimator=grpo"],
         "unknown config section 'algoo' in 'algoo.estimator'; did you mean algo?"),
        ("envv:\n  id: x\n", [], "unknown config key 'envv'; did you mean env?"),
        ("", ["--iterations=3"], "did you mean run.iterations?"),
        ("", ["--algo.zzz=1"], "unknown config key 'algo.zzz'"),
    ],
)  # fmt: skip
def test_a_misspelled_config_key_gets_the_close_match(tmp_path, text, overrides, message):
    path = None
    if text:
        path = tmp_path / "c.yaml"
        path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path, overrides)
    assert message in str(exc.value), exc.value
    if "zzz" in message:
        assert "did you mean" not in str(exc.value)


def test_misspelled_suite_and_study_keys_get_the_close_match(tmp_path):
    from training.evaluation.suite_file import SuiteError, load_suite
    from training.study.plan import load_study_file

    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\nversion: 1\nlayout: alfworld\nenv: {id: x}\nparst: []\n")
    with pytest.raises(SuiteError, match="unknown key parst; did you mean parts?"):
        load_suite(suite)
    study = tmp_path / "st.yaml"
    study.write_text("jobz: 2\nparts: []\n")
    with pytest.raises(ConfigError, match="unknown key 'jobz'; did you mean jobs?"):
        load_study_file(study)
    study.write_text("parts: [{config: [a.yaml], arms: [gigpo]}]\n")
    with pytest.raises(ConfigError, match=r"parts.0.config: unknown key; did you mean configs\?"):
        load_study_file(study)


# ------------------------------------------------------------------- duplicate YAML keys


def test_a_duplicate_yaml_key_is_refused_naming_file_line_and_key(tmp_path, capsys):
    path = tmp_path / "dup.yaml"
    path.write_text("run:\n  iterations: 3\nalgo:\n  kl_coef: 0.1\nrun:\n  seed: 4\n")
    assert exit_code(train_main, ["--config", str(path), f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err
    assert f"config file {path}: run (line 5, column 1): duplicate key (first on line 1)" in err
    path.write_text("algo:\n  kl_coef: 0.1\n  gamma: 0.9\n  kl_coef: 0.2\n")
    with pytest.raises(ConfigError, match=r"algo.kl_coef \(line 4, column 3\): duplicate key"):
        load_config(path)
    with pytest.raises(ConfigError, match="override --env.kwargs: a .*duplicate key"):
        load_config(None, ["--env.kwargs={a: 1, a: 2}"])
    study = tmp_path / "study.yaml"
    study.write_text("jobs: 1\njobs: 2\nparts: []\n")
    from training.study.plan import load_study_file

    with pytest.raises(ConfigError, match=r"jobs \(line 2, column 1\): duplicate key"):
        load_study_file(study)


# ----------------------------------------------------------------------- a finished run


def test_a_finished_run_says_so_and_builds_nothing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    args = ["--config", "smoke", "--run.iterations=1", "--eval.every=0",
            "--run.progress=false", f"--out={out}"]  # fmt: skip
    assert train_main(args) == 0
    capsys.readouterr()
    metrics = (out / "metrics.jsonl").read_text()

    def no_model(*args, **kwargs):
        raise AssertionError("a finished run built its models")

    monkeypatch.setattr("training.local.train.load_models", no_model)
    assert train_main(args) == 0
    assert capsys.readouterr().out == (
        f"{out} already finished its 1 iteration (resume adds none); raise run.iterations "
        "to train more\n"
    )
    assert (out / "metrics.jsonl").read_text() == metrics


# ------------------------------------------------------------ gigpo-evaluate's mode flags


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--model", "tiny-random", "--group-size", "4"], "--group-size"),
        (["--model", "tiny-random", "--max-episodes", "2"], "--max-episodes"),
        (["--model", "tiny-random", "--data-dir", "/x"], "--data-dir"),
        (["--model", "tiny-random", "--retriever-url", "http://x"], "--retriever-url"),
        (["--model", "tiny-random", "--data-manifest", "m.json"], "--data-manifest"),
        (["--list-suites", "--episodes", "3"], "--episodes"),
        (["--compare", "a", "b", "--temperature", "1"], "--temperature"),
    ],
)
def test_evaluate_refuses_a_flag_its_mode_ignores(tmp_path, capsys, monkeypatch, argv, flag):
    from training.cli import evaluate

    monkeypatch.setattr(sys, "argv", ["/venv/bin/gigpo-evaluate"])
    out = tmp_path / "out"
    assert exit_code(evaluate.main, [*argv, "--out", str(out)] if "--model" in argv else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gigpo-evaluate: error: ") and flag in err.splitlines()[0], err
    assert not out.exists()


# ---------------------------------------------------------------------------- Ctrl-C


def _start(argv: list[str], tmp_path: Path, stdout: int = subprocess.DEVNULL) -> subprocess.Popen:
    """``python argv`` with the repository on the path, stderr to ``tmp_path/stderr.txt``,
    and SIGINT's default action restored (a job started from a non-interactive shell
    inherits it ignored, and Python then installs no KeyboardInterrupt)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    with open(tmp_path / "stderr.txt", "w") as stderr:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=tmp_path, env=env, stdout=stdout, stderr=stderr,
            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip


def _interrupt(proc: subprocess.Popen, ready, tmp_path: Path) -> tuple[int, str]:
    """Sends SIGINT once ``ready()`` is true (within 240 s); (exit status, stderr)."""
    deadline = time.monotonic() + 240
    try:
        while not ready():
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, (tmp_path / "stderr.txt").read_text()


def test_ctrl_c_ends_the_trainer_with_one_line_and_its_checkpoint_kept(tmp_path):
    out = tmp_path / "run"
    proc = _start(["-m", "training.local", "--config", "smoke", "--run.iterations=1000",
                   "--eval.every=0", "--run.progress=false", f"--out={out}"], tmp_path)  # fmt: skip
    state = out / "checkpoint" / "state.json"
    code, err = _interrupt(proc, state.is_file, tmp_path)
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    done = json.loads(state.read_text())["iteration"]
    assert last == (
        f"python -m training.local: interrupted: the last checkpoint of {out} (after "
        f"iteration {done - 1}, numbered from 0) is kept; run the same command to resume"
    ), err


def test_ctrl_c_stops_gigpo_view_serve_with_one_line(tmp_path):
    from training.viewer.page import VIEW_FILE

    run = tmp_path / "run"
    assert train_main(["--config", "smoke", "--run.iterations=1", "--eval.every=0",
                       "--run.progress=false", f"--out={run}"]) == 0  # fmt: skip
    proc = _start(["-m", "training.cli.view", str(run), "--serve"], tmp_path, subprocess.PIPE)
    serving = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            if line.startswith("serving "):
                serving.set()

    threading.Thread(target=read, daemon=True).start()
    code, err = _interrupt(proc, serving.is_set, tmp_path)
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        f"python -m training.cli.view: interrupted: stopped serving; the page stays in "
        f"{run / VIEW_FILE}"
    ]


@pytest.mark.parametrize(
    ("module", "target", "argv", "kept"),
    [
        ("training.cli.evaluate", "training.cli.evaluate.evaluate_heldout",
         ["--model", "tiny-random"], "held-out evaluation keeps nothing"),
        ("training.cli.study", "training.cli.study.run_all", ["--config", "smoke",
         "--estimators", "grpo", "--seeds", "0"], "finished runs are kept"),
        ("training.cli.quickstart", "training.local.train.train", [],
         "no checkpoint of"),
    ],
)  # fmt: skip
def test_ctrl_c_ends_the_other_commands_with_one_line(
    tmp_path, capsys, monkeypatch, module, target, argv, kept
):
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, stop)
    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(module).main
    assert main([*argv, "--out", str(tmp_path / "out")]) == 130
    lines = capsys.readouterr().err.strip().splitlines()  # a study builds its tiny model first
    assert ": interrupted: " in lines[-1] and kept in lines[-1], lines
    assert not any("Traceback" in line or ": interrupted: " in line for line in lines[:-1])


# --------------------------------------------------------------- $GIGPO_FREE_MEMORY_GIB


@pytest.mark.parametrize("value", ["1e300", "1e400", "inf", "nan", "-3", "abc", "0"])
def test_a_bad_free_memory_variable_is_named_at_load(monkeypatch, capsys, tmp_path, value):
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", value)
    with pytest.raises(ConfigError, match="GIGPO_FREE_MEMORY_GIB"):
        load_config("smoke", [f"--out={tmp_path / 'o'}"])
    for dry in ([], ["--dry-run"]):
        assert exit_code(train_main, ["--config", "smoke", f"--out={tmp_path / 'o'}", *dry]) == 2
        err = capsys.readouterr().err
        assert "GIGPO_FREE_MEMORY_GIB" in err and err.count("\n") == 1, err

"""Run directories as untrusted data: checkpoints that run no code, crash leftovers that are
recovered, files rewritten atomically, and updates that diverge stopped before they save."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from training.cli.evaluate import main as evaluate_main
from training.local.checkpoint import (
    CheckpointReadError,
    UnsafeCheckpointError,
    find_checkpoint,
    load_checkpoint,
    read_checkpoint,
    recover_checkpoint,
    save_checkpoint,
)
from training.local.checkpoint import main as convert_main
from training.local.config import load_config
from training.local.metrics import MetricsLog, read_metrics
from training.local.model import resolve_model_path
from training.local.policy import TrainingDivergedError
from training.local.resume import ResumeConfigError, check_resume
from training.local.train import train
from training.local.trained import find_run_dir, whole_checkpoint

REPO = Path(__file__).resolve().parents[2]
SOKOBAN = "--env.kwargs={dim_room: [6, 6], num_boxes: 1, max_steps: 3}"


class _Planted:
    """A pickle that creates a directory when unpickled (stands for any code it could run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _plant(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps({"model": _Planted(marker), "iteration": 1}))


@pytest.fixture(scope="module")
def one_iteration_run(tmp_path_factory, tiny_model_dir):
    """A real run directory: one iteration of Sokoban with the tiny model, checkpointed."""
    out = tmp_path_factory.mktemp("safety") / "run"
    train(_config(tiny_model_dir, out))
    return out


def _config(tiny_model_dir, out, *extra):
    return load_config(
        None,
        [
            f"--model.name_or_path={tiny_model_dir}", "--env.id=gigpo/Sokoban-v0", SOKOBAN,
            "--env.num_groups=2", "--env.group_size=2", "--eval.groups=1",
            "--rollout.max_new_tokens=8", "--algo.minibatch_size=8", "--optim.lr=1e-3",
            "--run.iterations=1", "--run.progress=false", "--run.threads=1",
            "--run.save_rollouts_every=0", f"--out={out}", *extra,
        ],
    )  # fmt: skip


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


# ----------------------------------------------------------------------------- the format


def test_a_checkpoint_is_safetensors_a_weights_only_optimizer_and_json(one_iteration_run):
    directory = one_iteration_run / "checkpoint"
    assert sorted(p.name for p in directory.iterdir()) == [
        "model.safetensors",
        "optimizer.pt",
        "state.json",
    ]
    state = json.loads((directory / "state.json").read_text())
    assert state["format"] == 2 and state["iteration"] == 1
    torch.load(directory / "optimizer.pt", weights_only=True)  # loads as plain data
    checkpoint = read_checkpoint(directory)
    # Tied embedding and head are stored once and come back under both names.
    assert torch.equal(checkpoint["model"]["lm_head.weight"],
                       checkpoint["model"]["model.embed_tokens.weight"])  # fmt: skip


@pytest.mark.parametrize("name", ["optimizer.pt", "model.safetensors", "state.json"])
def test_a_planted_pickle_runs_no_code_under_resume_or_evaluate(
    one_iteration_run, tiny_model_dir, tmp_path, capsys, name
):
    run = _copy(one_iteration_run, tmp_path)
    marker = tmp_path / "the_pickle_ran"
    _plant(run / "checkpoint" / name, marker)

    config = _config(tiny_model_dir, run, "--run.iterations=2")
    if name == "state.json":  # read, its RNG states checked, before any model loads
        with pytest.raises(ResumeConfigError, match="state.json"):
            check_resume(config)
    else:
        check_resume(config)
    with pytest.raises((RuntimeError, ResumeConfigError), match="cannot resume"):
        train(config)
    assert not marker.exists()

    # Evaluation reads the weights and state.json (not the optimizer): a planted file there
    # is an error naming it (exit 2); a planted optimizer is never opened.
    code = _exit_code(evaluate_main, ["--model", str(run), "--out", str(tmp_path / "eval")])
    assert not marker.exists()
    assert code == (0 if name == "optimizer.pt" else 2)
    if code == 2:
        assert name in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["weights", "python rng", "torch rng", "generator"])
def test_resuming_a_damaged_checkpoint_is_exit_2_with_one_line(
    one_iteration_run, tiny_model_dir, tmp_path, damage
):
    run = _copy(one_iteration_run, tmp_path)
    state_path = run / "checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    if damage == "weights":
        (run / "checkpoint" / "model.safetensors").write_bytes(b"\x08" + b"\0" * 200)
    elif damage == "python rng":
        state["rng"]["python"] = [3, [1, 2, 3], None]
    elif damage == "torch rng":
        state["rng"]["torch"] = state["rng"]["torch"][:-1]
    else:
        state["rng"]["generator"]["bit_generator"] = "os.system"
    state_path.write_text(json.dumps(state))
    key = {"python rng": "rng.python", "torch rng": "rng.torch", "generator": "rng.generator"}
    if damage in key:  # refused before any model loads
        with pytest.raises(ResumeConfigError, match=key[damage]):
            check_resume(_config(tiny_model_dir, run, "--run.iterations=2"))
    cli = [
        sys.executable, "-m", "training.local", f"--model.name_or_path={tiny_model_dir}",
        "--env.id=gigpo/Sokoban-v0", SOKOBAN, "--env.num_groups=2", "--env.group_size=2",
        "--eval.groups=1", "--rollout.max_new_tokens=8", "--algo.minibatch_size=8",
        "--optim.lr=1e-3", "--run.iterations=2", "--run.progress=false", "--run.threads=1",
        "--run.save_rollouts_every=0", f"--out={run}",
    ]  # fmt: skip
    result = subprocess.run(cli, capture_output=True, text=True, cwd=REPO, timeout=300)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and "cannot resume" in errors[0]
    assert key.get(damage, "model.safetensors") in errors[0] or damage == "weights"


def test_the_quickstart_into_a_folder_of_another_run_is_exit_2(
    one_iteration_run, tiny_model_dir, tmp_path, capsys
):
    from training.cli.quickstart import main as quickstart_main

    shutil.copytree(one_iteration_run, tmp_path / "q" / "gigpo")
    argv = ["--out", str(tmp_path / "q"), f"--model.name_or_path={tiny_model_dir}",
            "--run.iterations=1"]  # fmt: skip
    assert quickstart_main(argv) == 2
    err = capsys.readouterr().err
    assert "another config" in err and "Traceback" not in err


def test_an_old_pickled_checkpoint_is_refused_and_converts_only_on_request(
    one_iteration_run, tiny_model_dir, tmp_path, capsys
):
    run = _copy(one_iteration_run, tmp_path)
    marker = tmp_path / "the_pickle_ran"
    shutil.rmtree(run / "checkpoint")
    (run / "checkpoint").mkdir()
    _plant(run / "checkpoint" / "state.pt", marker)

    config = _config(tiny_model_dir, run, "--run.iterations=2")
    with pytest.raises(UnsafeCheckpointError, match="old pickled format"):
        check_resume(config)
    code = _exit_code(evaluate_main, ["--model", str(run), "--out", str(tmp_path / "eval")])
    assert code == 2 and "--trust-pickle" in capsys.readouterr().err
    cli = [
        sys.executable, "-m", "training.local", f"--model.name_or_path={tiny_model_dir}",
        "--env.id=gigpo/Sokoban-v0", SOKOBAN, "--run.progress=false", f"--out={run}",
    ]  # fmt: skip
    result = subprocess.run(cli, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 2 and "old pickled format" in result.stderr
    assert _exit_code(convert_main, [str(run)]) == 2  # no opt-in, no unpickling
    assert not marker.exists()

    # A pickle we made ourselves (the old format's layout) converts and resumes exactly.
    legit = _copy(one_iteration_run, tmp_path / "legit")
    old = read_checkpoint(legit / "checkpoint")
    state = json.loads((legit / "checkpoint" / "state.json").read_text())
    rng = state["rng"]
    pickled = {
        "iteration": old["iteration"],
        "model": old["model"],
        "optimizer": old["optimizer"],
        "rng": {
            "python": (rng["python"][0], tuple(rng["python"][1]), rng["python"][2]),
            "numpy": (
                rng["numpy"][0],
                np.asarray(rng["numpy"][1], dtype=np.uint32),
                *rng["numpy"][2:],
            ),  # fmt: skip
            "torch": torch.tensor(rng["torch"], dtype=torch.uint8),
            "generator": rng["generator"],
        },
    }
    shutil.rmtree(legit / "checkpoint")
    (legit / "checkpoint").mkdir()
    torch.save(pickled, legit / "checkpoint" / "state.pt")
    assert _exit_code(convert_main, [str(legit), "--trust-pickle"]) == 0
    assert json.loads((legit / "checkpoint" / "state.json").read_text()) == state
    converted = read_checkpoint(legit / "checkpoint")
    assert all(torch.equal(converted["model"][k], old["model"][k]) for k in old["model"])


def _exit_code(main, argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


# ----------------------------------------------------------------------------- crash leftovers


def _small(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def _save(out: Path, iteration: int, seed: int) -> torch.Tensor:
    model, optimizer = _small(seed)
    save_checkpoint(
        out, model=model, optimizer=optimizer, iteration=iteration,
        generator=np.random.default_rng(0),
    )  # fmt: skip
    return model.weight.detach().clone()


@pytest.mark.parametrize(
    "crash, expected",
    [
        ("between the renames", 2),  # checkpoint.old (1) and a whole checkpoint.tmp (2)
        ("while staging", 1),  # checkpoint (1) and a checkpoint.tmp without state.json
        ("staging after the first rename", 1),  # checkpoint.old (1), a partial .tmp
    ],
)
def test_a_crash_during_a_save_is_recovered_to_the_newest_whole_checkpoint(
    tmp_path, crash, expected
):
    weights = {1: _save(tmp_path / "a", 1, seed=1), 2: _save(tmp_path / "b", 2, seed=2)}
    out = tmp_path / "run"
    out.mkdir()
    if crash == "between the renames":
        shutil.copytree(tmp_path / "a" / "checkpoint", out / "checkpoint.old")
        shutil.copytree(tmp_path / "b" / "checkpoint", out / "checkpoint.tmp")
    elif crash == "while staging":
        shutil.copytree(tmp_path / "a" / "checkpoint", out / "checkpoint")
        shutil.copytree(tmp_path / "b" / "checkpoint", out / "checkpoint.tmp")
        (out / "checkpoint.tmp" / "state.json").unlink()
    else:
        shutil.copytree(tmp_path / "a" / "checkpoint", out / "checkpoint.old")
        (out / "checkpoint.tmp").mkdir()
        (out / "checkpoint.tmp" / "model.safetensors").write_bytes(b"cut short")

    found = find_checkpoint(out)  # read only: nothing moves
    assert found is not None and found.exists() and len(list(out.iterdir())) == 2
    assert recover_checkpoint(out) == out / "checkpoint"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint"]
    model, optimizer = _small(0)
    done = load_checkpoint(out, model=model, optimizer=optimizer,
                           generator=np.random.default_rng())  # fmt: skip
    assert done == expected and torch.equal(model.weight, weights[expected])


def test_a_crash_between_the_renames_still_guards_the_config_and_evaluates(
    one_iteration_run, tiny_model_dir, tmp_path
):
    run = _copy(one_iteration_run, tmp_path)
    (run / "checkpoint").rename(run / "checkpoint.old")
    (run / "checkpoint.tmp").mkdir()  # the staged copy a crash cut short

    load_config(run / "config.json", [])  # the run's config still loads
    checkpoint = whole_checkpoint(find_run_dir(run))
    assert checkpoint == run / "checkpoint.old"  # a run directory, not a model directory
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint.old",
        "checkpoint.tmp",
    ]  # evaluation only reads

    changed = _config(tiny_model_dir, run, "--optim.lr=5e-4")
    with pytest.raises(ResumeConfigError, match="optim.lr"):
        check_resume(changed)
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint"
    ]


def test_a_tiny_model_cut_short_by_a_kill_is_rebuilt(tmp_path):
    config = load_config(None, [f"--out={tmp_path}", "--model.tiny_warmup_steps=0"]).model
    whole = resolve_model_path(config, tmp_path / "whole")
    cut = tmp_path / "cut" / "tiny-model"
    cut.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(whole / name, cut / name)  # the kill came before the weights
    assert resolve_model_path(config, tmp_path / "cut") == cut
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(str(whole)).state_dict()
    b = AutoModelForCausalLM.from_pretrained(str(cut)).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Built with other settings: rebuilt rather than reused.
    wider = load_config(None, [f"--out={tmp_path}", "--model.tiny_hidden_size=48"]).model
    resolve_model_path(wider, tmp_path / "whole")
    assert json.loads((whole / "config.json").read_text())["hidden_size"] == 48


def test_metrics_are_rewritten_whole_on_resume_never_truncated_in_place(tmp_path):
    log = MetricsLog(tmp_path)
    for iteration in range(3):
        log.write({"iteration": iteration, "success_rate": 0.5, "mean_return": 0.0})
    with (tmp_path / "metrics.jsonl").open() as before:
        MetricsLog(tmp_path, completed=2)  # resume after iteration 2's checkpoint
        # The file a reader (or a crash) saw is never cut short: the new one replaced it.
        assert len(before.read().splitlines()) == 3
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_an_update_that_makes_weights_nan_stops_before_saving(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match="non-finite"):
        train(_config(tiny_model_dir, out, "--optim.lr=1e30", "--optim.max_grad_norm=1e30"))
    assert not (out / "checkpoint").exists()


def test_a_checkpoint_without_its_state_file_stops_the_run_and_loses_nothing(
    one_iteration_run, tiny_model_dir, tmp_path
):
    run = _copy(one_iteration_run, tmp_path)
    (run / "checkpoint" / "state.json").unlink()  # removed or damaged since the save
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}

    with pytest.raises(CheckpointReadError, match=r"checkpoint: it holds no state\.json"):
        train(_config(tiny_model_dir, run, "--run.iterations=2"))
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # the weights, the metrics rows: nothing deleted or rewritten
    assert [r["iteration"] for r in read_metrics(run)] == [0]


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt"])
def test_a_fifo_planted_as_a_checkpoint_file_is_a_named_error_not_a_hang(
    one_iteration_run, tiny_model_dir, tmp_path, name
):
    run = _copy(one_iteration_run, tmp_path)
    (run / "checkpoint" / name).unlink()
    os.mkfifo(run / "checkpoint" / name)
    done = subprocess.run(
        [sys.executable, "-m", "training.local", "--config", str(run / "config.json"),
         f"--out={run}", "--run.iterations=2"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{name} is a FIFO, not a regular file" in done.stderr
    assert "Traceback" not in done.stderr

"""A LoRA run folder from someone else, opened by ``gigpo-export`` and ``gigpo-evaluate``: what
is planted in it (remote code its own config turns on, adapter files and fields our trainer
never writes, a tiny model without its tokenizer) is refused by name with exit 2, before any
model is built, never run and never waited on (docs/security.md). Each case plants the thing
in a copy of a real run and runs the real command in its own process, with a timeout: a
planted FIFO or regular expression would otherwise hang it."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from training.cli.export import main as export_main
from training.local.metrics import read_metrics

from .exit_codes import exit_code

REPO = Path(__file__).resolve().parents[2]
#: A LoRA run of the tiny random model, built in the run folder (``RUN/tiny-model``).
TRAIN = ["--config", "smoke", "--model.tiny_warmup_steps=0", "--model.lora_rank=4",
         "--model.lora_alpha=8", "--run.iterations=1", "--eval.every=0",
         "--run.progress=false", "--run.threads=1", "--run.save_rollouts_every=0"]  # fmt: skip


#: The address space a command here may take (an export of the tiny model peaks near 1.2
#: GiB): a planted adapter that makes PEFT allocate gigabytes fails the command, not the
#: machine.
MEMORY_CAP = 6 << 30


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _command(tmp_path: Path, module: str, *args: str, timeout: float = 120):
    """``python -m module args`` in a process of its own (umask 022, at most
    :data:`MEMORY_CAP`), its Python modules cache (where transformers copies a model's own
    code before running it) under ``tmp_path``. A command that hangs fails the test at
    ``timeout``."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               HF_MODULES_CACHE=str(tmp_path / "hf-modules"))  # fmt: skip
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=timeout, umask=0o022, preexec_fn=_cap_memory)  # fmt: skip


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> tuple[Path, str]:
    """A real LoRA run (``gigpo-train``, one iteration), and what the trainer printed."""
    folder = tmp_path_factory.mktemp("planted")
    done = _command(folder, "training.local", *TRAIN, f"--out={folder / 'run'}", timeout=600)
    assert done.returncode == 0, done.stderr
    return folder / "run", done.stderr


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("rollouts", "tensorboard"))
    return copy


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        section, _, name = key.partition(".")
        (data[section] if name else data)[name or key] = value
    path.write_text(json.dumps(data))


def _refused(done: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one line naming ``words``, no traceback."""
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and all(w in errors[0] for w in words), done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- remote code


EVALUATE = ["training.cli.evaluate", "--model", "RUN", "--out", "OUT", "--episodes", "1"]


@pytest.mark.parametrize(
    "command",
    [["training.cli.export", "RUN", "OUT"], EVALUATE, [*EVALUATE, "--config", "smoke"]],
    ids=["export", "evaluate", "evaluate-with-the-users-config"],
)
def test_a_runs_own_config_never_turns_its_models_code_on(lora_run, tmp_path, command):
    """The run's config.json says trust_remote_code and its tiny model maps its classes to a
    planted module: the module never runs, and the model is refused naming its auto_map."""
    run = _copy(lora_run[0], tmp_path)
    marker = tmp_path / "the-planted-code-ran"
    _edit_json(run / "config.json", **{"model.trust_remote_code": True})
    _edit_json(run / "tiny-model" / "config.json",
               auto_map={"AutoConfig": "planted.PlantedConfig",
                         "AutoModelForCausalLM": "planted.PlantedModel"})  # fmt: skip
    (run / "tiny-model" / "planted.py").write_text(
        f"from pathlib import Path\n\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import Qwen2Config as PlantedConfig\n"
        "from transformers import Qwen2ForCausalLM as PlantedModel\n"
    )
    out = tmp_path / "out"
    args = [{"RUN": str(run), "OUT": str(out)}.get(a, a) for a in command]
    done = _command(tmp_path, *args)
    assert not marker.exists()
    _refused(done, "auto_map", "model.trust_remote_code")
    assert not out.exists()


# ----------------------------------------------------------------------------- adapters


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


ADAPTER = Path("checkpoint") / "adapter"
#: case -> (plant it in the adapter folder, the refusal, whether PEFT hangs or allocates
#: gigabytes on it: those run in a process of their own, under a timeout and a memory cap).
PLANTED_ADAPTERS = {
    "weights-fifo": (lambda a: _fifo(a / "adapter_model.safetensors"),
                     "adapter_model.safetensors is a FIFO", True),
    "config-fifo": (lambda a: _fifo(a / "adapter_config.json"),
                    "adapter_config.json is a FIFO", True),
    "regex-targets": (lambda a: _edit_json(a / "adapter_config.json", target_modules="(.*.*)*Z"),
                      "target_modules must be a list of module names", True),
    "regex-excluded": (lambda a: _edit_json(a / "adapter_config.json",
                                            exclude_modules="(.*.*)*Z"),
                       "exclude_modules must be PEFT's default", True),
    "huge-rank": (lambda a: _edit_json(a / "adapter_config.json", r=4_000_000),
                  "r must be an int in [1, 4096]", True),
    "huge-alpha": (lambda a: _edit_json(a / "adapter_config.json", lora_alpha=1e308),
                   "lora_alpha must be in (0, 8192]", False),
    "layers-added": (lambda a: _edit_json(a / "adapter_config.json",
                                          layer_replication=[[0, 2]] * 1000),
                     "layer_replication must be PEFT's default", False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PLANTED_ADAPTERS))
def test_a_planted_adapter_is_refused_by_name_before_any_model_is_built(
    lora_run, tmp_path, capsys, case
):
    plant, message, apart = PLANTED_ADAPTERS[case]
    run = _copy(lora_run[0], tmp_path)
    plant(run / ADAPTER)
    args = [str(run), str(tmp_path / "out")]
    if apart:
        done = _command(tmp_path, "training.cli.export", *args, timeout=90)
    else:
        code = exit_code(export_main, args)
        done = subprocess.CompletedProcess(args, code, "", capsys.readouterr().err)
    _refused(done, message, str(run / ADAPTER))
    assert "Loading weights" not in done.stderr  # refused before the base model loads
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("planted", ["missing", "fifo"])
def test_a_tiny_model_without_its_tokenizer_is_refused(lora_run, tmp_path, capsys, planted):
    """transformers would load an empty tokenizer in its place and export a model no one
    can prompt."""
    run = _copy(lora_run[0], tmp_path)
    tokenizer = run / "tiny-model" / "tokenizer.json"
    if planted == "fifo":
        _fifo(tokenizer)
    else:
        tokenizer.unlink()
    assert exit_code(export_main, [str(run), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{tokenizer} is {'a FIFO' if planted == 'fifo' else 'missing'}" in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- a clean export


def test_a_lora_export_is_quiet_numbered_from_0_and_has_the_usual_file_modes(lora_run, tmp_path):
    """No FutureWarning (transformers' ``is_gradient_checkpointing``, read by PEFT) from the
    LoRA trainer or the export; the record's ``checkpoint_iteration`` is the last iteration
    of ``metrics.jsonl``; every file gets the mode a new file gets under umask 022."""
    run, trained = lora_run
    assert "FutureWarning" not in trained
    target = tmp_path / "exported"
    done = _command(tmp_path, "training.cli.export", str(run), str(target))
    assert done.returncode == 0, done.stderr
    assert "FutureWarning" not in done.stderr
    record = json.loads(done.stdout.splitlines()[0])
    assert record == json.loads((target / "gigpo_export.json").read_text())
    assert record["checkpoint_iteration"] == read_metrics(run)[-1]["iteration"] == 0
    assert "iteration" not in record and record["lora_merged"]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in target.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
    assert stat.S_IMODE(target.stat().st_mode) == 0o755

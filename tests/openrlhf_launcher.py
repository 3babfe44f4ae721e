"""The OpenRLHF launcher's dry run, for the tests that read what it resolves."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "training" / "openrlhf_gigpo.sh"
OPENRLHF_ENTRY = "openrlhf.cli.train_ppo_ray"


def dry_run(*args: str) -> subprocess.CompletedProcess:
    """``bash training/openrlhf_gigpo.sh --dry-run ARGS`` (no Ray contacted)."""
    env = dict(os.environ, PYTHON=sys.executable, RAY_DASHBOARD="http://127.0.0.1:1")
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def command_line(stdout: str) -> list[str]:
    """The resolved OpenRLHF command line the dry run printed, split into words."""
    line = next(li for li in stdout.splitlines() if f"-m {OPENRLHF_ENTRY}" in li)
    return shlex.split(line)


def submitted_args(stdout: str) -> list[str]:
    """The arguments the dry run would submit to ``python -m training.openrlhf.train``."""
    line = stdout.splitlines()[stdout.splitlines().index("# submit:") + 1]
    words = shlex.split(line)
    return words[words.index("training.openrlhf.train") + 1 :]


#: The folder flags of docs/openrlhf.md's CPU command, which each test gives its own.
FOLDER_FLAGS = ("--gigpo.dataset_dir", "--ckpt.path", "--ckpt.output_dir")


def documented_cpu_run() -> list[str]:
    """docs/openrlhf.md's CPU command without its folders (each test gives its own)."""
    from doc_blocks import code_blocks

    (block,) = code_blocks("docs/openrlhf.md", "Try it on CPU first", language="bash")
    start = block.index("gigpo-openrlhf")
    words = shlex.split(block[start : block.index("\nray stop")].replace("\\\n", " "))
    assert words[0] == "gigpo-openrlhf"
    kept, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in FOLDER_FLAGS:
            skip = True
        else:
            kept.append(word)
    return kept

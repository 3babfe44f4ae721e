"""A study killed mid-part resumes from the same command: its finished runs are not trained
again, the run cut short resumes from its last checkpoint (the iterations before it kept as
they were), and the report covers every run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from training.cli.study import main

REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path) -> str:
    path = tmp_path / "tiny_random.yaml"
    path.write_text(
        "model: {name_or_path: tiny-random}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 2}\n"
        "  num_groups: 1\n  group_size: 2\n  history_length: 1\n  heldout_fraction: 0.25\n"
        "rollout: {max_new_tokens: 2}\neval: {groups: 1, every: 0}\n"
        "algo: {minibatch_size: 4}\nrun: {iterations: 12, checkpoint_every: 2}\n"
    )
    return str(path)


def _iteration(state: Path) -> int:
    try:
        return int(json.loads(state.read_text())["iteration"])
    except (OSError, ValueError, KeyError):
        return -1


def test_a_killed_study_resumes_from_the_same_command(tmp_path):
    out = tmp_path / "study"
    argv = ["--config", _config(tmp_path), "--estimators", "hgpo", "--seeds", "0", "1",
            "--jobs", "1", "--out", str(out)]  # fmt: skip
    runs = out / "runs" / "tiny_random" / "hgpo"
    first, second = runs / "seed0", runs / "seed1"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "training.study", *argv], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while _iteration(second / "checkpoint" / "state.json") < 4:
            assert proc.poll() is None, "the study ended before it could be killed"
            assert time.monotonic() < deadline, "the second run never reached a checkpoint"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)  # the study and its run, mid-run
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = (first / "metrics.jsonl").stat().st_mtime_ns
    kept = _iteration(second / "checkpoint" / "state.json")
    rows = (second / "metrics.jsonl").read_text().splitlines()
    before = [r for r in rows if json.loads(r)["iteration"] < kept]
    assert len(before) == kept < 12

    assert main(argv) == 0
    assert (first / "metrics.jsonl").stat().st_mtime_ns == finished  # not trained again
    after = (second / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in after] == list(range(12))
    assert after[:kept] == before  # resumed from its checkpoint, not started over
    report = (out / "study.md").read_text()
    assert "hgpo" in report and "| 2 |" in report  # both seeds in the arm's row

"""``gigpo-train --rollout.engine vllm``: the smoke config end to end, the gap between the
engine's log-probs and the update's own across iterations, and a stale engine caught by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

#: The smoke config (its learning rate moves the policy each iteration) in float32, so
#: that the engine's and the update's forward passes agree to float rounding.
ARGS = ["--config", "smoke", "--rollout.engine=vllm", "--model.compute_dtype=float32",
        "--optim.lr=1e-3", "--run.iterations=3", "--eval.every=0", "--run.progress=false",
        "--run.threads=2"]  # fmt: skip
#: Runs the trainer with the engine's weight sync switched off (the stale engine).
STALE = (
    "import sys; from training.local.engine import VllmEngine; "
    "VllmEngine.sync = lambda self, model: 0.0; "
    "from training.local.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def _train(out: Path, *head: str) -> tuple[list[dict], str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, *head, *ARGS, "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return rows, result.stderr


def test_the_smoke_run_on_vllm_keeps_the_log_prob_gap_at_rounding(tmp_path):
    rows, stderr = _train(tmp_path / "run", "-m", "training.local")
    assert "cores; engine vllm" in stderr
    assert json.loads((tmp_path / "run" / "config.json").read_text())["rollout"]["engine"] == "vllm"
    assert [row["iteration"] for row in rows] == [0, 1, 2]
    assert all(row["rollout_logp_gap_max"] < 1e-3 for row in rows), rows
    assert all(row["time_sync"] > 0 for row in rows)
    assert rows[-1]["kl"] > 1e-4 or rows[-1]["clip_frac"] > 0  # the policy moved

    stale, _ = _train(tmp_path / "stale", "-c", STALE)
    # the same first iteration (nothing has moved yet), then the stale engine shows
    assert stale[0]["rollout_logp_gap"] == rows[0]["rollout_logp_gap"]
    assert all(s["rollout_logp_gap"] > 100 * r["rollout_logp_gap"]
               for s, r in zip(stale[1:], rows[1:], strict=True)), (stale, rows)  # fmt: skip

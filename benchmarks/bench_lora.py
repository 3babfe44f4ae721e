"""LoRA against full fine-tuning on the quick start (SmolLM2-135M-Instruct on NumberLine, 20
iterations, CPU): each seed runs both arms, one after the other, each in its own trainer
process; one JSON line per run, then one per arm (mean and range over seeds).

    python benchmarks/bench_lora.py --seeds 0 1 2 --out /tmp/bench-lora

The full arm is the quick start as shipped (``configs/quickstart.yaml``); the LoRA arm
trains rank-16 adapters on every linear layer (alpha 32) instead of the 30 decoder layers,
at a LoRA learning rate (``--lora-lr``, default 3e-4: LoRA's usual 10x the full model's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ARMS = {
    "full": [],
    "lora": ["--model.trainable_layers=0", "--model.lora_rank=16", "--model.lora_alpha=32"],
}


def run(arm: str, seed: int, out: Path, lora_lr: float) -> dict:
    extra = list(ARMS[arm]) + ([f"--optim.lr={lora_lr}"] if arm == "lora" else [])
    folder = out / f"{arm}-seed{seed}"
    command = [sys.executable, "-m", "training.local", "--config", "quickstart",
               f"--out={folder}", f"--run.seed={seed}", "--run.progress=false", *extra]  # fmt: skip
    tick = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - tick
    if done.returncode:
        raise SystemExit(f"{arm} seed {seed} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    success = [r["success_rate"] for r in rows]
    return {
        "arm": arm, "seed": seed, "wall_s": round(wall, 1),
        "update_s": round(sum(r["time_update"] for r in rows), 1),
        "success_first5": round(statistics.mean(success[:5]), 3),
        "success_last5": round(statistics.mean(success[-5:]), 3),
        "heldout": [r["eval_success_rate"] for r in rows if "eval_success_rate" in r],
        "checkpoint_mb": round(sum(p.stat().st_size for p in (folder / "checkpoint").rglob("*")
                                   if p.is_file()) / 2**20, 1),
        "args": extra,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="/tmp/bench-lora")
    parser.add_argument("--lora-lr", type=float, default=3e-4)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        for arm in ARMS:
            results.append(run(arm, seed, Path(args.out), args.lora_lr))
            print(json.dumps(results[-1]), flush=True)
    for arm in ARMS:
        mine = [r for r in results if r["arm"] == arm]
        summary = {"arm": arm, "seeds": len(mine)}
        for key in ("wall_s", "update_s", "success_last5", "checkpoint_mb"):
            values = [r[key] for r in mine]
            summary[key] = {"mean": round(statistics.mean(values), 3),
                            "min": min(values), "max": max(values)}  # fmt: skip
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

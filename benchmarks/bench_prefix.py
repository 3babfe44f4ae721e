"""Shared-prefix computation in the local trainer: generation and update, with and without.

Plays one turn of every env of a group vector env, then times (a) generating the responses
and (b) one forward + backward of the PPO loss over a minibatch of those step records, each
with ``share_prefix`` on and off (the baseline, measured in the same run). Also reports the
largest log-prob difference between the two (same numbers up to float error). One JSON
object per line.

    python benchmarks/bench_prefix.py                      # SmolLM2-135M on NumberLine
    python benchmarks/bench_prefix.py --model tiny --env gigpo/Sokoban-v0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUICKSTART = Path(__file__).resolve().parents[1] / "training" / "configs" / "quickstart.yaml"


def _best(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        tick = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - tick)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 | tiny | a model dir")
    parser.add_argument("--env", default=None, help="default: the quick start's env")
    parser.add_argument("--minibatch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from training.local.batch import make_batch, token_log_probs
    from training.local.config import load_config
    from training.local.model import load_model, load_tokenizer, resolve_model_path
    from training.local.play import config_envs
    from training.local.policy import policy_loss
    from training.local.rollout import generate, render_prompts

    overrides = ["--model.name_or_path=" + ("tiny-random" if args.model == "tiny" else args.model)]
    if args.env:
        overrides += [f"--env.id={args.env}", "--env.kwargs={}", "--env.template={}"]
    config = load_config(QUICKSTART, overrides)
    with tempfile.TemporaryDirectory(prefix="bench-prefix-") as tmp:
        path = resolve_model_path(config.model, Path(tmp))
        tokenizer = load_tokenizer(path)
        model = load_model(path, "float32")
    e, r = config.env, config.rollout
    envs = config_envs(config, e.num_groups, e.group_size)
    _, infos = envs.reset(seed=0)
    prompts = render_prompts(tokenizer, [list(m) for m in infos["messages"]], r.response_prefix)
    envs.close()

    def gen(share: bool):
        torch.manual_seed(0)
        return generate(
            model, tokenizer, prompts, max_new_tokens=r.max_new_tokens, temperature=0.0,
            stop_text=r.stop_text, share_prefix=share,
        )  # fmt: skip

    from training.records import StepRecords

    gen_seconds = {share: _best(lambda s=share: gen(s), args.repeats) for share in (False, True)}
    responses, log_probs = gen_seconds[False][1]
    same_tokens = responses == gen_seconds[True][1][0]
    records = StepRecords(
        prompt_ids=prompts, response_ids=responses, old_log_probs=log_probs,
        rewards=[0.0] * len(prompts),
    )  # fmt: skip
    rows = np.arange(min(args.minibatch, len(prompts)))
    advantages = np.random.default_rng(0).normal(size=len(prompts))
    model.train()

    def update(share: bool):
        batch = make_batch(records, rows, advantages, tokenizer.pad_token_id, share_prefix=share)
        model.zero_grad(set_to_none=True)
        lp = token_log_probs(model, batch)
        loss, _ = policy_loss(lp, batch, None, config.algo)
        loss.backward()
        return lp.detach()[batch.response_mask.bool()], batch.prefix_length

    upd = {share: _best(lambda s=share: update(s), args.repeats) for share in (False, True)}
    diff = float((upd[False][1][0] - upd[True][1][0]).abs().max())
    size = {
        "model": args.model,
        "env": e.id,
        "prompts": len(prompts),
        "prompt_tokens_mean": round(float(np.mean([len(p) for p in prompts])), 1),
        "shared_prefix_tokens": upd[True][1][1],
        "threads": torch.get_num_threads(),
    }
    for what, times, extra in (
        ("generate_turn", gen_seconds, {"same_greedy_tokens": same_tokens}),
        (
            "update_minibatch_fwd_bwd",
            upd,
            {"minibatch": len(rows), "max_abs_log_prob_diff": diff},
        ),
    ):
        print(
            json.dumps(
                {
                    "what": what,
                    "size": dict(size, **extra),
                    "seconds": round(times[True][0], 4),
                    "baseline": {"what": "share_prefix off", "seconds": round(times[False][0], 4)},
                    "speedup": round(times[False][0] / times[True][0], 2),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

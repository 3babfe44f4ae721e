"""One OpenRLHF rollout iteration at the GiGPO paper's ALFWorld scale, through the real executor.

    python benchmarks/bench_openrlhf_rollout.py                    # both layouts, 1 and 2 workers
    python benchmarks/bench_openrlhf_rollout.py --groups 4 --latency-s 0.1   # a quick look

Plays ``--groups`` (16) groups x ``--group-size`` (8) rollouts of generated ALFWorld games at
50 steps through ``training.openrlhf.executor.run_episode``, every episode at once on one
event loop as one vLLM rollout actor plays them, with SmolLM2's real tokenizer. The model is
a named stand-in (``benchmarks/standin_engine.py``): each request is answered after
``--latency-s`` with a ~100-token reply (a ``<think>`` and one of the prompt's admissible
actions, 10% junk). The env runs in ``--workers`` worker processes
(:class:`gigpo_envs.workers.EnvWorkerPool`), or in threads with ``0``.

One JSON line per configuration (layout x workers):

* ``samples``, ``tokens``: OpenRLHF samples and their tokens in the iteration (the episode
  layout's cut at ``--data.max_len`` as OpenRLHF cuts it);
* ``turns_played``, ``turns_trained`` (turns with tokens in a sample), ``trained_fraction``,
  ``trained_of_max_steps`` (of ``episodes x max_steps``), ``episodes_budget_ended`` (the
  episode layout's episodes that the token budget ended before the env);
* ``sample_tokens_max``, ``sample_tokens_p99``;
* ``env_errors`` (episodes that raised), ``episodes_won``;
* ``env_cpu_s``: CPU seconds spent in env code (the workers' process time; for threads, the
  env calls' thread time), ``env_steps_per_cpu_s``, and ``env_share_of_paper_iteration``:
  ``env_cpu_s / (16 workers x 363 s)``, the share of the paper's ~363 s iteration the env
  work would take spread over 16 cores, as on a GPU node;
* ``wall_s``; ``actor_cpu_s``, this process's CPU seconds (the executor's own work: chat
  templates, tokenizing, the stand-in engine; with threads, the env too);
  ``event_loop_lag_p99_ms`` (a 5 ms ticker's overshoot); ``peak_rss_mib`` (this process
  plus its env workers, each process's peak, summed).

The baseline in the same run is the other layout and the other worker counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from standin_engine import StandinEngine  # noqa: E402

#: The paper's ALFWorld iteration on its GPUs (seconds), against which env work is set.
PAPER_ITERATION_S = 363.0
PAPER_WORKERS = 16


def tokenizer_of_smollm2() -> Any:
    from transformers import AutoTokenizer

    from training.smollm2 import find_gguf

    gguf = find_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


class TimedThreadEnv:
    """The executor's thread env, timing the env calls' thread CPU time."""

    cpu_s = 0.0

    def __init__(self, env: Any) -> None:
        self.env = env

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def timed() -> Any:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                TimedThreadEnv.cpu_s += time.thread_time() - start

        return await asyncio.to_thread(timed)

    async def areset(self, **kwargs: Any) -> Any:
        return await self._run(self.env.reset, **kwargs)

    async def astep(self, action: str) -> Any:
        return await self._run(self.env.step, action)

    async def aclose(self) -> None:
        await self._run(self.env.close)


async def play(tasks: list[Any], tokenizer: Any, engine: Any, max_len: int) -> tuple[list, list]:
    from training.openrlhf.executor import run_episode, task_label

    params = SimpleNamespace(max_tokens=None, logprobs=None)
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - start - 0.005)

    tick = asyncio.create_task(ticker())
    results = await asyncio.gather(
        *(run_episode("p", task_label(t), params, max_len, tokenizer, engine) for t in tasks),
        return_exceptions=True,
    )
    stop.set()
    await tick
    return list(results), lags


def measure(args: argparse.Namespace, games: Path, tokenizer: Any, layout: str, workers: int):
    from training import env_tasks as task_module
    from training.env_tasks import Task, close_env_pool, env_pool
    from training.openrlhf.spans import turn_columns

    close_env_pool()
    if workers:
        pool = env_pool(workers)
        cpu_before = sum(s["cpu_s"] for s in pool.stats())
    else:
        original = task_module.ThreadEnv
        task_module.ThreadEnv = TimedThreadEnv
        TimedThreadEnv.cpu_s = 0.0
    max_len = args.max_prompt_tokens + args.max_new_tokens if layout == "step" else args.max_len
    kwargs = {"data_dir": str(games), "max_steps": args.max_steps}
    tasks = [
        Task(
            "gigpo/ALFWorld-v0",
            group,
            kwargs,
            history_length=args.history_length,
            max_new_tokens=args.max_new_tokens,
            layout=layout,
            max_prompt_tokens=args.max_prompt_tokens if layout == "step" else None,
            env_workers=workers,
        )  # fmt: skip
        for group in range(args.groups)
        for _ in range(args.group_size)
    ]
    engine = StandinEngine(tokenizer, latency_s=args.latency_s, think_tokens=90, seed=0)
    start, actor_start = time.perf_counter(), time.process_time()
    results, lags = asyncio.run(play(tasks, tokenizer, engine, max_len))
    wall, actor_cpu = time.perf_counter() - start, time.process_time() - actor_start
    errors = [r for r in results if isinstance(r, BaseException)]
    done = [r for r in results if not isinstance(r, BaseException)]
    lengths, played, trained, won, budget_ended = [], 0, 0, 0, 0
    for r in done:
        won += int(r["scores"] > 0)
        if layout == "step":
            steps = r["gigpo"]["steps"]
            pairs = zip(steps["prompt_ids"], steps["response_ids"], strict=True)
            lengths += [len(prompt) + len(answer) for prompt, answer in pairs]
            played += len(steps["rewards"])
            trained += len(steps["rewards"])
        else:
            turns = r["gigpo"]["turns"]
            budget_ended += int(turns["budget_ended"])
            lengths.append(min(len(r["observation_tokens"]), max_len))
            spans = turn_columns(turns["action_ranges"], turns["sequence_length"], max_len)
            played += len(turns["rewards"])
            trained += int(np.count_nonzero(spans[:, 1] > spans[:, 0]))
    if workers:
        stats = pool.stats()
        env_cpu = sum(s["cpu_s"] for s in stats) - cpu_before
        workers_rss_kib = sum(s["peak_rss_kib"] for s in stats)
        close_env_pool()
    else:
        env_cpu = TimedThreadEnv.cpu_s
        workers_rss_kib = 0
        task_module.ThreadEnv = original
    own_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "what": "openrlhf_rollout",
        "layout": layout,
        "env_workers": workers,
        "episodes": len(tasks),
        "max_steps": args.max_steps,
        "history_length": args.history_length if layout == "step" else 0,
        "max_len": max_len,
        "latency_s": args.latency_s,
        "samples": len(lengths),
        "tokens": int(sum(lengths)),
        "turns_played": played,
        "turns_trained": trained,
        "trained_fraction": round(trained / max(played, 1), 4),
        "trained_of_max_steps": round(trained / (len(tasks) * args.max_steps), 4),
        "episodes_budget_ended": budget_ended,
        "sample_tokens_max": int(max(lengths)) if lengths else 0,
        "sample_tokens_p99": float(np.percentile(lengths, 99)) if lengths else 0.0,
        "env_errors": len(errors),
        "first_error": repr(errors[0])[:300] if errors else None,
        "episodes_won": won,
        "env_cpu_s": round(env_cpu, 2),
        "env_steps_per_cpu_s": round(played / max(env_cpu, 1e-9), 1),
        "env_share_of_paper_iteration": round(env_cpu / PAPER_WORKERS / PAPER_ITERATION_S, 4),
        "wall_s": round(wall, 2),
        "actor_cpu_s": round(actor_cpu, 2),
        "engine_requests": engine.requests,
        "event_loop_lag_p99_ms": round(1000 * float(np.percentile(lags, 99)), 2),
        "peak_rss_mib": round((own_rss_kib + workers_rss_kib) / 1024, 1),
        "actor_rss_mib": round(own_rss_kib / 1024, 1),
        "workers_rss_mib": round(workers_rss_kib / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--history-length", type=int, default=2)
    parser.add_argument("--max-prompt-tokens", type=int, default=2048)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--max-len", type=int, default=4096, help="the episode layout's")
    parser.add_argument("--latency-s", type=float, default=0.5)
    parser.add_argument("--layouts", default="step,episode")
    parser.add_argument("--workers", default="1,2", help="comma separated; 0 = threads")
    parser.add_argument("--games", type=int, default=16, help="generated games (one a group)")
    parser.add_argument("--games-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # layout:workers
    args = parser.parse_args()
    if args.one:  # one configuration, in a process of its own (its own peak memory)
        layout, workers = args.one.split(":")
        tokenizer = tokenizer_of_smollm2()
        print(json.dumps(measure(args, Path(args.games_dir), tokenizer, layout, int(workers))))
        return
    import subprocess

    from gigpo_envs.alfworld.generate import generate_games

    with tempfile.TemporaryDirectory() as tmp:
        games = Path(tmp) / "games"
        generate_games(games, num_games=args.games, seed=0)
        for layout in args.layouts.split(","):
            for workers in args.workers.split(","):
                command = [sys.executable, __file__, *sys.argv[1:], "--games-dir", str(games),
                           "--one", f"{layout}:{workers}"]  # fmt: skip
                out = subprocess.run(command, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"{layout}:{workers} failed:\n{out.stderr[-3000:]}")
                print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()

"""The trainer's generation against a bare ``model.generate`` of the same prompts: time and
peak memory, each in a process of its own.

Three ways to sample the same responses (same seed, same tokens) from SmolLM2-135M-Instruct
(float32, this machine's CPU):

- ``trainer``: ``training.local.decoding.generate``, which takes each sampled token's
  log-prob as decoding goes (one step's logits held);
- ``bare``: ``model.generate`` alone, no log-probs (the baseline: what sampling costs);
- ``all_logits``: ``model.generate(output_logits=True)`` then one log-softmax over every
  step's logits, as the trainer did before (rows x new tokens x vocabulary floats).

Each runs in a fresh process: load the model, one warm-up call, one timed call, then one
call under PyTorch's profiler for the peak of its tensor allocations (the weights and the
profiler's running total: the CPU counterpart of ``torch.cuda.max_memory_allocated``); the
process's peak resident memory up to the end of the timed call (``ru_maxrss``: the model's
loading and the allocator's reuse included) is printed beside it. Target: the trainer within 1.2x
of bare in time and in peak memory.

    python benchmarks/bench_generate.py                    # 32 prompts x 128 new tokens
    python benchmarks/bench_generate.py --rows 8 --new 32  # smaller

``--engine hf --engine vllm``: the trainer's two engines (``rollout.engine``) on the same
prompts instead, each in a process of its own (SmolLM2-135M-Instruct, ``--dtype``, default
bfloat16): ``hf`` is ``training.local.decoding.generate`` with the shared prompt start run
once (the trainer's ``model.share_prefix``), ``vllm`` is ``training.local.engine.VllmEngine``
(prefix caching on, its key/value cache ``--cache-gib``). Rows share their first
``--shared`` prompt tokens (a group's task text); every row decodes ``--new`` tokens (no end
of sequence). One warm-up call, one timed call; ``max_rss_mib`` is the process's peak
resident memory (model, engine and cache included). One line per engine, then the ratio.

    python benchmarks/bench_generate.py --engine hf --engine vllm --rows 32 --prompt 160 \
        --shared 128 --new 6                                    # the quick start's shape
    python benchmarks/bench_generate.py --engine hf --engine vllm --rows 64 --prompt 1024 \
        --shared 768 --new 128                                  # ALFWorld-like
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("trainer", "bare", "all_logits")


def run_mode(mode: str, rows: int, prompt: int, new: int, threads: int) -> dict:
    """One mode, in this process."""
    import torch
    from memory_plan import allocation_peak

    from training.local import decoding
    from training.local.model import load_model, load_tokenizer
    from training.smollm2 import smollm2_path

    torch.set_num_threads(threads)
    path = smollm2_path()
    tok = load_tokenizer(path)
    model = load_model(path, "float32", trainable=False)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, len(tok) - 10, (prompt,), generator=g).tolist()
               for _ in range(rows)]  # fmt: skip
    # Every row decodes `new` tokens (the end-of-sequence id is one no token has), so that
    # the three modes do the same work whatever they sample.
    never = len(tok) + 10**6
    decoding.eos_ids = lambda model, tokenizer: [never]
    inputs = torch.tensor(prompts)

    def sample(tokens: int) -> int:
        torch.manual_seed(0)
        if mode == "trainer":
            ids, _ = decoding.generate(model, tok, prompts, max_new_tokens=tokens,
                                       temperature=1.0)  # fmt: skip
            return sum(len(r) for r in ids)
        kwargs = {}
        if mode == "all_logits":
            kwargs = {"return_dict_in_generate": True, "output_logits": True}
        with torch.no_grad():
            out = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                                 max_new_tokens=tokens, do_sample=True, temperature=1.0,
                                 top_k=0, eos_token_id=[never], pad_token_id=tok.pad_token_id,
                                 **kwargs)  # fmt: skip
            if mode == "all_logits":
                steps = torch.stack(out.logits, dim=1).float()
                chosen = out.sequences[:, prompt:, None]
                torch.log_softmax(steps, -1).gather(-1, chosen).squeeze(-1)
                return chosen.numel()
        return out.numel() - inputs.numel()

    sample(4)  # warm-up
    tick = time.perf_counter()
    tokens = sample(new)
    seconds = time.perf_counter() - tick
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before profiling
    peak, _ = allocation_peak(lambda: sample(new))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "mode": mode,
        "seconds": round(seconds, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "peak_tensor_mib": round((weights + peak) / 2**20, 1),
        "max_rss_mib": round(max_rss, 1),
    }


def run_engine(engine: str, rows: int, prompt: int, shared: int, new: int, threads: int,
               dtype: str, cache_gib: int) -> dict:  # fmt: skip
    """One engine on ``rows`` random prompts of ``prompt`` tokens whose first ``shared``
    agree, ``new`` sampled tokens each, in this process."""
    import torch

    from training.local import decoding
    from training.local.model import load_model, load_tokenizer
    from training.local.precision import compute
    from training.smollm2 import smollm2_path

    torch.set_num_threads(threads)
    path = smollm2_path()
    tok = load_tokenizer(path)
    g = torch.Generator().manual_seed(0)
    start = torch.randint(10, len(tok) - 10, (shared,), generator=g).tolist()
    prompts = [start + torch.randint(10, len(tok) - 10, (prompt - shared,), generator=g).tolist()
               for _ in range(rows)]  # fmt: skip
    never = len(tok) + 10**6  # every row decodes `new` tokens
    if engine == "vllm":
        from training.local.engine import VllmEngine

        vllm = VllmEngine(path, dtype=dtype, seed=0, max_model_len=prompt + new + 8,
                          cache_gib=cache_gib)  # fmt: skip

        def sample(tokens: int) -> int:
            torch.manual_seed(0)
            ids, _ = vllm.generate(prompts, max_new_tokens=tokens, temperature=1.0, eos=[],
                                   ignore_eos=True)  # fmt: skip
            return sum(len(r) for r in ids)
    else:
        model = load_model(path, "float32", trainable=False)
        decoding.eos_ids = lambda model, tokenizer: [never]

        def sample(tokens: int) -> int:
            torch.manual_seed(0)
            with compute(dtype, "cpu"):
                ids, _ = decoding.generate(model, tok, prompts, max_new_tokens=tokens,
                                           temperature=1.0, share_prefix=True)  # fmt: skip
            return sum(len(r) for r in ids)

    sample(2)  # warm-up
    if engine == "vllm":
        vllm.llm.reset_prefix_cache()  # the timed call computes its shared prefix again
    tick = time.perf_counter()
    tokens = sample(new)
    seconds = time.perf_counter() - tick
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def compare_engines(args: argparse.Namespace) -> int:
    """``--engine``: each engine in a process of its own, then the ratio."""
    results = {}
    for engine in args.engine:
        cmd = [sys.executable, __file__, "--engine-run", engine, "--rows", str(args.rows),
               "--prompt", str(args.prompt), "--shared", str(args.shared), "--new",
               str(args.new), "--threads", str(args.threads), "--dtype", args.dtype,
               "--cache-gib", str(args.cache_gib)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(json.dumps({"what": "engine", "engine": engine, "error": done.stderr[-2000:]}))
            return 1
        results[engine] = json.loads(lines[-1])
        size = {"model": "smollm2-135m", "rows": args.rows, "prompt": args.prompt,
                "shared": args.shared, "new": args.new, "threads": args.threads,
                "dtype": args.dtype, "device": "cpu"}  # fmt: skip
        print(json.dumps({"what": "engine", "size": size, **results[engine]}), flush=True)
    if {"hf", "vllm"} <= set(results):
        hf, vllm = results["hf"], results["vllm"]
        print(json.dumps({
            "what": "engine_ratio", "size": size,
            "vllm_over_hf_tokens_per_s": round(vllm["tokens_per_s"] / hf["tokens_per_s"], 2),
            "vllm_over_hf_max_rss": round(vllm["max_rss_mib"] / hf["max_rss_mib"], 2),
            "baseline": hf, "target": "vllm >= 2x hf tokens/s at the ALFWorld-like shape",
        }), flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens a row")
    parser.add_argument("--new", type=int, default=128, help="new tokens a row")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--engine", action="append", choices=("hf", "vllm"),
                        help="compare the trainer's engines (give both)")  # fmt: skip
    parser.add_argument("--engine-run", choices=("hf", "vllm"), help=argparse.SUPPRESS)
    parser.add_argument("--shared", type=int, default=0, help="prompt tokens all rows share")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--cache-gib", type=int, default=2, help="vllm's key/value cache")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.engine_run:
        sizes = (args.rows, args.prompt, args.shared, args.new, args.threads)
        print(json.dumps(run_engine(args.engine_run, *sizes, args.dtype, args.cache_gib)))
        return 0
    if args.engine:
        return compare_engines(args)
    sizes = (args.rows, args.prompt, args.new, args.threads)
    if args.mode:
        print(json.dumps(run_mode(args.mode, *sizes)), flush=True)
        return 0
    results = {}
    for mode in MODES:  # each in a process of its own
        cmd = [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows),
               "--prompt", str(args.prompt), "--new", str(args.new),
               "--threads", str(args.threads)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(json.dumps({"what": "generate", "mode": mode, "error": done.stderr[-2000:]}))
            return 1
        results[mode] = json.loads(lines[-1])
    bare = results["bare"]
    for mode in ("trainer", "all_logits"):
        row = results[mode]
        print(json.dumps({
            "what": "generate_vs_bare",
            "size": {"model": "smollm2-135m", "rows": args.rows, "prompt": args.prompt,
                     "new": args.new, "threads": args.threads, "device": "cpu"},
            **row,
            "baseline": bare,
            "time_over_bare": round(row["seconds"] / bare["seconds"], 3),
            "peak_tensor_over_bare": round(row["peak_tensor_mib"] / bare["peak_tensor_mib"], 3),
            "max_rss_over_bare": round(row["max_rss_mib"] / bare["max_rss_mib"], 3),
            "target": "trainer within 1.2x of bare in time and peak memory",
        }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":  # vLLM spawns processes: nothing runs on import
    sys.exit(main())

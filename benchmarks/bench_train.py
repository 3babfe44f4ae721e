"""Local trainer throughput: env steps/s, generated tokens/s, and the time of one iteration
split into generation, environment, advantage and update. Prints one JSON object per line.

    python benchmarks/bench_train.py                       # tiny random Qwen2, CPU
    python benchmarks/bench_train.py --model smollm2       # SmolLM2-135M-Instruct, CPU
    python benchmarks/bench_train.py --model qwen2.5-1.5b --device cuda --dtype bfloat16

``qwen2.5-1.5b`` is Qwen2.5-1.5B's architecture (hard-coded config) with random weights and
the tiny BPE tokenizer: the cost of a real-size model, nothing downloaded. Each iteration's
line carries the baseline measured in the same run: a bare ``model.generate`` of the same
first-turn prompts, which is what the trainer's generation costs at least. Then one line
``update_gflops``: the achieved GFLOP/s of one step of the trainer's own policy update
(16 rows x 96 tokens, the last 32 the response, by default) under each compute dtype,
beside the machine's own matmul peak measured in the same run (float32 and bfloat16,
2048^3 products, best of 5), so the distance to the physical limit is one number. FLOPs
are the update's matrix products counted from the model's config (:func:`step_flops`);
the usual 6 x parameters x tokens estimate is printed beside them.

    python benchmarks/bench_train.py --model smollm2 --iterations 0      # the GFLOP/s line only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.local.shapes import KNOWN_ARCHITECTURES  # noqa: E402

#: Qwen2.5-1.5B's architecture (from its published config.json; the trainer's table).
QWEN25_15B = {k: v for k, v in KNOWN_ARCHITECTURES["Qwen/Qwen2.5-1.5B-Instruct"].items()
              if k not in ("model_type", "hidden_act")}  # fmt: skip


def build_sized_model(directory: Path, dtype: str) -> Path:
    """Random Qwen2.5-1.5B-sized weights with the tiny tokenizer, saved as a HF model dir."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from training.tiny_model import build_tiny_model

    build_tiny_model(directory)  # writes the tokenizer (and a tiny model we overwrite)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    config = Qwen2Config(
        **QWEN25_15B,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(directory)
    return directory


def bare_generate_seconds(config, model_path: Path) -> float:
    """Seconds of one ``model.generate`` over the first-turn prompts of the first iteration."""
    import torch

    from training.local.model import load_model, load_tokenizer
    from training.local.play import config_envs, train_seeds
    from training.local.rollout import generate, render_prompts

    tokenizer = load_tokenizer(model_path)
    model = load_model(model_path, config.model.dtype, device=config.model.device)
    env = config.env
    envs = config_envs(config, env.num_groups, env.group_size)
    _, infos = envs.reset(seed=train_seeds(config, 0))
    prompts = render_prompts(tokenizer, [list(m) for m in infos["messages"]])
    torch.manual_seed(0)
    tick = time.perf_counter()
    generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
    )
    seconds = time.perf_counter() - tick
    envs.close()
    del model
    return seconds


def matmul_peak_gflops(dtype: str, n: int = 2048, repeats: int = 5) -> float:
    """The best GFLOP/s of ``n x n @ n x n`` in ``dtype`` on CPU, with torch's threads."""
    import torch

    a = torch.randn(n, n).to(getattr(torch, dtype))
    b = torch.randn(n, n).to(getattr(torch, dtype))
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        tick = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - tick)
    return 2 * n**3 / best / 1e9


def step_flops(config, rows: int, length: int, response: int) -> dict[str, float]:
    """Floating-point operations of one policy-update step of a decoder (Llama / Qwen2
    layout) on ``rows`` sequences of ``length`` tokens whose last ``response`` are the
    response: matrix products only (2 per multiply-add), forward + backward.

    Counted: every decoder layer's projections on every token (forward x1, backward x2:
    input and weight gradients), causal attention scores and mixing (same factors), and the
    vocabulary projection on the response positions only, the ones the update projects
    (forward x1, backward x1: the head is frozen, tied to the frozen embeddings). The
    usual "6 x parameters x tokens" estimate is returned beside it.
    """
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    kv = kv_heads * (h // heads)
    tokens = rows * length
    projections = 2 * tokens * layers * (2 * h * h + 2 * h * kv + 3 * h * inter)
    attention = 2 * 2 * rows * layers * h * length * (length + 1) // 2
    head = 2 * rows * response * h * config.vocab_size
    params = layers * (2 * h * h + 2 * h * kv + 3 * h * inter) + config.vocab_size * h
    return {
        "flops": 3 * (projections + attention) + 2 * head,
        "flops_6n": 6 * params * tokens,
    }


def update_gflops(model_path: Path, compute_dtype: str, rows: int, length: int,
                  response: int) -> dict:  # fmt: skip
    """Seconds and GFLOP/s of one step of the trainer's own policy update (its forward,
    :func:`training.local.batch.token_log_probs`, :func:`training.local.policy.policy_loss`
    and the backward pass) on ``rows`` random sequences of ``length`` tokens, the last
    ``response`` of each the response; float32 weights, every decoder layer trained, the
    embeddings frozen (as the quick start's ``model.trainable_layers: 30``). Best of 3."""
    import numpy as np
    import torch

    from training.local.batch import make_batch, token_log_probs
    from training.local.model import load_model
    from training.local.policy import policy_loss
    from training.local.precision import compute, prepare_models
    from training.local.schema import AlgoConfig
    from training.records import StepRecords

    model = load_model(model_path, "float32")
    model.get_input_embeddings().requires_grad_(False)
    prepare_models(compute_dtype, "cpu", model)
    model.train()
    generator = torch.Generator().manual_seed(0)
    records = StepRecords()
    for row in range(rows):
        ids = torch.randint(0, model.config.vocab_size, (length,), generator=generator).tolist()
        records.append(
            prompt_ids=ids[: length - response], response_ids=ids[length - response :],
            old_log_probs=[0.0] * response, reward=0.0, anchor="", anchor_text=None,
            group_id=0, traj_id=row, is_action_valid=True,
        )  # fmt: skip
    batch = make_batch(records, np.arange(rows), np.linspace(-1, 1, rows), 0)
    algo = AlgoConfig()
    best = float("inf")
    for attempt in range(4):  # the first is a warm-up
        model.zero_grad(set_to_none=True)
        tick = time.perf_counter()
        with compute(compute_dtype, "cpu"):
            log_probs, entropy = token_log_probs(model, batch, with_entropy=True,
                                                 entropy_grad=False)  # fmt: skip
            batch.old_log_probs = log_probs.detach()
            loss, _stats = policy_loss(log_probs, batch, None, algo, entropy)
        loss.backward()
        if attempt:
            best = min(best, time.perf_counter() - tick)
    counts = step_flops(model.config, rows, length, response)
    return {
        "seconds": round(best, 4),
        "gflops": round(counts["flops"] / best / 1e9, 1),
        "gflops_6n": round(counts["flops_6n"] / best / 1e9, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny | smollm2 | qwen2.5-1.5b | a dir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--env", default="gigpo/Sokoban-v0")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=4, help="the env's max_steps")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--estimator", default="gigpo")
    parser.add_argument("--compute-dtype", default="auto", help="auto | float32 | bfloat16")
    parser.add_argument("--batch", type=int, default=16, help="update_gflops: rows")
    parser.add_argument("--length", type=int, default=96, help="update_gflops: tokens a row")
    parser.add_argument(
        "--response", type=int, default=32, help="update_gflops: response tokens a row"
    )
    parser.add_argument(
        "--keep-freed-memory", type=int, default=1, help="1: the trainer's run.keep_freed_memory"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.keep_freed_memory:
        from training.local.allocator import keep_freed_memory

        keep_freed_memory()

    from training.local.config import load_config
    from training.local.train import train

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        out = Path(tmp) / "run"
        model = args.model
        extra = []
        if model == "tiny":
            model = "tiny-random"
            extra = ["--model.tiny_warmup_steps=120"]
        elif model == "qwen2.5-1.5b":
            model = str(build_sized_model(Path(tmp) / "qwen2.5-1.5b", args.dtype))
        room = "dim_room: [6, 6], num_boxes: 1, " if args.env == "gigpo/Sokoban-v0" else ""
        env_kwargs = [f"--env.kwargs={{{room}max_steps: {args.max_steps}}}"]
        config = load_config(
            None,
            [
                f"--model.name_or_path={model}",
                f"--model.device={args.device}",
                f"--model.dtype={args.dtype}",
                f"--model.compute_dtype={args.compute_dtype}",
                f"--env.id={args.env}",
                f"--env.num_groups={args.groups}",
                f"--env.group_size={args.group_size}",
                "--env.history_length=1",
                f"--rollout.max_new_tokens={args.max_new_tokens}",
                f"--algo.estimator={args.estimator}",
                "--algo.kl_coef=0.01",
                f"--run.iterations={args.iterations}",
                "--run.checkpoint_every=0",
                "--run.progress=false",
                f"--out={out}",
                *env_kwargs,
                *extra,
            ],
        )
        rows = train(config) if args.iterations else []
        from training.local.model import resolve_model_path

        model_path = resolve_model_path(config.model, out)
        baseline = bare_generate_seconds(config, model_path) if rows else 0.0
        gflops = None
        if args.device == "cpu":
            import torch

            shape = (args.batch, args.length, args.response)
            gflops = {
                "what": "update_gflops",
                "size": {
                    "model": args.model,
                    "batch": args.batch,
                    "length": args.length,
                    "response": args.response,
                    "threads": torch.get_num_threads(),
                    "keep_freed_memory": bool(args.keep_freed_memory),
                },  # fmt: skip
                "float32": update_gflops(model_path, "float32", *shape),
                "bfloat16_autocast": update_gflops(model_path, "bfloat16", *shape),
                "baseline": {
                    "what": "matmul peak GFLOP/s, 2048^3, same threads",
                    "float32": round(matmul_peak_gflops("float32"), 1),
                    "bfloat16": round(matmul_peak_gflops("bfloat16"), 1),
                },
            }
            for name in ("float32", "bfloat16_autocast"):
                peak = gflops["baseline"]["bfloat16" if name != "float32" else "float32"]
                gflops[name]["share_of_peak"] = round(gflops[name]["gflops"] / peak, 3)

    size = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "env": args.env,
        "envs": args.groups * args.group_size,
        "max_steps": args.max_steps,
        "max_new_tokens": args.max_new_tokens,
        "estimator": args.estimator,
        "compute_dtype": args.compute_dtype,
    }
    for row in rows:
        seconds = row["time_iteration"]
        adv_env = row["time_env"] + row["time_advantage"]
        print(
            json.dumps(
                {
                    "what": "local_trainer_iteration",
                    "size": dict(size, iteration=row["iteration"], records=row["step_records"]),
                    "seconds": round(seconds, 4),
                    "throughput": {
                        "env_steps_per_s": round(row["step_records"] / seconds, 3),
                        "generated_tokens_per_s": round(
                            row["generated_tokens"] / row["time_generation"], 2
                        ),
                    },
                    "split_seconds": {
                        "generation": round(row["time_generation"], 4),
                        "env": round(row["time_env"], 4),
                        "advantage": round(row["time_advantage"], 5),
                        "update": round(row["time_update"], 4),
                    },
                    "env_plus_advantage_share": round(adv_env / seconds, 5),
                    "baseline": {
                        "what": "one bare model.generate of the first-turn prompts",
                        "seconds": round(baseline, 4),
                    },
                }
            ),
            flush=True,
        )
    if gflops is not None:
        print(json.dumps(gflops), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

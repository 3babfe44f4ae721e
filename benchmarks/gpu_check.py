"""The local trainer on one GPU at the paper's ALFWorld scale: one check, JSON lines.

Qwen2.5-1.5B's architecture with random weights (built once on the GPU, seeded), the
trainer's own functions, each part in a process of its own (peaks are per process):

- ``limits``: the bf16 matmul peak (8192^3) and the device copy bandwidth, the baselines;
- ``generate``: the trainer's ``generate`` against a bare ``model.generate`` of the same
  prompts (128 x 1,024 tokens, 512 new; random weights never stop early): seconds,
  tokens/s, peak GiB and the memory plan's (target: >= 0.8x the bare tokens/s);
- ``update``: one ``policy_update`` step (float32 weights, bfloat16 autocast, a reference for
  KL, AdamW) on 16 rows x 2,560 tokens (2,048 prompt + 512 response): the whole minibatch in
  one pass, with gradient checkpointing, and in micro-batches of 6,144 tokens: seconds,
  TFLOP/s (model FLOPs: the policy's forward and backward, the reference's forward), share
  of the measured peak (target: >= 35%), peak GiB and the plan's;
- ``resume``: the smoke config on CUDA, 2 iterations then resumed to 3, against a straight
  run of 3: every metric equal;
- ``iteration``: one training iteration at the paper's sizes cut to 10 of its 50 steps (16
  groups x 8 episodes of Sokoban standing in for ALFWorld's text, K = 2, responses up to
  512 tokens, prompts up to 2,048): the time split and peak, scaled to 50 steps (target:
  within 2x the paper's 363 s an iteration) and the plan's peak (target: under 80 GiB);
- ``static``: the trainer's ``generate`` with ``cache="static"``: the first call (compiles),
  a second, and a third with fewer live rows (the same shape: nothing recompiles);
- ``lora``: ``configs/searchqa_7b_lora.yaml``'s shapes on Qwen2.5-7B's architecture (random
  bfloat16 weights made on the GPU, rank-64 adapters on every linear layer through the
  trainer's :mod:`training.local.lora`, gradient checkpointing): the trainer's ``generate``
  for 40 rows x 4,096 + 512 tokens and one ``policy_update`` step (8 rows x 4,608 tokens in
  micro-batches of 9,216, the reference the base with the adapters off), each peak against
  the memory plan's (target: within the plan, which must stay under 80 GiB);
- ``vllm``: ``rollout.engine: vllm`` (needs ``gigpo[vllm]``): the generation part's prompts
  through the trainer's ``generate`` (the baseline), then through
  :class:`training.local.engine.VllmEngine` (bfloat16, half the GPU, sleep mode): tokens/s
  and the ratio, the seconds of an in-place weight load, the GPU memory freed by sleep and
  the engine's log-prob gap to the model's own after the load (target: >= 2x the tokens/s;
  written without a GPU to run it on: untested).

    bash benchmarks/gpu_check.sh                 # on the GPU machine (under 8 minutes)
    python benchmarks/gpu_check.py --tiny        # the same on this CPU at toy sizes
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PARTS = ("limits", "generate", "static", "update", "resume", "iteration", "lora", "vllm")
#: The paper's run, and a toy of it for a dry run on a CPU.
SIZES = {
    "full": {"device": "cuda", "gen_rows": 128, "gen_prompt": 1024, "gen_new": 512,
             "update_rows": 16, "update_prompt": 2048, "update_response": 512,
             "micro_batch_tokens": 6144, "groups": 16, "group_size": 8, "steps": 10,
             "new": 512, "prompt_cap": 2048, "paper_seconds": 363.0, "paper_steps": 50,
             "static_rows": 100, "fits_gib": 80.0, "lora_rows": 40, "lora_prompt": 4096,
             "lora_new": 512, "lora_update_rows": 8, "lora_micro_tokens": 9216},
    "tiny": {"device": "cpu", "gen_rows": 4, "gen_prompt": 32, "gen_new": 8,
             "update_rows": 4, "update_prompt": 48, "update_response": 16,
             "micro_batch_tokens": 128, "groups": 2, "group_size": 2, "steps": 2,
             "new": 8, "prompt_cap": 1024, "paper_seconds": 363.0, "paper_steps": 50,
             "static_rows": 3, "fits_gib": 80.0, "lora_rows": 4, "lora_prompt": 32,
             "lora_new": 8, "lora_update_rows": 4, "lora_micro_tokens": 80},
}  # fmt: skip


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    import torch

    if device.startswith("cuda"):
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return None


def build_model(directory: Path, tiny: bool, device: str) -> Path:
    """Qwen2.5-1.5B's architecture with seeded random bfloat16 weights (initialised on the
    device: seconds, not minutes), and the tiny BPE tokenizer; or the tiny model."""
    import torch
    from bench_train import QWEN25_15B
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.local.model import load_tokenizer
    from training.tiny_model import build_tiny_model

    build_tiny_model(directory)
    if tiny:
        return directory
    tokenizer = load_tokenizer(directory)
    config = Qwen2Config(**QWEN25_15B, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    return directory


def part_limits(size: dict, model_dir: Path) -> None:
    import torch

    device = size["device"]
    row = {"what": "limits", "device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        row["name"] = torch.cuda.get_device_name(0)
        row["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        n = 8192
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        sync(device)
        best = float("inf")
        for _ in range(5):
            tick = time.perf_counter()
            for _ in range(10):
                a @ b
            sync(device)
            best = min(best, (time.perf_counter() - tick) / 10)
        row["bf16_matmul_tflops"] = round(2 * n**3 / best / 1e12, 1)
        x = torch.empty(2**30, dtype=torch.bfloat16, device=device)
        y = torch.empty_like(x)
        y.copy_(x)
        sync(device)
        tick = time.perf_counter()
        for _ in range(10):
            y.copy_(x)
        sync(device)
        row["copy_tb_s"] = round(2 * x.numel() * 2 * 10 / (time.perf_counter() - tick) / 1e12, 2)
    emit(row)


def _config(size: dict, model_dir: Path, out: Path, *extra: str):
    from training.local.config import load_config

    return load_config(None, [
        f"--model.name_or_path={model_dir}", f"--model.device={size['device']}",
        "--model.dtype=float32", "--model.compute_dtype=bfloat16", "--env.id=gigpo/Sokoban-v0",
        "--algo.kl_coef=0.01", f"--out={out}", "--run.progress=false", *extra,
    ])  # fmt: skip


def _random_prompts(tokenizer, rows: int, length: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, len(tokenizer) - 10, (length,), generator=g).tolist()
            for _ in range(rows)]  # fmt: skip


def _generation_sizes(size: dict) -> tuple[int, int, int]:
    """Rows, prompt tokens and new tokens of the generation parts."""
    return size["gen_rows"], size["gen_prompt"], size["gen_new"]


def _generation_inputs(size: dict, model_dir: Path) -> tuple:
    """The tokenizer, the model in bfloat16 on the device, and the random prompts of the
    generation parts."""
    from training.local.model import load_model, load_tokenizer

    tok = load_tokenizer(model_dir)
    model = load_model(model_dir, "bfloat16", trainable=False, device=size["device"])
    return tok, model, _random_prompts(tok, size["gen_rows"], size["gen_prompt"])


def part_generate(size: dict, model_dir: Path) -> None:
    import torch

    from training.local.decoding import generate
    from training.local.memory import model_shape, plan_memory

    device, (rows, prompt, new) = size["device"], _generation_sizes(size)
    tok, model, prompts = _generation_inputs(size, model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(size, model_dir, Path(tmp), "--model.dtype=bfloat16",
                         f"--env.num_groups={rows // 2}", "--env.group_size=2",
                         f"--rollout.max_new_tokens={new}", "--eval.groups=1",
                         "--algo.kl_coef=0")  # fmt: skip
        plan = plan_memory(config, model_shape(config, model_dir), prompt)
    planned = plan.resident["policy"] + sum(plan.generation.values())
    generate(model, tok, prompts, max_new_tokens=4, temperature=1.0)  # warm-up
    results = {}
    for name in ("trainer", "bare"):
        reset_peak(device)
        torch.manual_seed(0)
        sync(device)
        tick = time.perf_counter()
        if name == "trainer":
            ids, _ = generate(model, tok, prompts, max_new_tokens=new, temperature=1.0)
            tokens = sum(len(r) for r in ids)
        else:
            inputs = torch.tensor(prompts, device=device)
            with torch.no_grad():
                out = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                                     max_new_tokens=new, do_sample=True, temperature=1.0,
                                     top_k=0, pad_token_id=tok.pad_token_id)  # fmt: skip
            tokens = rows * (out.shape[1] - prompt)
            del out
        sync(device)
        seconds = time.perf_counter() - tick
        results[name] = {
            "seconds": round(seconds, 2),
            "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1),
            "peak_gib": peak_gib(device),
        }
    trainer, bare = results["trainer"], results["bare"]
    emit(
        {
            "what": "generate",
            "size": {"rows": rows, "prompt": prompt, "new": new, "weights": "bfloat16"},
            "trainer": trainer,
            "baseline": {"what": "bare model.generate", **bare},
            "speed_vs_bare": round(trainer["tokens_per_s"] / bare["tokens_per_s"], 3),
            "plan_peak_gib": round(planned / 2**30, 2),
            "target": ">= 0.8x the bare tokens/s",
        }
    )


def part_static(size: dict, model_dir: Path) -> None:
    import torch

    from training.local.decoding import generate

    device, (rows, prompt, new) = size["device"], _generation_sizes(size)
    tok, model, prompts = _generation_inputs(size, model_dir)

    def graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    calls = []
    for label, batch in (("first (compiles)", prompts), ("second", prompts),
                         ("fewer live rows", prompts[: size["static_rows"]])):  # fmt: skip
        before = graphs()
        reset_peak(device)
        torch.manual_seed(0)
        sync(device)
        tick = time.perf_counter()
        ids, _ = generate(model, tok, batch, max_new_tokens=new, temperature=1.0,
                          cache="static", rows=rows, cache_length=prompt + new)  # fmt: skip
        sync(device)
        seconds = time.perf_counter() - tick
        tokens = sum(len(r) for r in ids)
        calls.append({"call": label, "live_rows": len(batch), "seconds": round(seconds, 2),
                      "tokens_per_s": round(tokens / seconds, 1), "new_graphs": graphs() - before,
                      "peak_gib": peak_gib(device)})  # fmt: skip
    emit(
        {
            "what": "generate_static_cache",
            "size": {"rows": rows, "prompt": prompt, "new": new},
            "calls": calls,
            "recompiled_after_first": any(c["new_graphs"] for c in calls[1:]),
        }
    )


def _update_flops(model_config, rows: int, length: int, response: int) -> float:
    """Model FLOPs of one update step: the policy's forward and backward (bench_train's
    count) and the reference's forward, both over every token (the vocabulary projected
    at the response positions)."""
    from bench_train import step_flops

    h, vocab = model_config.hidden_size, model_config.vocab_size
    head = 2 * rows * response * h * vocab
    policy = step_flops(model_config, rows, length, response)["flops"]
    body = (policy - 2 * head) / 3
    return policy + body + head


def part_update(size: dict, model_dir: Path) -> None:
    import numpy as np
    import torch

    from training.local.memory import model_shape, plan_memory
    from training.local.model import enable_checkpointing, load_models
    from training.local.policy import policy_update
    from training.local.precision import prepare_models
    from training.records import StepRecords

    device = size["device"]
    rows, prompt, response = size["update_rows"], size["update_prompt"], size["update_response"]
    length = prompt + response
    limits = json.loads(os.environ.get("GIGPO_LIMITS", "{}"))
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(size, model_dir, Path(tmp) / "run", f"--algo.minibatch_size={rows}",
                         f"--rollout.max_prompt_tokens={prompt}",
                         f"--rollout.max_new_tokens={response}")  # fmt: skip
        models = load_models(config, Path(tmp) / "run")
        shape = model_shape(config, model_dir)
    prepare_models("bfloat16", device, models.policy, models.reference)
    g = torch.Generator().manual_seed(1)
    records = StepRecords()
    for row in range(rows):
        ids = torch.randint(10, len(models.tokenizer) - 10, (length,), generator=g).tolist()
        records.append(prompt_ids=ids[:prompt], response_ids=ids[prompt:],
                       old_log_probs=[-1.0] * response, reward=0.0, anchor="", anchor_text=None,
                       group_id=0, traj_id=row, is_action_valid=True)  # fmt: skip
    flops = _update_flops(models.policy.config, rows, length, response)
    variants = (("whole minibatch", 0, False),
                (f"micro-batches of {size['micro_batch_tokens']} tokens",
                 size["micro_batch_tokens"], False),
                ("whole minibatch, checkpointing", 0, True))  # fmt: skip
    for label, budget, checkpointing in variants:
        if checkpointing:
            enable_checkpointing(models.policy)
        config.algo.micro_batch_tokens = budget
        config.model.gradient_checkpointing = checkpointing
        plan = plan_memory(config, shape, prompt)
        row = {"what": "update_step", "variant": label,
               "size": {"rows": rows, "length": length, "response": response,
                        "micro_batch_tokens": budget, "checkpointing": checkpointing},
               "plan_peak_gib": round(plan.update_peak / 2**30, 2)}  # fmt: skip
        best = float("inf")
        reset_peak(device)
        try:
            for attempt in range(3):  # the first is a warm-up (and creates AdamW's state)
                sync(device)
                tick = time.perf_counter()
                policy_update(models.policy, models.reference, models.optimizer, records,
                              np.linspace(-1, 1, rows), config.algo,
                              pad_id=models.tokenizer.pad_token_id, temperature=1.0,
                              max_grad_norm=1.0, generator=np.random.default_rng(0),
                              compute_dtype="bfloat16")  # fmt: skip
                sync(device)
                if attempt:
                    best = min(best, time.perf_counter() - tick)
            row.update(seconds=round(best, 3), tflops=round(flops / best / 1e12, 1),
                       peak_gib=peak_gib(device))  # fmt: skip
            if limits.get("bf16_matmul_tflops"):
                row["share_of_peak"] = round(row["tflops"] / limits["bf16_matmul_tflops"], 3)
                row["target"] = ">= 0.35 of the bf16 matmul peak"
        except torch.OutOfMemoryError as exc:
            row.update(out_of_memory=str(exc)[:200], peak_gib=peak_gib(device))
            del exc
        models.optimizer.zero_grad(set_to_none=True)
        emit(row)


def part_resume(size: dict, model_dir: Path) -> None:
    device = size["device"]
    with tempfile.TemporaryDirectory() as tmp:
        base = [sys.executable, "-m", "training.local", "--config", "smoke",
                f"--model.device={device}", "--run.progress=false", "--run.threads=1"]  # fmt: skip
        runs = [("split", 2), ("split", 3), ("straight", 3)]
        for name, iterations in runs:
            cmd = [*base, f"--out={tmp}/{name}", f"--run.iterations={iterations}"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
            if done.returncode:
                emit({"what": "resume", "error": done.stderr[-1500:]})
                return
        rows = {}
        for name in ("split", "straight"):
            lines = Path(tmp, name, "metrics.jsonl").read_text().splitlines()
            rows[name] = [json.loads(line) for line in lines]
    differing = sorted({
        key for a, b in zip(rows["split"], rows["straight"], strict=True) for key in a
        if not key.startswith("time") and key != "threads" and a.get(key) != b.get(key)
    })  # fmt: skip
    emit({"what": "resume", "device": device, "iterations": len(rows["straight"]),
          "resumed_equals_straight": not differing, "differing_metrics": differing,
          "loss": [[r.get("loss") for r in rows[n]] for n in ("split", "straight")]})  # fmt: skip


def part_iteration(size: dict, model_dir: Path) -> None:
    import torch

    from training.local.memory import run_plan
    from training.local.train import train

    device = size["device"]
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(
            size, model_dir, Path(tmp) / "run",
            f"--env.num_groups={size['groups']}", f"--env.group_size={size['group_size']}",
            "--env.history_length=2",
            f"--env.kwargs={{dim_room: [6, 6], num_boxes: 1, max_steps: {size['steps']}}}",
            f"--rollout.max_new_tokens={size['new']}",
            f"--rollout.max_prompt_tokens={size['prompt_cap']}",
            f"--algo.micro_batch_tokens={size['micro_batch_tokens']}",
            "--algo.minibatch_size=256", "--algo.gamma=0.95", "--algo.norm=mean",
            "--algo.invalid_penalty=0.1", "--optim.lr=1e-6", "--run.iterations=1",
            "--run.checkpoint_every=0", "--run.save_rollouts_every=0", "--eval.every=0",
            "--run.report_to=none",
        )  # fmt: skip
        plan = run_plan(config, model_dir)
        reset_peak(device)
        (row,) = train(config)
    scale = size["paper_steps"] / size["steps"]
    split = {k: round(row[f"time_{k}"], 2) for k in ("generation", "env", "advantage", "update")}
    emit({
        "what": "iteration", "size": {"envs": size["groups"] * size["group_size"],
                                      "steps": size["steps"], "history": 2,
                                      "max_new_tokens": size["new"],
                                      "max_prompt_tokens": size["prompt_cap"],
                                      "micro_batch_tokens": size["micro_batch_tokens"],
                                      "records": row["step_records"],
                                      "generated_tokens": row["generated_tokens"]},
        "seconds": round(row["time_iteration"], 1), "split_seconds": split,
        "scaled_to_paper_steps_seconds": round(row["time_iteration"] * scale, 1),
        "baseline": {"what": "the paper's seconds an iteration", "seconds": size["paper_seconds"]},
        "scaled_over_paper": round(row["time_iteration"] * scale / size["paper_seconds"], 2),
        "peak_gib": peak_gib(device), "plan_peak_gib": round(plan.peak / 2**30, 2),
        "fits_gib": size["fits_gib"], "target": "scaled within 2x the paper; peak < fits_gib",
        "torch_peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)
        if device.startswith("cuda") else None,
    })  # fmt: skip


def part_lora(size: dict, model_dir: Path) -> None:
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.local.decoding import generate
    from training.local.lora import BaseReference, add_adapters
    from training.local.memory import model_shape, plan_memory
    from training.local.model import enable_checkpointing, load_tokenizer, make_optimizer
    from training.local.policy import policy_update
    from training.local.precision import prepare_models
    from training.local.shapes import known_config
    from training.records import StepRecords

    device, tiny = size["device"], size["device"] == "cpu"
    rows, prompt, new = size["lora_rows"], size["lora_prompt"], size["lora_new"]
    hf = AutoConfig.from_pretrained(model_dir) if tiny else known_config("Qwen/Qwen2.5-7B")
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(size, model_dir, Path(tmp), "--model.lora_rank=64",
                         "--model.lora_alpha=64", "--model.gradient_checkpointing=true",
                         f"--env.num_groups={rows // 2}", "--env.group_size=2",
                         "--eval.groups=1", "--algo.kl_coef=0.001",
                         f"--algo.minibatch_size={size['lora_update_rows']}",
                         f"--algo.micro_batch_tokens={size['lora_micro_tokens']}",
                         f"--rollout.max_prompt_tokens={prompt}",
                         f"--rollout.max_new_tokens={new}")  # fmt: skip
    plan = plan_memory(config, model_shape(config, hf), prompt)
    tok = load_tokenizer(model_dir)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # the frozen base, made in the compute dtype
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(hf)
    finally:
        torch.set_default_dtype(default)
    model.eval()
    enable_checkpointing(model)
    adapter = add_adapters(model, config.model)
    policy = adapter.get_base_model()
    prepare_models("bfloat16", device, policy)
    optimizer = make_optimizer(policy, 1e-5, 0.0)
    row = {"what": "lora", "size": {"rows": rows, "prompt": prompt, "new": new,
                                    "update_rows": size["lora_update_rows"],
                                    "micro_batch_tokens": size["lora_micro_tokens"]},
           "adapter_parameters": sum(p.numel() for p in policy.parameters() if p.requires_grad),
           "plan_generation_peak_gib": round(plan.generation_peak / 2**30, 2),
           "plan_update_peak_gib": round(plan.update_peak / 2**30, 2),
           "target": "each measured peak within the plan's; the plan under 80 GiB"}  # fmt: skip
    prompts = _random_prompts(tok, rows, prompt)
    try:
        reset_peak(device)
        sync(device)
        tick = time.perf_counter()
        with torch.autocast("cuda" if device.startswith("cuda") else "cpu", torch.bfloat16):
            ids, _ = generate(policy, tok, prompts, max_new_tokens=new, temperature=1.0)
        sync(device)
        seconds = time.perf_counter() - tick
        tokens = sum(len(r) for r in ids)
        row["generate"] = {"seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds),
                           "peak_gib": peak_gib(device)}  # fmt: skip
        del ids
        records = StepRecords()
        g = torch.Generator().manual_seed(1)
        for i in range(size["lora_update_rows"]):
            ids = torch.randint(10, len(tok) - 10, (prompt + new,), generator=g).tolist()
            records.append(prompt_ids=ids[:prompt], response_ids=ids[prompt:],
                           old_log_probs=[-1.0] * new, reward=0.0, anchor="", anchor_text=None,
                           group_id=0, traj_id=i, is_action_valid=True)  # fmt: skip
        reset_peak(device)
        best = float("inf")
        for attempt in range(2):  # the first is a warm-up (and creates AdamW's state)
            sync(device)
            tick = time.perf_counter()
            policy_update(policy, BaseReference(adapter), optimizer, records,
                          np.linspace(-1, 1, len(records)), config.algo,
                          pad_id=tok.pad_token_id, temperature=1.0, max_grad_norm=1.0,
                          generator=np.random.default_rng(0), compute_dtype="bfloat16")  # fmt: skip
            sync(device)
            if attempt:
                best = min(best, time.perf_counter() - tick)
        row["update"] = {"seconds": round(best, 2), "peak_gib": peak_gib(device)}
    except torch.OutOfMemoryError as exc:
        row.update(out_of_memory=str(exc)[:200], peak_gib=peak_gib(device))
    emit(row)


def part_vllm(size: dict, model_dir: Path) -> None:
    import torch

    from training.local.decoding import eos_ids, generate
    from training.local.engine import VllmEngine

    device, (rows, prompt, new) = size["device"], _generation_sizes(size)
    if device == "cpu":  # vLLM's CPU attention takes heads of 32 dims and up
        from training.tiny_model import build_tiny_model

        model_dir = build_tiny_model(model_dir.with_name("tiny32"), head_dim=32)
    tok, model, prompts = _generation_inputs(size, model_dir)
    torch.manual_seed(0)
    sync(device)
    tick = time.perf_counter()
    ids, _ = generate(model, tok, prompts, max_new_tokens=new, temperature=1.0)
    sync(device)
    hf = {"seconds": round(time.perf_counter() - tick, 2), "tokens": sum(len(r) for r in ids)}
    hf["tokens_per_s"] = round(hf["tokens"] / hf["seconds"], 1)
    engine = VllmEngine(model_dir, dtype="bfloat16", seed=0, max_model_len=prompt + new + 8,
                        device=device, gpu_memory_utilization=0.5, sleep=True)  # fmt: skip
    settings = {"max_new_tokens": new, "temperature": 1.0, "eos": eos_ids(model, tok)}
    engine.generate(prompts[:2], **{**settings, "max_new_tokens": 4})  # warm-up
    tick = time.perf_counter()
    ids, _ = engine.generate(prompts, **settings, ignore_eos=True)
    ours = {"seconds": round(time.perf_counter() - tick, 2), "tokens": sum(len(r) for r in ids)}
    ours["tokens_per_s"] = round(ours["tokens"] / ours["seconds"], 1)
    free = torch.cuda.mem_get_info()[0] if device.startswith("cuda") else 0
    engine.sleep()
    freed = (torch.cuda.mem_get_info()[0] - free) / 2**30 if device.startswith("cuda") else None
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(1.01)  # moved weights, as after an update
    load = engine.sync(model)  # wakes it first
    ids, lps = engine.generate(prompts[:4], **{**settings, "max_new_tokens": 16})
    gaps = []
    for p, r, lp in zip(prompts[:4], ids, lps, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([p + r], device=model.device)).logits[0].float()
        own = torch.log_softmax(logits, -1)[len(p) - 1 : -1].gather(
            -1, torch.tensor(r, device=model.device)[:, None]).squeeze(-1)  # fmt: skip
        gaps.append(float((own.cpu() - torch.tensor(lp)).abs().max()))
    emit({"what": "vllm", "size": {"rows": rows, "prompt": prompt, "new": new,
          "weights": "bfloat16"}, "vllm": ours, "baseline": {"what": "trainer generate", **hf},
          "speed_vs_hf": round(ours["tokens_per_s"] / hf["tokens_per_s"], 2),
          "weight_load_seconds": round(load, 2), "freed_by_sleep_gib": freed,
          "logp_gap_max_after_load": round(max(gaps), 4),
          "target": ">= 2x the trainer's tokens/s"})  # fmt: skip


def drive(args: argparse.Namespace) -> int:
    """Builds the model once, then runs each part in a process of its own (its own peak)."""
    size_name = "tiny" if args.tiny else "full"
    sink = open(args.jsonl, "a") if args.jsonl else None  # noqa: SIM115
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        tick = time.perf_counter()
        model_dir = build_model(Path(tmp) / "model", args.tiny, SIZES[size_name]["device"])
        emit({"what": "built", "seconds": round(time.perf_counter() - tick, 1)})
        for part in args.parts or PARTS:
            tick = time.perf_counter()
            cmd = [sys.executable, __file__, "--part", part, "--model-dir", str(model_dir)]
            try:
                done = subprocess.run(cmd + (["--tiny"] if args.tiny else []), env=env,
                                      capture_output=True, text=True, check=False,
                                      timeout=args.part_timeout)  # fmt: skip
                lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
                if done.returncode:
                    lines.append(json.dumps({"what": part, "error": done.stderr[-1500:]}))
            except subprocess.TimeoutExpired:
                lines = [json.dumps({"what": part, "error": f"over {args.part_timeout} s"})]
            for line in lines:
                print(line, flush=True)
                if sink:
                    sink.write(line + "\n")
                    sink.flush()
                if part == "limits":
                    env["GIGPO_LIMITS"] = line
            seconds = round(time.perf_counter() - tick, 1)
            emit({"what": "part_done", "part": part, "seconds": seconds})
    if sink:
        sink.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes on this CPU (a dry run)")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--parts", nargs="*", choices=PARTS, help="run only these parts")
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--jsonl", help="also append every JSON line to this file")
    parser.add_argument("--part-timeout", type=int, default=300, help="seconds a part may run")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.part:
        return drive(args)
    size = SIZES["tiny" if args.tiny else "full"]
    run = {"limits": part_limits, "generate": part_generate, "static": part_static,
           "update": part_update, "resume": part_resume, "iteration": part_iteration,
           "lora": part_lora, "vllm": part_vllm}  # fmt: skip
    run[args.part](size, Path(args.model_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

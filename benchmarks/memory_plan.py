"""The memory plan (``training/local/memory.py``) against measured peaks, on this machine's CPU.

For each case, in a process of its own: the trainer's own generation (``generate`` under
the run's compute dtype) and one policy update step (``policy_update``: the reference's
and the policy's forward passes, the backward pass, AdamW) of two micro-batches (the second
runs with the first's gradients, as every later one of a step does), at the case's sizes,
after one update (AdamW's state exists, as in every iteration after the first), with
every tensor allocation recorded by PyTorch's profiler. The measured peak is the bytes of
the tensors alive before the phase (weights, optimizer state) plus the highest running
total of the phase's allocations: the CPU counterpart of ``torch.cuda.max_memory_allocated``.
Each JSON line has the planned and the measured peak of both phases and their ratio
(target: within 25%).

    python benchmarks/memory_plan.py                 # every case (tiny model, SmolLM2)
    python benchmarks/memory_plan.py --case smollm2-f32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: name -> (model, compute dtype, generation rows, prompt tokens, new tokens, update rows,
#: extra overrides)
CASES = {
    "tiny-f32": ("tiny", "float32", 64, 256, 64, 16, []),
    "tiny-f32-checkpointing": (
        "tiny",
        "float32",
        64,
        256,
        64,
        16,
        ["--model.gradient_checkpointing=true"],
    ),  # fmt: skip
    "tiny-wide-f32": (
        "tiny",
        "float32",
        32,
        384,
        64,
        8,
        ["--model.tiny_hidden_size=256", "--model.tiny_layers=4"],
    ),  # fmt: skip
    "smollm2-f32": ("smollm2", "float32", 16, 256, 64, 4, []),
    "smollm2-f32-checkpointing": (
        "smollm2",
        "float32",
        16,
        256,
        64,
        4,
        ["--model.gradient_checkpointing=true"],
    ),  # fmt: skip
    "smollm2-bf16": ("smollm2", "bfloat16", 16, 256, 64, 4, []),
    "smollm2-bf16-lora": (
        "smollm2",
        "bfloat16",
        16,
        256,
        64,
        4,
        ["--model.trainable_layers=0", "--model.lora_rank=16", "--model.lora_alpha=32"],
    ),  # fmt: skip
}


def allocation_peak(run) -> tuple[int, object]:
    """(the highest running total of the bytes ``run()`` allocated, its result)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    totals = []

    def walk(nodes) -> None:
        for node in nodes:
            if node.tag == _EventType.Allocation:
                totals.append((node.start_time_ns, node.extra_fields.total_allocated))
            walk(node.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    return max((t for _, t in sorted(totals)), default=0), result


def tensor_bytes(*objects) -> int:
    """Bytes of the distinct tensor storages in modules (weights, buffers, gradients) and
    optimizers (their state)."""
    import torch

    seen, total = set(), 0

    def add(t) -> None:
        nonlocal total
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()

    for obj in objects:
        if obj is None:
            continue
        if isinstance(obj, torch.nn.Module):
            for t in (*obj.parameters(), *obj.buffers()):
                add(t)
            for t in obj.parameters():
                if t.grad is not None:
                    add(t.grad)
        else:  # an optimizer
            for state in obj.state.values():
                for t in state.values():
                    add(t)
    return total


def run_case(name: str) -> dict:
    """Plans and measures one case (in this process)."""
    import numpy as np
    import torch

    from training.local import decoding
    from training.local.config import load_config
    from training.local.decoding import generate
    from training.local.memory import model_shape, plan_memory
    from training.local.model import load_models
    from training.local.policy import policy_update
    from training.local.precision import compute, prepare_models, resolve_compute_dtype
    from training.records import StepRecords

    model, dtype, gen_rows, prompt, new, update_rows, extra = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, [
            f"--model.name_or_path={'tiny-random' if model == 'tiny' else 'smollm2'}",
            f"--model.compute_dtype={dtype}", "--model.share_prefix=false",
            "--env.id=gigpo/Sokoban-v0", f"--env.num_groups={gen_rows // 2}",
            "--env.group_size=2", "--eval.groups=1",
            f"--rollout.max_new_tokens={new}", f"--rollout.max_prompt_tokens={prompt}",
            "--algo.kl_coef=0.01", f"--algo.minibatch_size={2 * update_rows}",
            f"--algo.micro_batch_tokens={update_rows * (prompt + new)}",
            f"--out={tmp}/run", "--run.threads=2", *extra,
        ])  # fmt: skip
        plan = plan_memory(config, model_shape(config), prompt)
        compute_dtype, _ = resolve_compute_dtype(dtype, "cpu")
        torch.manual_seed(0)
        models = load_models(config, Path(tmp) / "run")
        prepare_models(compute_dtype, "cpu", models.policy, models.separate_reference())
        tok = models.tokenizer
        vocab = min(len(tok), models.policy.config.vocab_size)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(10, vocab, (prompt,), generator=g).tolist()
                   for _ in range(gen_rows)]  # fmt: skip

        records = StepRecords()  # a minibatch of two micro-batches of update_rows each
        for row in range(2 * update_rows):
            seq = torch.randint(10, vocab, (prompt + new,), generator=g).tolist()
            records.append(prompt_ids=seq[:prompt], response_ids=seq[prompt:],
                           old_log_probs=[-1.0] * new, reward=0.0, anchor="",
                           anchor_text=None, group_id=0, traj_id=row,
                           is_action_valid=True)  # fmt: skip

        def update():
            return policy_update(
                models.policy, models.reference, models.optimizer, records,
                np.linspace(-1, 1, 2 * update_rows), config.algo, pad_id=tok.pad_token_id,
                temperature=1.0, max_grad_norm=1.0, generator=np.random.default_rng(0),
                compute_dtype=compute_dtype,
            )  # fmt: skip

        def play():
            with compute(compute_dtype, "cpu"):
                return generate(models.policy, tok, prompts, max_new_tokens=new, temperature=1.0)

        # As in every iteration after the first: AdamW's state exists (and what else an
        # update leaves behind is counted).
        update()
        # Every row decodes max_new_tokens, the plan's worst case: the end-of-sequence id is
        # one no token has (a stand-in for a model that never stops, as random weights do).
        decoding.eos_ids = lambda model, tokenizer: [vocab + 10**6]
        resident = tensor_bytes(models.policy, models.separate_reference(), models.optimizer)
        gen_peak, (ids, _) = allocation_peak(play)
        longest = max(len(r) for r in ids)
        resident_update = tensor_bytes(models.policy, models.separate_reference(), models.optimizer)
        update_peak, _ = allocation_peak(update)
    measured = {"generation": resident + gen_peak, "update": resident_update + update_peak}
    planned = {"generation": plan.generation_peak, "update": plan.update_peak}
    return {
        "what": "memory_plan_vs_measured",
        "case": name,
        "size": plan.sizes | {"update_rows": update_rows, "sampled_new_tokens": longest},
        "planned_gib": {k: round(v / 2**30, 4) for k, v in planned.items()},
        "measured_gib": {k: round(v / 2**30, 4) for k, v in measured.items()},
        "planned_over_measured": {k: round(planned[k] / measured[k], 3) for k in planned},
        "plan": plan.to_dict(),
        "baseline": "measured: tensor bytes alive before each phase + the profiler's peak "
        "running total of its allocations, in a process of its own",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = args.case or list(CASES)
    if args.in_process:
        for name in names:
            print(json.dumps(run_case(name)), flush=True)
        return 0
    worst = 0.0
    for name in names:  # each case in a process of its own
        out = subprocess.run(
            [sys.executable, __file__, "--in-process", "--case", name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            print(json.dumps({"what": "memory_plan_vs_measured", "case": name,
                              "error": out.stderr[-2000:]}), flush=True)  # fmt: skip
            return 1
        row = json.loads(lines[-1])
        row.pop("plan")
        print(json.dumps(row), flush=True)
        worst = max(worst, *(abs(v - 1) for v in row["planned_over_measured"].values()))
    print(json.dumps({"what": "memory_plan_worst_error", "cases": len(names),
                      "worst_relative_error": round(worst, 3), "target": 0.25}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

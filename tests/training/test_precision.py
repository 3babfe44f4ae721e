"""Mixed precision and thread choice: honest bf16 detection, bounded log-prob change, and a
thread count that gives way to another busy process."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from training.local.config import ConfigError, load_config
from training.local.precision import compute, native_bf16, resolve_compute_dtype
from training.local.threads import ThreadGovernor, usable_cores

#: Token log-probs of SmolLM2 under bfloat16 autocast stay this close to float32's (nats).
MAX_ABS_DIFF, MEAN_ABS_DIFF = 0.5, 0.1


def test_native_bf16_reads_the_cpu_flags():
    assert native_bf16("cpu", "flags\t: fpu sse avx2 avx512f\n") == (
        False, "cpu: none of avx512_bf16/amx_bf16",
    )  # fmt: skip
    assert native_bf16("cpu", "flags\t: fpu avx512f avx512_bf16\n")[0]
    assert native_bf16("cpu", "flags\t: amx_bf16 amx_tile\nflags\t: amx_bf16\n") == (
        True, "cpu: amx_bf16",
    )  # fmt: skip
    # a flag's name inside another word is not the flag
    assert not native_bf16("cpu", "flags\t: no_avx512_bf16x\n")[0]
    assert native_bf16("mps")[0] is False


def test_auto_follows_the_device_and_explicit_settings_stand():
    native, _ = native_bf16("cpu")
    assert resolve_compute_dtype("auto", "cpu")[0] == ("bfloat16" if native else "float32")
    assert resolve_compute_dtype("float32", "cpu") == ("float32", "set by model.compute_dtype")
    assert resolve_compute_dtype("bfloat16", "cpu")[0] == "bfloat16"
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        resolve_compute_dtype("float16", "cpu")
    with pytest.raises(ConfigError, match="model.compute_dtype must be one of"):
        load_config("smoke", ["--model.compute_dtype=half"])


def test_compute_runs_matmuls_in_bf16_and_keeps_float32_weights():
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with compute("bfloat16", "cpu"):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and layer.weight.dtype == torch.float32
    with compute("float32", "cpu"):
        assert layer(x).dtype == torch.float32
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32


@pytest.mark.slow
def test_smollm2_log_probs_under_bf16_stay_within_the_bound():
    from training.local.batch import make_batch, token_log_probs
    from training.local.model import load_model, load_tokenizer
    from training.records import StepRecords
    from training.smollm2 import smollm2_path

    path = smollm2_path()
    tokenizer, model = load_tokenizer(path), load_model(path, "float32")
    records = StepRecords()
    for i in range(8):
        messages = [{"role": "user", "content": f"Number line. You stand at {i}; the "
                     "target is 3. Answer <action>+</action> or <action>-</action>."}]  # fmt: skip
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        response = tokenizer(f"<action>{'+-'[i % 2]}</action>", add_special_tokens=False)
        records.append(
            prompt_ids=prompt, response_ids=response["input_ids"],
            old_log_probs=[0.0] * len(response["input_ids"]), reward=0.0, anchor=str(i),
            anchor_text=None, group_id=0, traj_id=i, is_action_valid=True,
        )  # fmt: skip
    batch = make_batch(records, np.arange(8), np.zeros(8), tokenizer.pad_token_id)
    with torch.no_grad():
        exact = token_log_probs(model, batch)
        with compute("bfloat16", "cpu"):
            mixed = token_log_probs(model, batch)
    assert mixed.dtype == torch.float32  # the log-softmax reads float32 logits
    diff = (exact - mixed).abs()[batch.response_mask.bool()]
    assert float(diff.max()) > 1e-4  # bf16 did run (the bound below is not vacuous)
    assert float(diff.max()) < MAX_ABS_DIFF and float(diff.mean()) < MEAN_ABS_DIFF


def test_fixed_threads_are_kept():
    governor = ThreadGovernor(fixed=1)
    assert governor.update() == 1 == torch.get_num_threads()


def test_a_busy_process_takes_its_core_from_torch():
    before = torch.get_num_threads()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        governor = ThreadGovernor()
        assert governor.others_busy(probe_seconds=1.0) >= 0.6
        # one core of this machine is busy elsewhere: torch keeps off it (never below 1)
        assert governor.update() <= max(1, usable_cores() - 1)
    finally:
        busy.kill()
        busy.wait()
        torch.set_num_threads(before)


def test_a_bf16_run_trains_and_says_what_it_chose(tiny_config, tmp_path, capsys):
    from training.local.train import train

    config = tiny_config(
        "gigpo/NumberLine-v0", "--model.compute_dtype=bfloat16", "--run.iterations=1",
        "--run.checkpoint_every=0", out=tmp_path / "run",
    )  # fmt: skip
    (row,) = train(config)
    assert row["threads"] == 1  # the tests' runs fix run.threads=1
    assert np.isfinite(row["loss"]) and row["step_records"] > 0
    assert "training: compute bfloat16 (set by model.compute_dtype)" in capsys.readouterr().err

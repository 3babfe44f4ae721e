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
from training.local.precision import (
    compute,
    native_bf16,
    prepare_heads,
    prepare_models,
    resolve_compute_dtype,
)
from training.local.threads import ThreadGovernor, usable_cores

#: Token log-probs of SmolLM2 under bfloat16 autocast (float32 head) stay this close to
#: float32's (nats); measured: 0.095 and 0.014.
MAX_ABS_DIFF, MEAN_ABS_DIFF = 0.2, 0.04


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
        prepare_models("bfloat16", "cpu", model)  # as the trainer does
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


def _numberline_records(model_dir, compute_dtype: str, groups: int = 3):
    """Step records of ``groups`` x 3 NumberLine episodes sampled by a model in
    ``compute_dtype``, and its tokenizer."""
    from training.local.model import load_model, load_tokenizer
    from training.local.rollout import collect, make_envs

    tok = load_tokenizer(model_dir)
    model = load_model(model_dir, "float32")
    prepare_models(compute_dtype, "cpu", model)
    envs = make_envs("gigpo/NumberLine-v0", groups, 3, 1, None, {"max_position": 3, "max_steps": 3})
    torch.manual_seed(0)
    with compute(compute_dtype, "cpu"):
        records = collect(model, tok, envs, seed=1, max_new_tokens=8, temperature=1.0).records
    envs.close()
    return records, tok


@pytest.mark.parametrize(
    ("which", "micro"),
    [("tiny", False), ("tiny", True), pytest.param("smollm2", False, marks=pytest.mark.slow)],
)
def test_a_bf16_update_of_an_unmoved_policy_has_a_ratio_of_exactly_one(
    which, micro, tiny_model_dir
):
    """Old log-probs recomputed on the update's own minibatches (``micro``: on each of their
    micro-batches): with a learning rate of 0 no token is clipped and every ratio is 1 to
    the last bit, over several minibatches of different widths and two epochs, though the
    sampler's log-probs differ from them.
    (SmolLM2's wider products also round differently when a row is run in another batch:
    recomputed on other batches, its ratios would not be 1.)"""
    from training.local.model import load_model
    from training.local.policy import policy_update
    from training.local.schema import AlgoConfig
    from training.smollm2 import smollm2_path

    model_dir = tiny_model_dir if which == "tiny" else smollm2_path()
    records, tok = _numberline_records(model_dir, "bfloat16", 3 if which == "tiny" else 1)
    pairs = zip(records.prompt_ids, records.response_ids, strict=True)
    lengths = [len(p) + len(r) for p, r in pairs]
    assert len(set(lengths)) > 1  # minibatches of several widths
    longest = max(lengths)
    budget = 2 * longest if micro else 0  # micro-batches of one or two rows
    model = load_model(model_dir, "float32")
    prepare_models("bfloat16", "cpu", model)
    algo = AlgoConfig(minibatch_size=4, policy_epochs=2, micro_batch_tokens=budget)
    stats = policy_update(
        model, None, torch.optim.SGD(model.parameters(), lr=0.0), records,
        np.linspace(-1.0, 1.0, len(records)), algo,
        pad_id=tok.pad_token_id, temperature=1.0, max_grad_norm=1.0,
        generator=np.random.default_rng(0), share_prefix=True, compute_dtype="bfloat16",
    )  # fmt: skip
    assert stats["clip_frac"] == 0.0 and stats["ratio_max"] == 1.0
    assert (stats["micro_batches"] > 1) == micro
    if which == "smollm2":
        # the sampler (KV cache, left padding) rounded otherwise: without the recomputation
        # the ratio would not have been 1 (the tiny model's 32-wide products round alike
        # on both paths)
        assert stats["rollout_logp_gap_max"] > 0.0


def test_minibatch_plan_keeps_each_minibatch_across_epochs():
    from training.local.policy import minibatch_plan

    plan = minibatch_plan(10, 4, 3, np.random.default_rng(0))
    assert [len(rows) for rows in plan[:3]] == [4, 4, 2]
    for epoch in range(3):
        rows = np.concatenate(plan[3 * epoch : 3 * epoch + 3])
        assert sorted(rows.tolist()) == list(range(10))  # every record once an epoch
    first = {tuple(rows) for rows in plan[:3]}
    assert {tuple(rows) for rows in plan[3:6]} == first == {tuple(rows) for rows in plan[6:]}
    # one epoch draws one permutation, as the update always did
    generator = np.random.default_rng(0)
    assert np.array_equal(np.concatenate(minibatch_plan(10, 4, 1, generator)),
                          np.random.default_rng(0).permutation(10))  # fmt: skip


def test_prepared_heads_project_in_float32_and_keep_the_weights(tiny_model_dir):
    from training.local.model import load_model

    model = load_model(tiny_model_dir, "float32")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        plain = model(input_ids=ids, logits_to_keep=torch.tensor([1, 3])).logits
    keys = list(model.state_dict())
    prepare_heads("float32", "cpu", model)
    prepare_heads("float32", "cpu", model)  # a second call changes nothing
    with torch.no_grad():
        float32 = model(input_ids=ids, logits_to_keep=torch.tensor([1, 3])).logits
    torch.testing.assert_close(float32, plain, rtol=1e-5, atol=1e-5)
    assert list(model.state_dict()) == keys

    model = load_model(tiny_model_dir, "float32")
    prepare_heads("bfloat16", "cpu", model)
    with torch.no_grad(), compute("bfloat16", "cpu"):
        mixed = model(input_ids=ids, logits_to_keep=torch.tensor([1, 3])).logits
    assert mixed.dtype == torch.float32  # the head ran outside autocast
    assert float((mixed - plain).abs().max()) > 0  # ... on a body that computed in bf16
    with pytest.raises(TypeError, match="no output head"):
        prepare_heads("bfloat16", "cpu", torch.nn.Module())


def test_the_logged_entropy_without_gradient_matches_gigpo_algo(tiny_model_dir):
    from gigpo_algo.losses import entropy_from_logits
    from training.local.batch import make_batch, token_log_probs
    from training.local.model import load_model

    records, tok = _numberline_records(tiny_model_dir, "float32")
    model = load_model(tiny_model_dir, "float32")
    batch = make_batch(records, np.arange(6), np.zeros(len(records)), tok.pad_token_id)
    with torch.no_grad():
        lp, fast = token_log_probs(model, batch, 0.7, with_entropy=True, entropy_grad=False)
        lp2, exact = token_log_probs(model, batch, 0.7, with_entropy=True)
    torch.testing.assert_close(fast, exact, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lp, lp2)
    assert float(exact.max()) > 0.1  # not all zero
    # and entropy_from_logits is what both are checked against, at the response tokens (and
    # 0 elsewhere: the vocabulary is projected there only)
    logits = model(input_ids=batch.input_ids).logits[:, :-1].float() / 0.7
    mask = batch.response_mask.bool()
    torch.testing.assert_close(exact[mask], entropy_from_logits(logits)[mask],
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    assert not exact[~mask].any() and not lp[~mask].any()


_HEAP = """
import ctypes, sys, torch
from training.local.allocator import keep_freed_memory
class Info(ctypes.Structure):  # glibc's struct mallinfo2, all size_t
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = libc.mallinfo2()
x = torch.ones(64 * 2**20 // 4)  # 64 MiB
alive = libc.mallinfo2()
del x
freed = libc.mallinfo2()
mib = 2**20
print((alive.hblkhd - before.hblkhd) // mib, (alive.hblkhd - freed.hblkhd) // mib,
      freed.fordblks // mib)
"""


def test_kept_freed_memory_stays_in_the_heap_for_reuse():
    """A 64 MiB tensor made and freed (a process of its own: the setting is global). By
    default glibc maps it on its own and unmaps it on free, so the next one page-faults
    again; once the allocator keeps freed memory it comes from the heap and its pages stay
    there, free for the next minibatch. glibc's own accounting (``mallinfo2``) says which:
    a page-fault count says the same but also counts the host's page moves."""
    out = {}
    for mode in ("default", "keep"):
        run = subprocess.run([sys.executable, "-c", _HEAP, mode], capture_output=True,
                             text=True, check=True)  # fmt: skip
        out[mode] = [int(v) for v in run.stdout.split()]
    mapped, unmapped, _ = out["default"]
    assert mapped >= 64 and unmapped >= 64  # its own mapping, given back on free
    mapped, unmapped, kept_free = out["keep"]
    assert mapped == 0 and unmapped == 0  # from the heap
    assert kept_free >= 64  # and kept there


def test_the_fused_optimizer_takes_the_per_tensor_loops_step(tiny_model_dir):
    """make_optimizer's one-kernel AdamW moves the weights as torch's per-tensor AdamW does
    (same gradients, three steps, weight decay on), and leaves frozen weights out."""
    from training.local.model import load_model, make_optimizer

    models = [load_model(tiny_model_dir, "float32") for _ in range(2)]
    for model in models:
        model.get_input_embeddings().weight.requires_grad_(False)
        for name, weight in model.named_parameters():
            # softmax ignores a key bias: its gradient is rounding noise, which Adam's
            # normalised step blows up to different weights in any two implementations
            if name.endswith("k_proj.bias"):
                weight.requires_grad_(False)
    fused = make_optimizer(models[0], 1e-3, 0.01)
    loop = torch.optim.AdamW([p for p in models[1].parameters() if p.requires_grad], lr=1e-3,
                             weight_decay=0.01, foreach=False)  # fmt: skip
    assert fused.param_groups[0]["fused"] is True
    assert len(fused.param_groups[0]["params"]) == len(loop.param_groups[0]["params"])
    ids = torch.tensor([[3, 5, 7, 11, 13, 17]])
    for _ in range(3):
        for model, optimizer in zip(models, (fused, loop), strict=True):
            optimizer.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
    start = load_model(tiny_model_dir, "float32").state_dict()
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert torch.equal(a, start[name]) is not a.requires_grad, name  # only trainables move

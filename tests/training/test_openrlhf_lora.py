"""LoRA on OpenRLHF 0.11.2: the launcher takes ``--ds.lora.rank``, a LoRA actor trains only its
adapters, and the vLLM engines get the base model's weights with the adapters merged, under
the base model's names (``training.openrlhf.lora_sync``, installed by the worker patches).

The sync and the training step run OpenRLHF's real actor, PEFT and DeepSpeed (ZeRO-3, the
launcher's default, and ZeRO-2) on CPU in one process per stage
(``openrlhf_lora_run.py``, which names its stand-ins: the vLLM engine's receiving side, the
GPU calls, the rollout). What the engine should hold is computed here from PEFT's own
tensors; the names it should hold are the plain transformers model's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from openrlhf_launcher import command_line, dry_run, submitted_args

import training
from training.openrlhf import patch
from training.openrlhf.command import UsageError, plan
from training.openrlhf.lora_sync import sync_items

pytestmark = pytest.mark.openrlhf

HERE = Path(__file__).resolve().parent
RUN = HERE / "openrlhf_lora_run.py"
STANDINS = HERE.parent / "standins"
#: flash-attn's padding helpers without its kernels, as a CPU run of OpenRLHF has them
FLASH_ATTN_CPU = HERE.parents[1] / "training" / "openrlhf" / "flash_attn_cpu"
PACKAGE_ROOT = Path(training.__file__).resolve().parent.parent
RANK, ALPHA = 4, 8
#: The launcher's run, small: an episode-layout NumberLine run of the tiny model.
FLAGS = (
    "--env", "gigpo/NumberLine-v0", "--env.num_tasks", "2", "--group_size", "4",
    "--gigpo.layout", "episode", "--actor.num_gpus_per_node", "1",
    "--ref.num_gpus_per_node", "1", "--vllm.num_engines", "1",
    "--ds.attn_implementation", "sdpa",  # flash-attn is GPU only
    "--rollout.batch_size", "2", "--rollout.micro_batch_size", "2",
    "--train.batch_size", "8", "--train.micro_batch_size", "2",
    "--data.max_len", "1024", "--rollout.max_new_tokens", "16", "--env.max_new_tokens", "16",
    "--actor.adam.lr", "1e-2", "--actor.lr_warmup_ratio", "0",
    "--vllm.enable_prefix_caching",
)  # fmt: skip
LORA = ("--ds.lora.rank", str(RANK), "--ds.lora.alpha", str(ALPHA))
#: One process: Ray, one engine, the actor built twice over (DeepSpeed), four syncs, a step.
RUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def lora_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from training.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("lora") / "model")


@pytest.fixture(scope="module", params=[3, 2], ids=["zero3", "zero2"])
def lora_run(request: pytest.FixtureRequest, lora_model_dir: Path) -> dict:
    """``openrlhf_lora_run.py``'s output for the launcher's LoRA run at one ZeRO stage."""
    work = Path(tempfile.mkdtemp(prefix="orl", dir="/tmp"))  # Ray's socket paths are short
    try:
        result = dry_run(
            *FLAGS, *LORA, "--ds.zero_stage", str(request.param),
            "--actor.model_name_or_path", str(lora_model_dir),
            "--gigpo.dataset_dir", str(work),
            "--ckpt.path", str(work / "ckpt"), "--ckpt.output_dir", str(work / "final"),
            # the engines' own sync group (OpenRLHF's broadcast path); the run also syncs by
            # IPC handles, OpenRLHF's path under the launcher's --train.colocate_all
            "--vllm.sync_backend", "gloo",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        job = {"args": submitted_args(result.stdout), "ray_tmp": str(work / "r"),
               "out": str(work / "out.pt")}  # fmt: skip
        path = os.pathsep.join(map(str, (STANDINS, FLASH_ATTN_CPU, PACKAGE_ROOT)))
        env = {**os.environ, "PYTHONPATH": path,
               "RAY_USAGE_STATS_ENABLED": "0", "PYTHONFAULTHANDLER": "1"}  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, str(RUN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env, cwd=work, start_new_session=True,
        )  # fmt: skip
        try:
            _, err = process.communicate(json.dumps(job), timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = process.communicate(timeout=30)
            pytest.fail(f"openrlhf_lora_run.py ran past {RUN_TIMEOUT_S} s:\n{err[-6000:]}")
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # what it left behind (Ray's processes)
            except (ProcessLookupError, PermissionError):
                pass
        assert process.returncode == 0, err[-6000:]
        return torch.load(work / "out.pt", weights_only=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plain_names(model_dir: Path) -> list[str]:
    """The parameter names vLLM loads: the plain transformers model's (its checkpoint's)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return [name for name, _ in model.named_parameters()]


def _merged_by_hand(state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """From PEFT's tensors: every base weight under the plain model's name, in float64, with
    ``alpha / r * B @ A`` added to each adapted layer's weight; and those deltas."""
    expected, deltas = {}, {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        plain = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        expected[plain] = tensor.double()
        if name.endswith(".base_layer.weight"):
            layer = name.removesuffix(".base_layer.weight")
            a = state[f"{layer}.lora_A.default.weight"].double()
            b = state[f"{layer}.lora_B.default.weight"].double()
            deltas[plain] = ALPHA / RANK * (b @ a)
            expected[plain] = expected[plain] + deltas[plain]
    return expected, deltas


def _within_rounding(got: torch.Tensor, expected: torch.Tensor, delta: torch.Tensor) -> bool:
    """``got`` (bfloat16) is ``expected`` rounded, give or take the rounding of the delta:
    bfloat16 keeps 8 significant bits."""
    bound = 2.0**-8 * (expected.abs() + delta.abs()) + 1e-30
    return bool(((got.double() - expected).abs() <= bound).all())


def test_the_engines_get_the_base_models_names_with_the_adapters_merged(
    lora_run: dict, lora_model_dir: Path
):
    plain = _plain_names(lora_model_dir)
    assert any(".q_proj.weight" in n for n in plain)
    expected, deltas = _merged_by_hand(lora_run["after"])
    assert sorted(expected) == sorted(plain) and len(deltas) == 7 * 2  # all-linear, 2 layers
    for sync in ("broadcast", "ipc"):
        got = lora_run[sync]
        # every parameter vLLM loads, each once; no PEFT name, no adapter
        assert Counter(got["names"]) == Counter(plain), sync
        for name in plain:
            tensor = got["loaded"][name]
            assert tensor.dtype == torch.bfloat16, (sync, name)
            if name in deltas:
                assert _within_rounding(tensor, expected[name], deltas[name]), (sync, name)
                # the adapters trained: the base weight alone is off by more than rounding
                base = expected[name] - deltas[name]
                assert not _within_rounding(base.to(torch.bfloat16), expected[name], 0 * base)
            else:
                assert torch.equal(tensor.double(), expected[name]), (sync, name)
    for name in plain:
        assert torch.equal(lora_run["broadcast"]["loaded"][name], lora_run["ipc"]["loaded"][name])
    # before training lora_B is PEFT's zeros: the merged weights are the base weights, exactly
    initial, _ = _merged_by_hand(lora_run["before"])
    assert Counter(lora_run["initial"]["names"]) == Counter(plain)
    for name in plain:
        assert torch.equal(lora_run["initial"]["loaded"][name].double(), initial[name]), name
    # one engine weights version per sync, and its prefix cache reset each time
    versions = [lora_run[s]["version"] for s in ("initial", "broadcast", "ipc")]
    assert versions == [1, 2, 3]
    assert lora_run["ipc"]["prefix_cache_resets"] == 3
    # OpenRLHF's own method sends PEFT's names, which the engine (as vLLM) refuses
    error = lora_run["unpatched_error"]
    assert "is no parameter of the model" in error and "'base_model.model." in error


def test_a_training_step_changes_the_adapters_only(lora_run: dict):
    assert (lora_run["lora_rank"], lora_run["lora_alpha"]) == (RANK, ALPHA)  # OpenRLHF's parse
    before, after = lora_run["before"], lora_run["after"]
    assert before.keys() == after.keys()
    adapters = [n for n in before if ".lora_" in n]
    assert len(adapters) == 2 * 7 * 2  # A and B of 7 linears in 2 layers
    for name in before:
        if name not in adapters:
            assert torch.equal(before[name], after[name]), name  # bit-identical
    changed = [n for n in adapters if not torch.equal(before[n], after[n])]
    # lora_B starts at zero, so only B has a gradient on the first step: every B moved
    assert {n for n in adapters if ".lora_B." in n} <= set(changed)
    status = lora_run["status"]
    assert status["actor_grad_norm"] > 0 and torch.isfinite(torch.tensor(status["policy_loss"]))


def test_the_launcher_passes_lora_flags_on():
    result = dry_run("--env", "gigpo/NumberLine-v0", *LORA, "--ds.lora.target_modules",
                     "q_proj", "v_proj")  # fmt: skip
    assert result.returncode == 0, result.stderr
    argv = command_line(result.stdout)
    assert argv[argv.index("--ds.lora.rank") + 1] == str(RANK)
    assert argv[argv.index("--ds.lora.alpha") + 1] == str(ALPHA)
    at = argv.index("--ds.lora.target_modules")
    assert argv[at + 1 : at + 3] == ["q_proj", "v_proj"]
    assert plan([*LORA, "--algo.kl.use_loss"]).openrlhf_args.count("--ds.lora.rank") == 1


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--ds.load_in_4bit", r"--ds.load_in_4bit with --ds.lora.rank: .* 4-bit weight is packed"),
        ("--train.enable_ema", r"--train.enable_ema with --ds.lora.rank: .*moving_average zips"),
    ],
)
def test_what_lora_still_cannot_run_with_is_refused_naming_the_flag(flag, message):
    with pytest.raises(UsageError, match=message):
        plan([*LORA, flag, "--algo.kl.use_loss"])
    result = dry_run("--env", "gigpo/NumberLine-v0", *LORA, flag)
    assert result.returncode == 2 and flag in result.stderr
    plan([flag, "--algo.kl.use_loss"])  # without LoRA, not ours to refuse
    plan(["--ds.lora.rank", "0", flag, "--algo.kl.use_loss"])


def _peft_model(model_dir: Path, targets: str | list[str]):
    """The tiny model with LoRA, as OpenRLHF's ``Actor`` applies it."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=RANK, lora_alpha=ALPHA,
                        target_modules=targets, bias="none")  # fmt: skip
    return get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)


def test_what_a_sync_sends_is_the_plain_models_parameters(lora_model_dir: Path):
    plain = _plain_names(lora_model_dir)
    items = sync_items(_peft_model(lora_model_dir, "all-linear"))
    assert [item.name for item in items] == plain
    merged = sorted(item.name for item in items if item.layer is not None)
    assert merged == sorted(n for n in plain if n.endswith("_proj.weight")) and len(merged) == 14
    assert all(item.trainable == (item.layer is not None) for item in items)  # LoRA trains


@pytest.mark.parametrize("target", ["embed_tokens", "lm_head"])
def test_lora_on_a_tied_weight_cannot_be_merged_for_vllm(lora_model_dir: Path, target: str):
    # the tiny model ties its output layer to its embeddings; vLLM ties them too, so one
    # merged weight would change both, where LoRA changes one
    with pytest.raises(ValueError, match="LoRA on a weight tied to others"):
        sync_items(_peft_model(lora_model_dir, [target]))


def test_the_lora_sync_patch_refuses_an_openrlhf_it_was_not_written_for():
    trainer = type("ActorPPOTrainer", (), {"broadcast_to_vllm": None, "training_step": None})
    changed = SimpleNamespace(ActorPPOTrainer=trainer, torch_dist_barrier_and_cuda_sync=None)
    with pytest.raises(RuntimeError, match="not OpenRLHF 0.11.2's.*get_physical_gpu_id"):
        patch.patch_actor_module(changed)
    assert trainer.broadcast_to_vllm is None  # nothing was wrapped
